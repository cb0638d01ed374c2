// Command bench is the runner of `make bench` (hack/bench.sh builds the
// binaries and calls it as root). It measures what netns-pin adds to a
// pod's network setup and teardown against a do-nothing chained plugin
// built on the same CNI library (test/baseline) and the reference tuning
// plugin, every comparison interleaved round by round, and prints one
// markdown table of medians and ratios on stdout, then a line per ceiling
// (PASS, or over: a ceiling missed is reported, not failed on). With
// -before, a netns-pin build of another revision is measured in the same
// rounds.
//
// It runs the plugins' CNI verbs only (ADD and DEL), no operator command.
// Everything it makes carries a unique prefix and is undone at the end, on
// error, on SIGINT/SIGTERM and on panic.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

type config struct {
	plugin, before, beforeRev, baseline, tuning, cniPath, cnitool string
	inuseTest, inuseTestBefore, benchtime                         string
	count                                                         int
	work, fixtures, prefix, out, header                           string
	scale                                                         float64
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func main() { os.Exit(run()) }

func parseFlags() (c config, err error) {
	flag.StringVar(&c.plugin, "plugin", "bin/netns-pin", "netns-pin binary")
	flag.StringVar(&c.before, "before", "", "netns-pin binary of another revision, measured in the same rounds")
	flag.StringVar(&c.beforeRev, "before-rev", "before", "the revision of -before, for the report")
	flag.StringVar(&c.baseline, "baseline", "", "the do-nothing chained plugin (test/baseline)")
	flag.StringVar(&c.inuseTest, "inuse-test", "", "test binary of inuse/ (go test -c): BenchmarkCheckNode")
	flag.StringVar(&c.inuseTestBefore, "inuse-test-before", "", "the same of -before's revision, when it has BenchmarkCheckNode")
	flag.StringVar(&c.benchtime, "benchtime", "200ms", "-test.benchtime of the Go benchmark")
	flag.IntVar(&c.count, "count", 10, "samples of the Go benchmark")
	flag.StringVar(&c.work, "work", "", "empty temporary folder owned by root; removed at the end")
	flag.StringVar(&c.fixtures, "fixtures", "", "empty temporary folder for fixture trees, tmpfs preferred; removed at the end")
	flag.StringVar(&c.prefix, "prefix", "npb"+host.RandHex(4), "prefix of every netns and link name (<= 8 characters)")
	flag.Float64Var(&c.scale, "scale", 1, "multiplies every round count (0.1 for a smoke run)")
	flag.StringVar(&c.out, "out", "", "also write the report to this file")
	flag.StringVar(&c.header, "header", "", "a line printed above the table")
	flag.Parse()
	switch {
	case os.Geteuid() != 0:
		return c, errors.New("must run as root: it makes network namespaces, links and mounts")
	case c.work == "" || c.fixtures == "" || c.baseline == "" || c.inuseTest == "":
		return c, errors.New("-work, -fixtures, -baseline and -inuse-test are required (hack/bench.sh sets them)")
	case len(c.prefix) > 8:
		return c, fmt.Errorf("-prefix %q: at most 8 characters (interface names are limited to 15)", c.prefix)
	}
	// The reference plugins and cnitool where the other suites find them
	// (NETNS_PIN_CNI_PATH, NETNS_PIN_CNITOOL; by default in .cache).
	if c.cniPath, c.cnitool, err = host.DiscoverCNI(".", "bridge", "macvlan", "host-local", "tuning"); err != nil {
		return c, err
	}
	c.tuning = filepath.Join(c.cniPath, "tuning")
	return c, nil
}

// install copies every plugin compared into one folder, as the installer
// DaemonSet copies netns-pin into /opt/cni/bin, named by its conflist type,
// and puts that folder first on CNI_PATH. Where a binary's file came from
// changes how fast it starts (a file the Go linker wrote is in the page
// cache in small pieces, a copy in large ones), so every binary compared is
// a copy made the same way.
func (c *config) install() error {
	dir := filepath.Join(c.work, "cni-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, p := range map[string]*string{"netns-pin": &c.plugin, "netns-pin-before": &c.before, "baseline": &c.baseline, "tuning": &c.tuning} {
		if *p == "" {
			continue
		}
		dst := filepath.Join(dir, name)
		if err := copyFile(*p, dst); err != nil {
			return fmt.Errorf("install %s: %w", *p, err)
		}
		*p = dst
	}
	c.cniPath = dir + string(os.PathListSeparator) + c.cniPath
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

func run() int {
	c, err := parseFlags()
	if err != nil {
		logf("%v", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	e := &env{work: c.work, fixt: c.fixtures}
	defer e.cleanup() // deferred: on a panic too
	b := &bench{cfg: c, env: e, rss: map[string][]float64{}}
	if err = c.install(); err == nil {
		b.cfg = c
		b.wrap, err = buildRSSWrap(c.work)
	}
	if err != nil {
		logf("%v", err)
		return 1
	}
	start, load0 := time.Now(), procFile("loadavg", 3)
	failed := false
	for _, s := range []struct {
		name string
		run  func(*bench, context.Context) error
	}{{"passthrough", (*bench).passthrough}, {"holder", (*bench).holder}, {"chains", (*bench).chains}, {"inuse", (*bench).inuse}} {
		logf("== %s", s.name)
		if err := s.run(b, ctx); err != nil {
			failed = true
			logf("%s FAILED: %v", s.name, err)
			first, _, _ := strings.Cut(err.Error(), "\n")
			b.notes = append(b.notes, fmt.Sprintf("section %s failed: %s", s.name, first))
		}
	}
	b.peakRSS()
	hostname, _ := os.Hostname()
	var out strings.Builder
	if c.header != "" {
		fmt.Fprintln(&out, c.header)
	}
	fmt.Fprintf(&out, "Host %s, %d CPUs, Linux %s, %s; load average %s at start, %s at the end; %s.\n",
		hostname, runtime.NumCPU(), procFile("sys/kernel/osrelease", 1), runtime.Version(), load0, procFile("loadavg", 3), time.Since(start).Round(time.Second))
	fmt.Fprintln(&out, "Every comparison ran interleaved (A B C, B C A, ...); times are medians of wall time from fork to reap, ratios are of medians; peak RSS is ru_maxrss of "+
		fmt.Sprint(probeRuns)+" probe rounds under rsswrap (fork, exec, wait4).")
	b.print(&out)
	fmt.Print(out.String())
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(out.String()), 0o644); err != nil {
			logf("write %s: %v", c.out, err)
		}
	}
	switch {
	case ctx.Err() != nil:
		logf("interrupted")
		return 130
	case failed:
		return 1
	}
	return 0
}

// procFile is the first n fields of a file below /proc, "?" when it has
// fewer.
func procFile(name string, n int) string {
	data, err := os.ReadFile("/proc/" + name)
	if f := strings.Fields(string(data)); err == nil && len(f) >= n {
		return strings.Join(f[:n], " ")
	}
	return "?"
}

// row is one line of the table, its cells formatted.
type row struct{ name, n, med, ratio, rss string }

// add adds the row of times t (ns) and, when rss is not empty, their peak
// RSS.
func (b *bench) add(name string, t []float64, ratio string, rss []float64) {
	r := row{name: name, n: fmt.Sprint(len(t)), med: ms(median(t)), ratio: ratio, rss: "—"}
	if len(rss) > 0 {
		r.rss = mib(median(rss))
	}
	b.rows = append(b.rows, r)
}

// ceiling adds a ceiling's line: PASS when pass, else over.
func (b *bench) ceiling(what string, pass bool, figures string) {
	mark := "over"
	if pass {
		mark = "PASS"
	}
	b.ceilings = append(b.ceilings, fmt.Sprintf("%s %s: %s", mark, what, figures))
}

func (b *bench) print(w io.Writer) {
	fmt.Fprintf(w, "\n| measurement | n | median | ratio | peak RSS |\n|---|--:|--:|---|--:|\n")
	for _, r := range b.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.name, r.n, r.med, r.ratio, r.rss)
	}
	fmt.Fprintf(w, "\nCeilings (medians, this machine; a ceiling missed is reported, not failed on):\n\n")
	for _, l := range append(b.ceilings, b.notes...) {
		fmt.Fprintln(w, "- "+l)
	}
}

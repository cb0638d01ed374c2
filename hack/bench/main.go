// Command bench is the runner of `make bench` (hack/bench.sh builds the
// binaries and calls it as root). It measures what netns-pin adds to pod
// network setup and teardown against baselines, each comparison
// interleaved round by round (A B C, B C A, C A B, ...) so that load from
// elsewhere on the machine hits every command alike, and prints one
// markdown table with medians, min/max, ratios and peak RSS, then a
// PASS/MISS line per target.
//
// Everything it makes (network namespaces, bridges, pins, sleep
// processes, fixture trees) carries a unique prefix and is undone at the
// end, on error, on SIGINT/SIGTERM and on panic.
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

type config struct {
	plugin, baseline, tuning, cniPath, cnitool, benchstat string
	goBench                                               multiFlag // dir=test-binary
	benchtime                                             string
	goCount                                               int
	work, fixtures, prefix                                string
	scale                                                 float64
	budget                                                time.Duration
	sections, out                                         string
	header                                                multiFlag
	alts                                                  altFlag
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// altFlag is -alt label=binary: candidate netns-pin builds (proposed
// fixes), measured in the same interleaved rounds as the build under test.
type altFlag []alt

type alt struct{ label, bin string }

func (a *altFlag) String() string { return fmt.Sprint(*a) }
func (a *altFlag) Set(v string) error {
	label, path, ok := strings.Cut(v, "=")
	if !ok || label == "" {
		return errors.New("want label=binary")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	*a = append(*a, alt{label: label, bin: abs})
	return nil
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func main() { os.Exit(run()) }

// parseFlags reads the command line.
func parseFlags() (c config, err error) {
	flag.StringVar(&c.plugin, "plugin", "bin/netns-pin", "netns-pin binary")
	flag.StringVar(&c.baseline, "baseline", "", "baseline plugin binary (test/baseline)")
	flag.StringVar(&c.benchstat, "benchstat", ".cache/bin/benchstat", "benchstat binary (golang.org/x/perf/cmd/benchstat)")
	flag.Var(&c.goBench, "gobench", "dir=test-binary: run the Go benchmarks of a package (repeatable)")
	flag.StringVar(&c.benchtime, "benchtime", "200ms", "-test.benchtime of the Go benchmarks")
	flag.IntVar(&c.goCount, "gocount", 10, "-test.count of the Go benchmarks (samples per benchmark)")
	flag.StringVar(&c.work, "work", "", "empty temporary folder owned by root (pinDir, stateDir, conflists); removed at the end")
	flag.StringVar(&c.fixtures, "fixtures", "", "empty temporary folder for fixture trees, tmpfs preferred; removed at the end")
	flag.StringVar(&c.prefix, "prefix", "npb"+host.RandHex(4), "prefix of every netns and link name (<= 8 characters)")
	flag.Float64Var(&c.scale, "scale", 1, "multiplies every round count (0.2 for a smoke run)")
	flag.DurationVar(&c.budget, "budget", 6*time.Minute, "time budget: past it, every remaining loop stops after a few rounds (0: none)")
	flag.StringVar(&c.sections, "sections", "all", "comma-separated subset of: passthrough,holder,chain,gobench,procs,concurrent,size,release")
	flag.StringVar(&c.out, "out", "", "also write the report to this file")
	flag.Var(&c.header, "header", "a line printed above the table (repeatable)")
	flag.Var(&c.alts, "alt", "label=binary: a candidate netns-pin build to compare too, in sections 1, 2 and 5 (repeatable)")
	flag.Parse()

	switch {
	case os.Geteuid() != 0:
		return c, errors.New("must run as root: it makes network namespaces, bridges and mounts")
	case c.work == "" || c.fixtures == "" || c.baseline == "":
		return c, errors.New("-work, -fixtures and -baseline are required (hack/bench.sh sets them)")
	case len(c.prefix) > 8:
		return c, fmt.Errorf("-prefix %q: at most 8 characters (interface names are limited to 15)", c.prefix)
	}
	// The reference plugins and cnitool where the other suites find them:
	// NETNS_PIN_CNI_PATH and NETNS_PIN_CNITOOL, by default in .cache.
	if c.cniPath, c.cnitool, err = host.DiscoverCNI(".", "bridge", "host-local", "tuning"); err != nil {
		return c, err
	}
	for _, p := range []*string{&c.plugin, &c.baseline, &c.benchstat, &c.work, &c.fixtures} {
		if *p, err = filepath.Abs(*p); err != nil {
			return c, fmt.Errorf("absolute path: %w", err)
		}
	}
	return c, nil
}

// install copies every plugin binary measured into one folder of the
// work folder, as the installer DaemonSet copies netns-pin into
// /opt/cni/bin, and points the configuration at the copies. Where a
// binary's file came from changes how fast it starts: a file the Go
// linker wrote is in the page cache in small pieces, a copy in large ones
// (a 5 MiB binary starts about 150 µs sooner as a copy on the machine of
// the figures of docs/performance.md), so every binary compared is a copy made the same
// way, and the figures are those of an installed plugin.
func (c *config) install() error {
	dir := filepath.Join(c.work, "cni-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	c.tuning = filepath.Join(c.cniPath, "tuning")
	bins := []*string{&c.plugin, &c.baseline, &c.tuning}
	names := []string{"netns-pin", "baseline", "tuning"}
	for i := range c.alts {
		bins, names = append(bins, &c.alts[i].bin), append(names, fmt.Sprintf("netns-pin-alt%d", i))
	}
	for i, p := range bins {
		dst := filepath.Join(dir, names[i])
		if err := copyFile(*p, dst); err != nil {
			return fmt.Errorf("install %s: %w", *p, err)
		}
		*p = dst
	}
	c.cniPath = dir + string(os.PathListSeparator) + c.cniPath
	return nil
}

// copyFile copies an executable as cp does (copy_file_range).
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
	// Deferred, cleanup runs on a panic too.
	e := &env{work: c.work, fixt: c.fixtures}
	defer e.cleanup()

	if err := c.install(); err != nil {
		logf("%v", err)
		return 1
	}
	b := &bench{cfg: c, env: e, rep: &report{}}
	if b.wrap, err = buildRSSWrap(c.work); err != nil {
		logf("%v", err)
		return 1
	}
	rssFloor, load0, procs0 := b.rssFloor(ctx), loadavg(), countProcs()
	b.start = time.Now()
	want := map[string]bool{}
	for _, s := range strings.Split(c.sections, ",") {
		want[strings.TrimSpace(s)] = true
	}
	failed := b.runSections(ctx, want)
	b.rssTarget()
	if b.cutShort {
		b.rep.note("the time budget (-budget %s) ran out: later loops stopped after %d rounds (see n)", c.budget, minRounds)
	}
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "?"
	}
	header := append(slices.Clone(c.header),
		fmt.Sprintf("Host %s, %d CPUs, Linux %s, %s; %d processes at start; load average %s at start, %s at the end; runner took %s.",
			hostname, runtime.NumCPU(), procFile("sys/kernel/osrelease", 1), runtime.Version(), procs0, load0, loadavg(), time.Since(b.start).Round(time.Second)),
		"Each comparison ran interleaved (A B C, B C A, ...); ratios are of medians, \"paired\" is the median of per-round ratios. Times are wall time from fork to reap of the child, as a runtime waits for it; CPU is the child's user + system time; "+rssFloor+" (median, and max when higher).")
	var out strings.Builder
	b.rep.print(&out, header)
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

// sections are the parts of the report in their order, with the targets
// of the issue each checks: a target its section did not get to is
// reported as not measured.
var sections = []struct {
	name    string
	run     func(*bench, context.Context) error
	targets []string
}{
	{"passthrough", (*bench).passthrough, []string{
		fmt.Sprintf(tPassBase, "ADD"), fmt.Sprintf(tPassTuning, "ADD"), fmt.Sprintf(tPassBase, "DEL"), fmt.Sprintf(tPassTuning, "DEL"),
	}},
	{"holder", (*bench).holder, []string{tHolderAdd, tHolderDel}},
	{"chain", (*bench).chain, nil},
	{"gobench", (*bench).goBenchmarks, []string{tInUse}},
	{"procs", (*bench).procScaling, nil},
	{"concurrent", (*bench).concurrent, nil},
	{"size", (*bench).sizes, nil},
	{"release", (*bench).release, nil},
}

// runSections runs the sections want selects and reports whether any
// failed or left pins behind.
func (b *bench) runSections(ctx context.Context, want map[string]bool) (failed bool) {
	for _, s := range sections {
		if !want["all"] && !want[s.name] {
			continue
		}
		if ctx.Err() != nil { // interrupted: the rest is not measured
			b.rep.unmeasured(s.targets)
			continue
		}
		t0 := time.Now()
		logf("== %s", s.name)
		// Each section has its own pinDir and stateDir: what a failed one
		// leaves behind does not weigh on the next.
		dir := filepath.Join(b.cfg.work, s.name)
		b.pinDir, b.stateDir = filepath.Join(dir, "pin"), filepath.Join(dir, "state")
		if err := s.run(b, ctx); err != nil {
			failed = true
			logf("%s FAILED: %v", s.name, err)
			first, _, _ := strings.Cut(err.Error(), "\n")
			b.rep.note("section %s failed: %s", s.name, first)
		}
		b.rep.unmeasured(s.targets)
		if left := leftoverMounts(filepath.Join(b.pinDir, "pins")); len(left) > 0 {
			failed = true
			logf("%s left %d pin mount(s): %v", s.name, len(left), left)
			b.rep.note("section %s left %d pin mount(s) behind", s.name, len(left))
			if _, err := host.UnmountUnder(dir, nil); err != nil {
				logf("unmount below %s: %v", dir, err)
			}
		}
		logf("== %s done in %s", s.name, time.Since(t0).Round(100*time.Millisecond))
	}
	return failed
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string { return procFile("loadavg", 3) }

// procFile is the first n fields of a file below /proc, "?" when it has
// fewer.
func procFile(name string, n int) string {
	data, err := os.ReadFile("/proc/" + name)
	if f := strings.Fields(string(data)); err == nil && len(f) >= n {
		return strings.Join(f[:n], " ")
	}
	return "?"
}

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
	"flag"
	"fmt"
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
	plugin, baseline, cniPath, cnitool string
	benchstat                          string
	pluginStripped, baselineStripped   string
	tuningStripped                     string
	goBench                            multiFlag // dir=test-binary
	benchtime                          string
	goCount                            int
	work, fixtures, prefix             string
	scale                              float64
	budget                             time.Duration
	sections                           string
	out                                string
	header                             multiFlag
	alt                                multiFlag // label=binary: candidate netns-pin builds
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func main() { os.Exit(run()) }

// parseFlags reads the command line into c; false when it is not usable.
func parseFlags(c *config) bool {
	flag.StringVar(&c.plugin, "plugin", "bin/netns-pin", "netns-pin binary")
	flag.StringVar(&c.baseline, "baseline", "", "baseline plugin binary (test/baseline)")
	flag.StringVar(&c.cniPath, "cni-path", ".cache/cni/bin", "folder of the reference plugins (bridge, host-local, tuning) and netns-pin")
	flag.StringVar(&c.cnitool, "cnitool", ".cache/bin/cnitool", "cnitool binary")
	flag.StringVar(&c.benchstat, "benchstat", ".cache/bin/benchstat", "benchstat binary (golang.org/x/perf/cmd/benchstat)")
	flag.StringVar(&c.pluginStripped, "plugin-stripped", "", "stripped netns-pin (size only)")
	flag.StringVar(&c.baselineStripped, "baseline-stripped", "", "stripped baseline (size only)")
	flag.StringVar(&c.tuningStripped, "tuning-stripped", "", "stripped tuning (size only)")
	flag.Var(&c.goBench, "gobench", "dir=test-binary: run the Go benchmarks of a package (repeatable)")
	flag.StringVar(&c.benchtime, "benchtime", "200ms", "-test.benchtime of the Go benchmarks")
	flag.IntVar(&c.goCount, "gocount", 10, "-test.count of the Go benchmarks (samples per benchmark)")
	flag.StringVar(&c.work, "work", "", "empty temporary folder owned by root (pinDir, stateDir, conflists); removed at the end")
	flag.StringVar(&c.fixtures, "fixtures", "", "empty temporary folder for fixture trees, tmpfs preferred; removed at the end")
	flag.StringVar(&c.prefix, "prefix", "", "prefix of every netns and link name (<= 8 characters)")
	flag.Float64Var(&c.scale, "scale", 1, "multiplies every round count (0.2 for a smoke run)")
	flag.DurationVar(&c.budget, "budget", 6*time.Minute, "time budget: past it, every remaining loop stops after a few rounds (0: none)")
	flag.StringVar(&c.sections, "sections", "all", "comma-separated subset of: passthrough,holder,chain,gobench,procs,concurrent,size,release")
	flag.StringVar(&c.out, "out", "", "also write the report to this file")
	flag.Var(&c.header, "header", "a line printed above the table (repeatable)")
	flag.Var(&c.alt, "alt", "label=binary: a candidate netns-pin build to compare too, in sections 1, 2 and 5 (repeatable)")
	flag.Parse()

	if os.Geteuid() != 0 {
		logf("must run as root: it makes network namespaces, bridges and mounts")
		return false
	}
	if c.work == "" || c.fixtures == "" || c.baseline == "" {
		logf("-work, -fixtures and -baseline are required (hack/bench.sh sets them)")
		return false
	}
	if c.prefix == "" {
		c.prefix = "npb" + host.RandHex(4)
	}
	if len(c.prefix) > 8 {
		logf("-prefix %q: at most 8 characters (interface names are limited to 15)", c.prefix)
		return false
	}
	for _, p := range []*string{&c.plugin, &c.baseline, &c.cniPath, &c.cnitool, &c.benchstat, &c.work, &c.fixtures} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			logf("%s: %v", *p, err)
			return false
		}
		*p = abs
	}
	return true
}

// parseAlts reads the -alt flags.
func parseAlts(c config) ([]alt, error) {
	var alts []alt
	for _, a := range c.alt {
		label, path, ok := strings.Cut(a, "=")
		if !ok || label == "" {
			return nil, fmt.Errorf("-alt %q: want label=binary", a)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("-alt %q: %v", a, err)
		}
		alts = append(alts, alt{label: label, bin: abs})
	}
	return alts, nil
}

func run() (code int) {
	var c config
	if !parseFlags(&c) {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	e := &env{prefix: c.prefix, work: c.work, fixt: c.fixtures}
	defer e.cleanup()
	defer func() {
		if r := recover(); r != nil {
			e.cleanup()
			panic(r)
		}
	}()

	b := &bench{cfg: c, env: e, rep: &report{}}
	var err error
	if b.alts, err = parseAlts(c); err != nil {
		logf("%v", err)
		return 2
	}
	if b.wrap, err = buildRSSWrap(c.work); err != nil {
		logf("%v", err)
		return 1
	}
	rssFloor := "no C compiler: peak RSS not measured"
	if b.wrap != "" {
		if x, _, err := (call{bin: "/bin/true"}).runRSS(ctx, b.wrap); err == nil {
			rssFloor = fmt.Sprintf("peak RSS is ru_maxrss under rsswrap (fork, exec, wait4), whose floor (/bin/true) is %s", fmtKiB(float64(x.rssKiB)))
		}
	}
	if c.budget > 0 {
		softDeadline = time.Now().Add(c.budget)
	}
	load0, procs0, start := loadavg(), countProcs(), time.Now()
	want := map[string]bool{}
	for _, s := range strings.Split(c.sections, ",") {
		want[strings.TrimSpace(s)] = true
	}
	failed := b.runSections(ctx, want)
	b.verdicts(want)
	if cutShort.Load() {
		b.rep.note("the time budget (-budget %s) ran out: later loops stopped after %d rounds (see n)", c.budget, minRounds)
	}

	hostname, err := os.Hostname()
	if err != nil {
		hostname = "?"
	}
	header := append(append([]string{}, c.header...),
		fmt.Sprintf("Host %s, %d CPUs, %s, %s; %d processes at start; load average %s at start, %s at the end; runner took %s.",
			hostname, runtime.NumCPU(), kernel(), runtime.Version(), procs0, load0, loadavg(), time.Since(start).Round(time.Second)),
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

// runSections runs the sections want selects and reports whether any
// failed or left pins behind.
func (b *bench) runSections(ctx context.Context, want map[string]bool) (failed bool) {
	all := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"passthrough", b.passthrough},
		{"holder", b.holder},
		{"chain", b.chain},
		{"gobench", b.goBenchmarks},
		{"procs", b.procScaling},
		{"concurrent", b.concurrent},
		{"size", b.sizes},
		{"release", b.release},
	}
	for _, s := range all {
		if !want["all"] && !want[s.name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		logf("== %s", s.name)
		// Each section has its own pinDir and stateDir: what a failed one
		// leaves behind does not weigh on the next.
		b.pinDir = filepath.Join(b.cfg.work, s.name, "pin")
		b.stateDir = filepath.Join(b.cfg.work, s.name, "state")
		if err := s.fn(ctx); err != nil {
			failed = true
			logf("%s FAILED: %v", s.name, err)
			b.rep.note("section %s failed: %s", s.name, firstLine(err.Error()))
		}
		if left := leftoverMounts(filepath.Join(b.pinDir, "pins")); len(left) > 0 {
			failed = true
			logf("%s left %d pin mount(s): %v", s.name, len(left), left)
			b.rep.note("section %s left %d pin mount(s) behind", s.name, len(left))
			if _, err := unmountUnder(filepath.Join(b.cfg.work, s.name)); err != nil {
				logf("unmount below %s: %v", filepath.Join(b.cfg.work, s.name), err)
			}
		}
		logf("== %s done in %s", s.name, time.Since(t0).Round(100*time.Millisecond))
	}
	return failed
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "Linux"
	}
	return "Linux " + strings.TrimSpace(string(data))
}

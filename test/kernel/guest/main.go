// Command kernel-guest runs the scenarios of the kernel-client suite
// (test/kernel) inside the qemu guest of hack/vm/build.sh, whose kernel has
// krbd and CephFS: netns-pin exactly as on a node (a conflist [bridge +
// host-local, netns-pin] run by cnitool, a holders rule, a pinDir), clients
// made the way ceph-csi makes them (`nsenter --net=<link> -- ...`), and the
// real kernel's files.
//
// It reads <share>/config.json, written by the host suite, runs the
// scenarios it names in order, and writes <share>/out/results.json after
// each one (so a watchdog power-off still leaves the finished ones) plus the
// kernel files of scenario "parsers" under <share>/out/capture/. Every
// scenario asserts what happened; the host suite turns each into a subtest.
//
// It is built static (CGO_ENABLED=0): the guest has no C library.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// config is what the host suite tells the guest (test/kernel writes it).
type config struct {
	MonIP      string            `json:"monIP"`
	FSID       string            `json:"fsid"`
	Subnet     string            `json:"subnet"`
	RangeStart string            `json:"rangeStart"` // first client address for the scenarios
	RangeSize  int               `json:"rangeSize"`  // client addresses from RangeStart this guest may use
	Pool       string            `json:"pool"`
	RBDUser    string            `json:"rbdUser"` // without "client."
	RBDKey     string            `json:"rbdKey"`
	FSUser     string            `json:"fsUser"`
	FSKey      string            `json:"fsKey"`
	FSName     string            `json:"fsName"`
	Images     map[string]string `json:"images"` // scenario -> rbd image
	Scenarios  []string          `json:"scenarios"`
	OSDTimeout int               `json:"osdTimeout"` // osd_request_timeout (s) of the I/O scenarios
	// the IPv6-only cluster (ms_bind_ipv6), reached through br1
	IPv6 struct {
		MonIP      string `json:"monIP"` // bare address
		Subnet     string `json:"subnet"`
		RangeStart string `json:"rangeStart"`
		RangeSize  int    `json:"rangeSize"`
		RBDKey     string `json:"rbdKey"`
		Image      string `json:"image"`
	} `json:"ipv6"`
}

// result is one scenario's outcome (test/kernel reads it).
type result struct {
	Name     string   `json:"name"`
	Steps    []string `json:"steps"`
	Failures []string `json:"failures"`
	Seconds  float64  `json:"seconds"`
	Row      *ioRow   `json:"row,omitempty"`
}

// ioRow is one line of the side-by-side table.
type ioRow struct {
	Design     string  `json:"design"`
	Removal    string  `json:"removal"`
	Ops        int     `json:"ops"`
	During     int     `json:"during"` // operations completed after the removal began
	Failed     int     `json:"failed"`
	Mismatches int     `json:"mismatches"`
	LongestMS  float64 `json:"longestMS"`
	Hung       bool    `json:"hung"`
	FirstError string  `json:"firstError,omitempty"`
}

var (
	cfg     config
	block   int // client addresses of a scenario's chain
	share   string
	out     string
	results []result
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kernel-guest <share>")
		os.Exit(2)
	}
	share = os.Args[1]
	out = filepath.Join(share, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		fatal("%v", err)
	}
	b, err := os.ReadFile(filepath.Join(share, "config.json"))
	if err != nil {
		fatal("config: %v", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		fatal("config: %v", err)
	}
	// each scenario's chain gets its own block of the guest's client
	// addresses (two holders at most are on one at a time)
	block = min(cfg.RangeSize/max(len(cfg.Scenarios), 1), cfg.IPv6.RangeSize, 10)
	if block < 3 {
		fatal("config: %d client addresses (IPv6: %d) for %d scenarios: want at least 3 each", cfg.RangeSize, cfg.IPv6.RangeSize, len(cfg.Scenarios))
	}
	if err := setup(); err != nil {
		fatal("guest setup: %v", err)
	}
	for i, name := range cfg.Scenarios {
		fn, ok := scenarios[name]
		if !ok {
			fatal("unknown scenario %q", name)
		}
		run(name, i, fn)
	}
	logf("all scenarios done")
}

func fatal(format string, args ...any) {
	logf("FATAL: "+format, args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Printf("[guest %s] %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

var scenarios = map[string]func(*S){
	"krbd":           scenarioKRBD,
	"holder-replace": scenarioHolderReplace,
	"cephfs":         scenarioCephFS,
	"rook-style":     scenarioRookStyle,
	"secure":         scenarioSecure,
	"ipv6":           scenarioIPv6,
	"parsers":        scenarioParsers,
	"nodeplugin":     scenarioNodePlugin,
}

// S is a running scenario: its log, its failures and its cleanups.
type S struct {
	name     string
	index    int
	start    time.Time
	res      *result
	cleanups []func()
}

// abort stops a scenario after a failed must.
type abort struct{}

func run(name string, index int, fn func(*S)) {
	s := &S{name: name, index: index, start: time.Now(), res: &result{Name: name, Steps: []string{}, Failures: []string{}}}
	logf("=== scenario %s", name)
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(abort); !ok {
					s.fail("panic: %v\n%s", r, debug.Stack())
				}
			}
		}()
		fn(s)
	}()
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if r := recover(); r != nil {
					s.fail("cleanup panic: %v", r)
				}
			}()
			s.cleanups[i]()
		}()
	}
	s.res.Seconds = time.Since(s.start).Seconds()
	status := "ok"
	if len(s.res.Failures) > 0 {
		status = fmt.Sprintf("FAILED (%d)", len(s.res.Failures))
	}
	logf("=== scenario %s: %s in %.1fs", name, status, s.res.Seconds)
	results = append(results, *s.res)
	writeResults()
}

func writeResults() {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		fatal("results: %v", err)
	}
	tmp := filepath.Join(out, "results.json.tmp")
	f, err := os.Create(tmp)
	if err == nil {
		_, err = f.Write(b)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(out, "results.json"))
	}
	if err != nil {
		fatal("results: %v", err)
	}
}

// step logs a numbered, timed step (also kept for the host's subtest).
func (s *S) step(format string, args ...any) {
	msg := fmt.Sprintf("[%5.1fs] %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
	s.res.Steps = append(s.res.Steps, msg)
	logf("%s: %s", s.name, msg)
}

// fail records a failure and goes on.
func (s *S) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.res.Failures = append(s.res.Failures, msg)
	s.res.Steps = append(s.res.Steps, "FAIL: "+msg)
	logf("%s: FAIL: %s", s.name, msg)
}

// check records a failure when cond is false and says whether it held.
func (s *S) check(cond bool, format string, args ...any) bool {
	if !cond {
		s.fail(format, args...)
	}
	return cond
}

// must is check, and stops the scenario when cond is false.
func (s *S) must(cond bool, format string, args ...any) {
	if !s.check(cond, format, args...) {
		panic(abort{})
	}
}

// mustOK stops the scenario on an error.
func (s *S) mustOK(err error, format string, args ...any) {
	if err != nil {
		s.fail("%s: %v", fmt.Sprintf(format, args...), err)
		panic(abort{})
	}
}

func (s *S) cleanup(fn func()) { s.cleanups = append(s.cleanups, fn) }

// contains checks that text contains every one of want.
func (s *S) contains(what, text string, want ...string) bool {
	ok := true
	for _, w := range want {
		if !strings.Contains(text, w) {
			s.fail("%s does not contain %q:\n%s", what, w, text)
			ok = false
		}
	}
	return ok
}

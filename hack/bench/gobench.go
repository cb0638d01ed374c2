package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// ---------------------------------------------------------------------
// 4a. the Go benchmarks (inuse.BenchmarkCheck: the in-use check on fixture
// trees of n rbd devices / debugfs clients / mountinfo entries), run from
// their compiled test binaries and summarised by benchstat.

// goBench is one benchmark as benchstat summarises it: by unit
// (benchstat's: sec/op, cpu-sec/op, B/op, allocs/op, refs ...), the median
// of the samples, and the confidence interval of sec/op.
type goBench struct {
	name   string // without "Benchmark" and the -GOMAXPROCS suffix
	center map[string]float64
	ci     string // "±2%", or "∞" with too few samples
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// parseBenchstat reads `benchstat -format csv`: one table per unit, headed
// by ",<unit>,CI", a row "<name>,<center>,<CI>" per benchmark, then
// "geomean".
func parseBenchstat(out []byte) ([]*goBench, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("benchstat output: %w", err)
	}
	var order []*goBench
	byName := map[string]*goBench{}
	unit := ""
	for _, rec := range recs {
		switch {
		case len(rec) < 3:
			continue
		case rec[0] == "":
			if rec[2] == "CI" {
				unit = rec[1]
			}
			continue
		case rec[0] == "geomean" || unit == "":
			continue
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			return nil, fmt.Errorf("benchstat row %q: %w", rec, err)
		}
		name := procsSuffix.ReplaceAllString(rec[0], "")
		if byName[name] == nil {
			byName[name] = &goBench{name: name, center: map[string]float64{}}
			order = append(order, byName[name])
		}
		byName[name].center[unit] = v
		if unit == "sec/op" {
			byName[name].ci = rec[2]
		}
	}
	return order, nil
}

// runGoBench runs the benchmarks of one test binary in dir and returns what
// benchstat makes of their output.
func (b *bench) runGoBench(ctx context.Context, dir, bin, tmp string) ([]*goBench, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", ".", "-test.benchmem",
		"-test.benchtime", b.cfg.benchtime, "-test.count", strconv.Itoa(b.cfg.goCount), "-test.timeout", "5m")
	cmd.Dir = dir
	// Fixture trees on tmpfs, like sysfs and debugfs, which live in
	// memory: on a disk file system the numbers would be the disk's.
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	logf("go benchmarks in %s (benchtime %s, count %d)", dir, b.cfg.benchtime, b.cfg.goCount)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s\n%s", bin, err, out, stderr.Bytes())
	}
	// benchstat reads files only: /dev/stdin is the pipe of out.
	st := host.RunCmd(time.Minute, nil, out, b.cfg.benchstat, "-format", "csv", "/dev/stdin")
	if st.Err != nil {
		return nil, fmt.Errorf("benchstat: %w\n%s", st.Err, st.Stderr)
	}
	results, err := parseBenchstat([]byte(st.Stdout))
	if err == nil && len(results) == 0 {
		err = fmt.Errorf("%s printed no benchmark results:\n%s", bin, out)
	}
	return results, err
}

func (b *bench) goBenchmarks(ctx context.Context) error {
	if len(b.cfg.goBench) == 0 {
		return errors.New("no -gobench test binaries")
	}
	tmp := filepath.Join(b.cfg.fixtures, "gobench")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	for _, spec := range b.cfg.goBench {
		dir, bin, ok := strings.Cut(spec, "=")
		if !ok {
			return fmt.Errorf("-gobench %q: want dir=test-binary", spec)
		}
		results, err := b.runGoBench(ctx, dir, bin, tmp)
		if err != nil {
			return err
		}
		b.goBenchRows(filepath.Base(dir), results)
	}
	return nil
}

var checkName = regexp.MustCompile(`^Check/n=(\d+)/(\w+)$`)

// checkLabels name inuse.BenchmarkCheck's variants by n.
var checkLabels = map[string]string{
	"debugfs":   "in-use check, %[1]d rbd + %[1]d CephFS debugfs clients (Go bench, tmpfs fixture)",
	"mountinfo": "in-use check, %[1]d rbd + %[1]d ceph mountinfo entries, no debugfs (Go bench)",
}

// goBenchRows adds a row per benchmark; those of inuse.BenchmarkCheck say
// how the check grows with n, and its 1000-device debugfs one is a target.
func (b *bench) goBenchRows(pkg string, results []*goBench) {
	type point struct{ med, n float64 }
	prev := map[string]point{} // variant -> at the previous n
	for _, res := range results {
		med := res.center["sec/op"] * 1e9
		r := row{section: "4a", n: fmt.Sprint(b.cfg.goCount), med: fmtDur(med), lo: "—", hi: "—", ratio: "—", note: goBenchNote(res)}
		m := checkName.FindStringSubmatch(res.name)
		if m == nil {
			r.name = fmt.Sprintf("Go bench %s Benchmark%s", pkg, res.name)
			b.rep.add(r)
			continue
		}
		n, _ := strconv.Atoi(m[1]) // \d+
		variant := m[2]
		r.name = fmt.Sprintf("in-use check n=%d %s (Go bench)", n, variant)
		if l, ok := checkLabels[variant]; ok {
			r.name = fmt.Sprintf(l, n)
		}
		if p, ok := prev[variant]; ok {
			// Linear growth: the time per extra device+client (the
			// slope) stays the same from one n to the next.
			r.ratio = fmt.Sprintf("×%.1f for n ×%.1f; %s per extra device+client", med/p.med, float64(n)/p.n, fmtDur((med-p.med)/(float64(n)-p.n)))
		}
		prev[variant] = point{med, float64(n)}
		refs := ""
		if v, ok := res.center["refs"]; ok {
			refs = fmt.Sprintf(" (%.0f refs found)", v)
		}
		r.note = fmt.Sprintf("%s per device+client on average%s; %s", fmtDur(med/float64(n)), refs, r.note)
		b.rep.add(r)
		if n == 1000 && variant == "debugfs" {
			cpu := ""
			if c, ok := res.center["cpu-sec/op"]; ok {
				cpu = fmt.Sprintf(" (CPU %s per check)", fmtDur(c*1e9))
			}
			b.rep.verdict(tInUse, fmt.Sprintf("median %s%s", fmtDur(med), cpu), med < 20e6)
		}
	}
}

// goBenchNote lists CPU time and allocations when the benchmark reports
// them, and benchstat's 95% confidence interval of the median.
func goBenchNote(res *goBench) string {
	var parts []string
	if v, ok := res.center["cpu-sec/op"]; ok {
		parts = append(parts, "CPU "+fmtDur(v*1e9))
	}
	if v, ok := res.center["allocs/op"]; ok {
		parts = append(parts, fmt.Sprintf("%.0f allocs", v))
	}
	if v, ok := res.center["B/op"]; ok {
		parts = append(parts, fmt.Sprintf("%.1f MB alloc", v/1e6))
	}
	return strings.Join(append(parts, "±"+strings.TrimPrefix(res.ci, "±")+" (benchstat)"), ", ")
}

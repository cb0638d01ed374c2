package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ---------------------------------------------------------------------
// 4a. the Go benchmarks (inuse.BenchmarkCheck: the in-use check on fixture
// trees of n rbd devices / debugfs clients / mountinfo entries), run from
// their compiled test binaries and summarised by benchstat.

// goBenchResult is one benchmark as benchstat summarises it: by unit
// (benchstat's: sec/op, cpu-sec/op, B/op, allocs/op, refs ...), the median
// of the samples and its confidence interval.
type goBenchResult struct {
	name  string // without "Benchmark" and the -GOMAXPROCS suffix
	units map[string]benchStat
}

type benchStat struct {
	center float64
	ci     string // "±2%", or "∞" with too few samples
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// parseBenchstat reads `benchstat -format csv`: one table per unit, headed
// by ",<unit>,CI", a row "<name>,<center>,<CI>" per benchmark, then
// "geomean".
func parseBenchstat(out []byte) ([]*goBenchResult, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, err
	}
	var order []*goBenchResult
	byName := map[string]*goBenchResult{}
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
		res := byName[name]
		if res == nil {
			res = &goBenchResult{name: name, units: map[string]benchStat{}}
			byName[name] = res
			order = append(order, res)
		}
		res.units[unit] = benchStat{center: v, ci: rec[2]}
	}
	return order, nil
}

// runGoBench runs the benchmarks of one test binary in dir and returns what
// benchstat makes of their output.
func (b *bench) runGoBench(ctx context.Context, dir, bin, tmp string) ([]*goBenchResult, error) {
	tctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(tctx, bin, "-test.run", "^$", "-test.bench", ".", "-test.benchmem",
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
		return nil, fmt.Errorf("%s: %v\n%s\n%s", bin, err, out, stderr.Bytes())
	}
	raw := filepath.Join(tmp, filepath.Base(bin)+".txt")
	if err := os.WriteFile(raw, out, 0o644); err != nil {
		return nil, err
	}
	stderr.Reset()
	st := exec.CommandContext(tctx, b.cfg.benchstat, "-format", "csv", raw)
	st.Stderr = &stderr
	sum, err := st.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", b.cfg.benchstat, err, stderr.Bytes())
	}
	results, err := parseBenchstat(sum)
	if err == nil && len(results) == 0 {
		err = fmt.Errorf("%s printed no benchmark results:\n%s", bin, out)
	}
	return results, err
}

var checkName = regexp.MustCompile(`^Check/n=(\d+)/(\w+)$`)

func (b *bench) goBenchmarks(ctx context.Context) error {
	if len(b.cfg.goBench) == 0 {
		return fmt.Errorf("no -gobench test binaries")
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
		b.addGoBenchRows(filepath.Base(dir), results)
	}
	return nil
}

func (b *bench) addGoBenchRows(pkg string, results []*goBenchResult) {
	prev := map[string]float64{} // variant -> median at the previous n
	prevN := map[string]int{}
	for _, res := range results {
		med := res.units["sec/op"].center * 1e9
		r := row{section: "4a", n: b.cfg.goCount, med: med, lo: math.NaN(), hi: math.NaN(), ratio: "—"}
		m := checkName.FindStringSubmatch(res.name)
		if m == nil {
			r.name, r.note = fmt.Sprintf("Go bench %s Benchmark%s", pkg, res.name), goBenchNote(res)
			b.rep.add(r)
			continue
		}
		n, _ := strconv.Atoi(m[1]) // \d+
		variant := m[2]
		switch variant {
		case "debugfs":
			r.name = fmt.Sprintf("in-use check, %d rbd + %d CephFS debugfs clients (Go bench, tmpfs fixture)", n, n)
		case "mountinfo":
			r.name = fmt.Sprintf("in-use check, %d rbd + %d ceph mountinfo entries, no debugfs (Go bench)", n, n)
		default:
			r.name = fmt.Sprintf("in-use check n=%d %s (Go bench)", n, variant)
		}
		if p, ok := prev[variant]; ok {
			// Linear growth: the time per extra device+client (the
			// slope) stays the same from one n to the next.
			r.ratio = fmt.Sprintf("×%.1f for n ×%.1f; %s per extra device+client", med/p, float64(n)/float64(prevN[variant]),
				fmtDur((med-p)/float64(n-prevN[variant])))
		}
		prev[variant], prevN[variant] = med, n
		r.note = fmt.Sprintf("%s per device+client on average", fmtDur(med/float64(n)))
		if v, ok := res.units["refs"]; ok {
			r.note += fmt.Sprintf(" (%.0f refs found)", v.center)
		}
		r.note += "; " + goBenchNote(res)
		b.rep.add(r)
		if n == 1000 && variant == "debugfs" {
			b.set(mInUse1000, med)
			if c, ok := res.units["cpu-sec/op"]; ok {
				b.set(mInUse1000CPU, c.center*1e9)
			}
		}
	}
}

// goBenchNote lists CPU time and allocations when the benchmark reports
// them, and benchstat's 95% confidence interval of the median.
func goBenchNote(res *goBenchResult) string {
	var parts []string
	if v, ok := res.units["cpu-sec/op"]; ok {
		parts = append(parts, "CPU "+fmtDur(v.center*1e9))
	}
	if v, ok := res.units["allocs/op"]; ok {
		parts = append(parts, fmt.Sprintf("%.0f allocs", v.center))
	}
	if v, ok := res.units["B/op"]; ok {
		parts = append(parts, fmt.Sprintf("%.1f MB alloc", v.center/1e6))
	}
	return strings.Join(append(parts, "±"+strings.TrimPrefix(res.units["sec/op"].ci, "±")+" (benchstat)"), ", ")
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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
// their compiled test binaries and parsed.

// goBenchResult is one benchmark's samples (one per -test.count) by unit.
type goBenchResult struct {
	name  string
	units map[string][]float64
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.+)$`)

// parseGoBench reads `go test -bench` output.
func parseGoBench(out []byte) []*goBenchResult {
	var order []*goBenchResult
	byName := map[string]*goBenchResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			continue
		}
		res := byName[m[1]]
		if res == nil {
			res = &goBenchResult{name: m[1], units: map[string][]float64{}}
			byName[m[1]] = res
			order = append(order, res)
		}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.units[f[i+1]] = append(res.units[f[i+1]], v)
		}
	}
	return order
}

var checkName = regexp.MustCompile(`^BenchmarkCheck/n=(\d+)/(\w+)$`)

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
		tctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
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
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %v\n%s\n%s", bin, err, out, stderr.Bytes())
		}
		results := parseGoBench(out)
		if len(results) == 0 {
			return fmt.Errorf("%s printed no benchmark results:\n%s", bin, out)
		}
		b.addGoBenchRows(filepath.Base(dir), results)
	}
	return nil
}

func (b *bench) addGoBenchRows(pkg string, results []*goBenchResult) {
	prev := map[string]float64{} // variant -> median at the previous n
	prevN := map[string]int{}
	for _, res := range results {
		ns := res.units["ns/op"]
		m := checkName.FindStringSubmatch(res.name)
		if m == nil {
			r := durRow("4a", fmt.Sprintf("Go bench %s %s", pkg, res.name), ns)
			r.note = goBenchNote(res)
			b.rep.add(r)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		variant := m[2]
		var what string
		switch variant {
		case "debugfs":
			what = fmt.Sprintf("in-use check, %d rbd + %d CephFS debugfs clients (Go bench, tmpfs fixture)", n, n)
		case "mountinfo":
			what = fmt.Sprintf("in-use check, %d rbd + %d ceph mountinfo entries, no debugfs (Go bench)", n, n)
		default:
			what = fmt.Sprintf("in-use check n=%d %s (Go bench)", n, variant)
		}
		r := durRow("4a", what, ns)
		med := median(ns)
		if p, ok := prev[variant]; ok {
			// Linear growth: the time per extra device+client (the
			// slope) stays the same from one n to the next.
			r.ratio = fmt.Sprintf("×%.1f for n ×%.1f; %s per extra device+client", med/p, float64(n)/float64(prevN[variant]),
				fmtDur((med-p)/float64(n-prevN[variant])))
		} else {
			r.ratio = "—"
		}
		prev[variant], prevN[variant] = med, n
		note := fmt.Sprintf("%s per device+client on average", fmtDur(med/float64(n)))
		if v := res.units["refs"]; len(v) > 0 {
			note += fmt.Sprintf(" (%.0f refs found)", median(v))
		}
		r.note = note + "; " + goBenchNote(res)
		b.rep.add(r)
		if n == 1000 && variant == "debugfs" {
			b.set("inuse.1000", med)
			if c := res.units["cpu-ns/op"]; len(c) > 0 {
				b.set("inuse.1000.cpu", median(c))
			}
		}
	}
}

// goBenchNote lists CPU time and allocations when the benchmark reports them.
func goBenchNote(res *goBenchResult) string {
	var parts []string
	if v := res.units["cpu-ns/op"]; len(v) > 0 {
		parts = append(parts, "CPU "+fmtDur(median(v)))
	}
	if v := res.units["allocs/op"]; len(v) > 0 {
		parts = append(parts, fmt.Sprintf("%.0f allocs", median(v)))
	}
	if v := res.units["B/op"]; len(v) > 0 {
		parts = append(parts, fmt.Sprintf("%.1f MB alloc", median(v)/1e6))
	}
	return strings.Join(parts, ", ")
}

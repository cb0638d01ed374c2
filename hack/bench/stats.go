package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// sample is one measured invocation: wall time from fork to reap, the
// child's user + system time (and its children's) and, under rsswrap, its
// peak resident set (getrusage ru_maxrss, KiB; 0 otherwise).
type sample struct {
	d, cpu time.Duration
	rssKiB int64
}

// series is what one command of a comparison measured, one figure per run
// in run order: runs of interleaved commands pair up by index.
type series struct {
	d, cpu []float64 // nanoseconds
	rss    []float64 // KiB, of the runs under rsswrap
}

func (s *series) add(x sample) {
	s.d = append(s.d, float64(x.d))
	s.cpu = append(s.cpu, float64(x.cpu))
	if x.rssKiB > 0 {
		s.rss = append(s.rss, float64(x.rssKiB))
	}
}

func (s *series) merge(o series) {
	s.d, s.cpu, s.rss = append(s.d, o.d...), append(s.cpu, o.cpu...), append(s.rss, o.rss...)
}

// minRounds is how many rounds every loop still runs once the time budget
// (-budget) has run out, so that a machine under heavy load still gets a
// whole report in bounded time.
const minRounds = 5

// probeRuns is how many runs under rsswrap give a command's peak RSS.
const probeRuns = 3

// roundFunc runs round r of every command of a comparison, under rsswrap
// wrap unless it is "", and adds what it measured to out.
type roundFunc func(ctx context.Context, r int, wrap string, out []series) error

// measure runs probes rounds under rsswrap (the peak RSS, and a warm-up),
// then up to rounds timed ones, and returns the series of n commands of
// both.
func (b *bench) measure(ctx context.Context, n, probes, rounds int, round roundFunc) (ss, rss []series, err error) {
	ss, rss = make([]series, n), make([]series, n)
	for r := range probes {
		if err := round(ctx, r, b.wrap, rss); err != nil {
			return nil, nil, fmt.Errorf("probe %d: %w", r, err)
		}
	}
	for r := range rounds {
		if r >= minRounds && b.cfg.budget > 0 && time.Since(b.start) > b.cfg.budget {
			b.cutShort = true
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if err := round(ctx, r, "", ss); err != nil {
			return nil, nil, fmt.Errorf("round %d: %w", r, err)
		}
	}
	return ss, rss, nil
}

// rotate is the round of n commands run one after the other, the order
// rotating every round (A B C, B C A, C A B, ...) so that load from
// elsewhere on the machine hits every command alike.
func rotate(n int, run func(ctx context.Context, i int, wrap string) (sample, error)) roundFunc {
	return func(ctx context.Context, r int, wrap string, out []series) error {
		for k := range n {
			i := (k + r) % n
			x, err := run(ctx, i, wrap)
			if err != nil {
				return err
			}
			out[i].add(x)
		}
		return nil
	}
}

// median of a slice (not modified); NaN when empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// minMax is the smallest and the largest of v; NaN when v is empty.
func minMax(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(v), slices.Max(v)
}

// pairedRatio is the median of the per-round ratios a[i]/b[i]: rounds are
// interleaved, so a burst of load from elsewhere hits both commands of a
// round and cancels out of this figure better than out of a ratio of
// medians.
func pairedRatio(a, b []float64) float64 {
	var r []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return median(r)
}

// ratioOf formats the ratio of the medians of a and b.
func ratioOf(a, b []float64) string { return fmtRatio(median(a) / median(b)) }

// versus formats how t compares with ref: "1.23×<what> (paired 1.30×)".
func versus(t, ref *series, what string) string {
	return fmt.Sprintf("%s%s (paired %s)", ratioOf(t.d, ref.d), what, fmtRatio(pairedRatio(t.d, ref.d)))
}

// over formats what t adds to base: "+1.20 ms over baseline", or "73 µs
// under baseline" when it is faster.
func over(t, base *series) string {
	d := median(t.d) - median(base.d)
	if d < 0 {
		return fmtDur(-d) + " under baseline"
	}
	return "+" + fmtDur(d) + " over baseline"
}

// cpuNote is the child's median CPU time (user + system), which load from
// elsewhere inflates far less than wall time.
func cpuNote(s *series) string { return "CPU " + fmtDur(median(s.cpu)) }

// durUnits are the forms of fmtDur, largest first.
var durUnits = []struct {
	min, unit float64
	format    string
}{{10e9, 1e9, "%.1f s"}, {1e9, 1e9, "%.2f s"}, {100e6, 1e6, "%.0f ms"}, {10e6, 1e6, "%.1f ms"}, {1e6, 1e6, "%.2f ms"}, {1e3, 1e3, "%.0f µs"}, {0, 1, "%.0f ns"}}

// fmtDur formats nanoseconds for people.
func fmtDur(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "—"
	case ns < 0:
		return "−" + fmtDur(-ns)
	}
	u := durUnits[len(durUnits)-1]
	for _, d := range durUnits {
		if ns >= d.min {
			u = d
			break
		}
	}
	return fmt.Sprintf(u.format, ns/u.unit)
}

func fmtKiB(kib float64) string { return fmt.Sprintf("%.1f MiB", kib/1024) }

func fmtBytes(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

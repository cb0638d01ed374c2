package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// sample is one measured invocation: wall time from fork to reap, and the
// child's peak resident set (getrusage ru_maxrss, KiB).
type sample struct {
	d      time.Duration
	cpu    time.Duration // user + system time of the child (and its children)
	rssKiB int64
}

// series is what one command of a comparison measured.
type series struct {
	samples []sample
}

func (s *series) add(x sample) { s.samples = append(s.samples, x) }

func (s *series) durations() []float64 {
	return s.values(func(x sample) float64 { return float64(x.d) })
}

func (s *series) cpu() []float64 {
	return s.values(func(x sample) float64 { return float64(x.cpu) })
}

// rss is the peak RSS of the samples that have one.
func (s *series) rss() []float64 {
	v := s.values(func(x sample) float64 { return float64(x.rssKiB) })
	return slices.DeleteFunc(v, func(kib float64) bool { return kib <= 0 })
}

func (s *series) values(f func(sample) float64) []float64 {
	out := make([]float64, len(s.samples))
	for i, x := range s.samples {
		out[i] = f(x)
	}
	return out
}

// median of a slice (not modified); NaN when empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Min(v)
}

func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

// pairedRatio is the median of the per-round ratios a[i]/b[i]: rounds are
// interleaved, so a burst of load from elsewhere hits both commands of a
// round and cancels out of this figure better than out of a ratio of
// medians.
func pairedRatio(a, b []float64) float64 {
	n := min(len(a), len(b))
	r := make([]float64, 0, n)
	for i := range n {
		if b[i] > 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return median(r)
}

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

func fmtKiB(kib float64) string {
	if math.IsNaN(kib) {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", kib/1024)
}

func fmtBytes(b int64) string {
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// row is one line of the result table. Durations are nanoseconds.
type row struct {
	section string
	name    string
	n       int     // samples
	med     float64 // NaN: not a duration row (see text)
	lo, hi  float64
	text    string // replaces median/min/max when med is NaN (sizes)
	ratio   string
	rss     string
	note    string
}

func durRow(section, name string, v []float64) row {
	return row{section: section, name: name, n: len(v), med: median(v), lo: minOf(v), hi: maxOf(v)}
}

// rssCell is the median (and max) of the children's ru_maxrss.
func rssCell(s *series) string {
	v := s.rss()
	if len(v) == 0 {
		return "—"
	}
	m, hi := median(v), maxOf(v)
	if hi-m < 128 { // less than 0.1 MiB apart
		return fmtKiB(m)
	}
	return fmtKiB(m) + " (max " + fmtKiB(hi) + ")"
}

// verdict is one target of the issue, checked against what was measured.
type verdict struct {
	target string
	value  string
	pass   bool
	known  bool // false: could not be measured (section failed)
}

type report struct {
	rows     []row
	verdicts []verdict
	notes    []string
}

func (r *report) add(x row)               { r.rows = append(r.rows, x) }
func (r *report) note(f string, a ...any) { r.notes = append(r.notes, fmt.Sprintf(f, a...)) }

func (r *report) verdict(target, value string, pass bool) {
	r.verdicts = append(r.verdicts, verdict{target: target, value: value, pass: pass, known: true})
}

func (r *report) unknown(target, why string) {
	r.verdicts = append(r.verdicts, verdict{target: target, value: why})
}

func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// print writes the one markdown table, then the verdicts and notes.
func (r *report) print(w io.Writer, header []string) {
	for _, h := range header {
		fmt.Fprintln(w, h)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| # | measurement | n | median | min | max | ratio | peak RSS | notes |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|---|")
	for _, x := range r.rows {
		med, lo, hi := fmtDur(x.med), fmtDur(x.lo), fmtDur(x.hi)
		if math.IsNaN(x.med) {
			med, lo, hi = x.text, "", ""
		}
		n := ""
		if x.n > 0 {
			n = fmt.Sprint(x.n)
		}
		rss := x.rss
		if rss == "" {
			rss = "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			x.section, cell(x.name), n, med, lo, hi, cell(x.ratio), cell(rss), cell(x.note))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Targets (medians, this machine):")
	fmt.Fprintln(w)
	for _, v := range r.verdicts {
		mark := "MISS"
		switch {
		case !v.known:
			mark = "N/A "
		case v.pass:
			mark = "PASS"
		}
		fmt.Fprintf(w, "- %s %s: %s\n", mark, v.target, v.value)
	}
	if len(r.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

// seriesRow is the row of a measured series, with the peak RSS of rss
// when it is not nil.
func seriesRow(section, name string, s, rss *series) row {
	r := durRow(section, name, s.durations())
	if rss != nil {
		r.rss = rssCell(rss)
	}
	return r
}

package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// row is one line of the result table, its cells formatted; rss "" is
// printed as "—".
type row struct {
	section, name, n, med, lo, hi, ratio, rss, note string
}

// verdict is one target of the issue, checked against what was measured.
type verdict struct {
	target, value string
	mark          string // PASS, MISS, or N/A when it could not be measured
}

type report struct {
	rows     []row
	verdicts []verdict
	notes    []string
}

func (r *report) add(x row)               { r.rows = append(r.rows, x) }
func (r *report) note(f string, a ...any) { r.notes = append(r.notes, fmt.Sprintf(f, a...)) }

// timed adds the row of a series of times: n, median, min and max, the
// peak RSS of rss when it is not nil, ratio and note.
func (r *report) timed(section, name string, s, rss *series, ratio, note string) {
	lo, hi := minMax(s.d)
	x := row{section: section, name: name, n: fmt.Sprint(len(s.d)), med: fmtDur(median(s.d)), lo: fmtDur(lo), hi: fmtDur(hi), ratio: ratio, note: note}
	if rss != nil && len(rss.rss) > 0 {
		m, top := median(rss.rss), slices.Max(rss.rss)
		x.rss = fmtKiB(m)
		if top-m >= 128 { // 0.1 MiB apart or more
			x.rss += " (max " + fmtKiB(top) + ")"
		}
	}
	r.add(x)
}

func (r *report) verdict(target, value string, pass bool) {
	mark := "MISS"
	if pass {
		mark = "PASS"
	}
	r.verdicts = append(r.verdicts, verdict{target, value, mark})
}

// ratioTarget checks that the median of t is at most limit times ref's.
func (r *report) ratioTarget(target string, t, ref *series, limit float64) {
	v := median(t.d) / median(ref.d)
	r.verdict(target, fmt.Sprintf("%s (paired %s), limit %s", fmtRatio(v), fmtRatio(pairedRatio(t.d, ref.d)), fmtRatio(limit)), v <= limit)
}

// unmeasured reports the targets that have no verdict as not measured.
func (r *report) unmeasured(targets []string) {
	for _, t := range targets {
		if !slices.ContainsFunc(r.verdicts, func(v verdict) bool { return v.target == t }) {
			r.verdicts = append(r.verdicts, verdict{t, "not measured", "N/A "})
		}
	}
}

// print writes the header lines, the one markdown table, then the verdicts
// and notes.
func (r *report) print(w io.Writer, header []string) {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	fmt.Fprintf(w, "%s\n\n", strings.Join(header, "\n"))
	fmt.Fprintln(w, "| # | measurement | n | median | min | max | ratio | peak RSS | notes |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|---|")
	for _, x := range r.rows {
		if x.rss == "" {
			x.rss = "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			x.section, cell(x.name), x.n, x.med, x.lo, x.hi, cell(x.ratio), cell(x.rss), cell(x.note))
	}
	fmt.Fprintf(w, "\nTargets (medians, this machine):\n\n")
	for _, v := range r.verdicts {
		fmt.Fprintf(w, "- %s %s: %s\n", v.mark, v.target, v.value)
	}
	if len(r.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

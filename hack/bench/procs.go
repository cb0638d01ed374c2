package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
	"github.com/netns-pin/netns-pin/internal/host"
)

// ---------------------------------------------------------------------
// 4b. the whole holder DEL (process start to exit) as the node grows: real
// /proc with its processes, then 1000 more `sleep` processes; real /sys
// (no rbd, no debugfs here) and fixture sysfs/debugfs trees with 1000 and
// 4096 rbd devices and as many CephFS clients, all of another netns (so
// the DEL succeeds after scanning them all).

const (
	otherAddr  = "192.168.30.6"
	extraProcs = 1000
)

// buildFixture lays out sysfs and debugfs like the kernel's with n volumes
// of each kind (cephfixture.Volumes, the node of inuse.BenchmarkCheck),
// every client's address otherAddr, and returns the conflist fields that
// point the in-use check at them.
func buildFixture(root string, n int) (map[string]any, error) {
	sysfs, debugfs := filepath.Join(root, "sys"), filepath.Join(root, "debug")
	err := cephfixture.Volumes(sysfs, debugfs, n, func(int) string { return otherAddr })
	return map[string]any{"inUse": map[string]any{"sysfs": sysfs, "debugfs": debugfs}}, err
}

// procVariant is one node of section 4b: this host's sysfs and debugfs, or
// a fixture tree of n devices and clients.
type procVariant struct {
	label string
	n     int
	extra map[string]any // conflist fields: the fixture's inUse
	netns string
}

func (b *bench) procVariants() ([]procVariant, error) {
	vs := []procVariant{{label: "no rbd, no debugfs (this host)"}}
	for _, n := range []int{1000, 4096} {
		extra, err := buildFixture(filepath.Join(b.cfg.fixtures, fmt.Sprintf("n%d", n)), n)
		if err != nil {
			return nil, fmt.Errorf("fixture n=%d: %w", n, err)
		}
		vs = append(vs, procVariant{label: fmt.Sprintf("%d rbd + %d CephFS clients (fixture)", n, n), n: n, extra: extra})
	}
	for i := range vs {
		p, err := b.env.netns(b.name(fmt.Sprintf("d%d", i)), fmt.Sprintf("10.250.3.%d/24", i+2))
		if err != nil {
			return nil, err
		}
		vs[i].netns = p
	}
	return vs, nil
}

// procDel pins a holder attachment and measures its DEL.
func (b *bench) procDel(ctx context.Context, v procVariant, wrap string) (sample, error) {
	a := b.attach("procs", v.netns, "csi-holder-"+host.RandHex(5), b.pinEntry(v.extra), "10.250.3.9")
	if _, _, err := b.call(b.cfg.plugin, "ADD", a).run(ctx, ""); err != nil {
		return sample{}, err
	}
	s, _, err := b.call(b.cfg.plugin, "DEL", a).run(ctx, wrap)
	if err == nil {
		err = wantPins(b.pinDir, 0, "DEL left pins")
	}
	return s, err
}

// procBlock measures one block of rounds of every variant, with the extra
// sleep processes when block is 1, after a probe run under rsswrap (peak
// RSS, and a warm-up), and returns how many processes there were.
func (b *bench) procBlock(ctx context.Context, vs []procVariant, block int, res, rss [][2]series) (procs int, err error) {
	if block == 1 {
		stop, err := b.env.sleepers(extraProcs)
		if err != nil {
			return 0, err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	procs = countProcs()
	ss, probes, err := b.measure(ctx, len(vs), 1, b.rounds(30), rotate(len(vs), func(ctx context.Context, i int, wrap string) (sample, error) {
		return b.procDel(ctx, vs[i], wrap)
	}))
	if err != nil {
		return procs, err
	}
	for i := range vs {
		res[i][block].merge(ss[i])
		rss[i][block].merge(probes[i])
		b.keepPinRSS(&probes[i])
	}
	return procs, nil
}

func (b *bench) procScaling(ctx context.Context) error {
	vs, err := b.procVariants()
	if err != nil {
		return err
	}
	// [variant][0: host processes only, 1: +1000 sleeps]: DEL times and
	// their peak RSS. Two rounds of both blocks, in turn (without, with;
	// with, without), so that a drift of the load weighs on both alike.
	res, rss := make([][2]series, len(vs)), make([][2]series, len(vs))
	var procs [2][]float64
	for round := range 2 {
		for k := range 2 {
			block := (k + round) % 2
			n, err := b.procBlock(ctx, vs, block, res, rss)
			if err != nil {
				return err
			}
			procs[block] = append(procs[block], float64(n))
		}
	}
	np := [2]float64{median(procs[0]), median(procs[1])}
	ref := median(res[0][0].d)
	for i, v := range vs {
		for block := range 2 {
			t := &res[i][block]
			ratio, notes := fmtRatio(median(t.d)/ref)+" first 4b row", []string{cpuNote(t)}
			if i == 0 && block == 0 {
				ratio = "1.00×"
			}
			if block == 1 {
				per := (median(t.d) - median(res[i][0].d)) / (np[1] - np[0])
				notes = append(notes, fmtDur(per)+" per extra process")
			}
			if v.n > 0 {
				per := (median(t.d) - median(res[0][block].d)) / float64(2*v.n)
				notes = append(notes, fmtDur(per)+" per device or client")
			}
			b.rep.timed("4b", fmt.Sprintf("holder DEL, whole process: %s, %.0f processes", v.label, np[block]), t, &rss[i][block], ratio, strings.Join(notes, "; "))
		}
	}
	return nil
}

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
	fixtureFSIDA = "b3a1c3a4-7e2d-4e0f-9a4b-1f2e3d4c5b6a"
	fixtureFSIDB = "0c9d8e7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f"
	otherAddr    = "192.168.30.6"
	extraProcs   = 1000
)

// buildFixture lays out sysfs and debugfs like the kernel's (package
// cephfixture, as inuse's tests do) with n rbd devices sharing two rbd
// clients, and n CephFS clients with status; every client's address is
// otherAddr.
func buildFixture(root string, n int) (sysfs, debugfs string, err error) {
	sysfs, debugfs = filepath.Join(root, "sys"), filepath.Join(root, "debug")
	for gid := range 2 {
		if err := cephfixture.DebugfsClient(debugfs, fixtureFSIDA, 10000+gid, ""); err != nil {
			return "", "", err
		}
	}
	for i := range n {
		if err := cephfixture.RBD(sysfs, i, cephfixture.RBDDev{ClientAddr: otherAddr + ":0/3527561932", ClientID: fmt.Sprintf("client%d", 10000+i%2),
			FSID: fixtureFSIDA, Pool: "replicapool", Name: fmt.Sprintf("csi-vol-%08d", i)}); err != nil {
			return "", "", err
		}
		gid := 50000 + i
		if err := cephfixture.DebugfsClient(debugfs, fixtureFSIDB, gid, cephfixture.CephFSStatus(gid, otherAddr+":0")); err != nil {
			return "", "", err
		}
	}
	return sysfs, debugfs, nil
}

// procVariant is one node of section 4b: this host's sysfs and debugfs, or
// a fixture tree of n devices and clients.
type procVariant struct {
	label string
	n     int
	inUse map[string]any
	netns string
}

func (b *bench) procVariants() ([]procVariant, error) {
	vs := []procVariant{{label: "no rbd, no debugfs (this host)"}}
	for _, n := range []int{1000, 4096} {
		sysfs, debugfs, err := buildFixture(filepath.Join(b.cfg.fixtures, fmt.Sprintf("n%d", n)), n)
		if err != nil {
			return nil, fmt.Errorf("fixture n=%d: %w", n, err)
		}
		vs = append(vs, procVariant{label: fmt.Sprintf("%d rbd + %d CephFS clients (fixture)", n, n), n: n,
			inUse: map[string]any{"sysfs": sysfs, "debugfs": debugfs}})
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
	extra := map[string]any{}
	if v.inUse != nil {
		extra["inUse"] = v.inUse
	}
	conf := pluginConf(b.name("procs"), b.pinEntry(extra), prevResult("10.250.3.9"))
	cid := newCID()
	args := podArgs(holderNS, "csi-holder-"+host.RandHex(5), cid)
	if _, _, err := (call{bin: b.cfg.plugin, env: cniEnv("ADD", cid, v.netns, args, b.cfg.cniPath), stdin: conf}).run(ctx); err != nil {
		return sample{}, err
	}
	s, _, err := call{bin: b.cfg.plugin, env: cniEnv("DEL", cid, v.netns, args, b.cfg.cniPath), stdin: conf}.runRSS(ctx, wrap)
	if err == nil {
		err = b.wantPins(0, "DEL left pins")
	}
	return s, err
}

// procBlock measures one block of rounds of every variant, with the extra
// sleep processes when block is 1, and in the second round the peak RSS.
func (b *bench) procBlock(ctx context.Context, vs []procVariant, round, block int, res, rss [][2]series) (procs int, err error) {
	if block == 1 {
		stop, serr := b.env.sleepers(ctx, extraProcs)
		if serr != nil {
			return 0, serr
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	procs = countProcs()
	ss, err := interleave(ctx, b.rounds(30), len(vs), func(ctx context.Context, _, i int) (sample, error) {
		return b.procDel(ctx, vs[i], "")
	})
	if err != nil {
		return procs, err
	}
	for i := range vs {
		res[i][block].samples = append(res[i][block].samples, ss[i].samples...)
		if round == 1 {
			x, err := b.procDel(ctx, vs[i], b.wrap)
			if err != nil {
				return procs, err
			}
			rss[i][block].add(x)
			b.keepPinRSS(x)
		}
	}
	return procs, nil
}

func (b *bench) procScaling(ctx context.Context) error {
	vs, err := b.procVariants()
	if err != nil {
		return err
	}
	for _, v := range vs { // warm-up (and page in the fixture)
		if _, err := b.procDel(ctx, v, ""); err != nil {
			return err
		}
	}
	// [variant][0: host processes only, 1: +1000 sleeps]: DEL times and
	// their peak RSS.
	res, rss := make([][2]series, len(vs)), make([][2]series, len(vs))
	var procs [2][]float64
	for round := range 2 {
		for k := range 2 {
			block := (k + round) % 2 // round 0: without, with; round 1: with, without
			n, err := b.procBlock(ctx, vs, round, block, res, rss)
			if err != nil {
				return err
			}
			procs[block] = append(procs[block], float64(n))
		}
	}
	np := [2]float64{median(procs[0]), median(procs[1])}
	ref := median(res[0][0].durations())
	for i, v := range vs {
		for block := range 2 {
			t := res[i][block].durations()
			r := seriesRow("4b", fmt.Sprintf("holder DEL, whole process: %s, %.0f processes", v.label, np[block]), &res[i][block], &rss[i][block])
			r.ratio = fmtRatio(median(t)/ref) + " first 4b row"
			if i == 0 && block == 0 {
				r.ratio = "1.00×"
			}
			notes := []string{cpuNote(&res[i][block])}
			if block == 1 {
				per := (median(t) - median(res[i][0].durations())) / (np[1] - np[0])
				notes = append(notes, fmt.Sprintf("%s per extra process", fmtDur(per)))
			}
			if v.n > 0 {
				per := (median(t) - median(res[0][block].durations())) / float64(2*v.n)
				notes = append(notes, fmt.Sprintf("%s per device or client", fmtDur(per)))
			}
			r.note = strings.Join(notes, "; ")
			b.rep.add(r)
		}
	}
	return nil
}

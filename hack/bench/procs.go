package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

// buildFixture lays out sysfs and debugfs like the kernel's (see inuse's
// fixture_test.go) with n rbd devices sharing two rbd clients, and n CephFS
// clients with status; every client's address is otherAddr.
func buildFixture(root string, n int) (sysfs, debugfs string, err error) {
	sysfs, debugfs = filepath.Join(root, "sys"), filepath.Join(root, "debug")
	write := func(path, content string) {
		if err != nil {
			return
		}
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			err = os.WriteFile(path, []byte(content), 0o644)
		}
	}
	client := func(dir, status string) {
		write(filepath.Join(dir, "monc"), "have monmap 2 want 3+\nhave osdmap 42\n")
		write(filepath.Join(dir, "osdc"), "REQUESTS 0 homeless 0\nLINGER REQUESTS\n")
		write(filepath.Join(dir, "client_options"), "name=admin,secret=<hidden>\n")
		if status != "" {
			write(filepath.Join(dir, "status"), status)
		}
	}
	ceph := filepath.Join(debugfs, "ceph")
	client(filepath.Join(ceph, fixtureFSIDA+".client10000"), "")
	client(filepath.Join(ceph, fixtureFSIDA+".client10001"), "")
	bus := filepath.Join(sysfs, "bus", "rbd", "devices")
	if err = os.MkdirAll(bus, 0o755); err != nil {
		return
	}
	for i := range n {
		id := strconv.Itoa(i)
		dev := filepath.Join(sysfs, "devices", "rbd", id)
		for k, v := range map[string]string{
			"client_addr": otherAddr + ":0/3527561932", "client_id": fmt.Sprintf("client%d", 10000+i%2),
			"cluster_fsid": fixtureFSIDA, "pool": "replicapool", "pool_ns": "", "name": fmt.Sprintf("csi-vol-%08d", i),
			"current_snap": "-", "size": "1073741824", "major": "251", "minor": strconv.Itoa(i * 16),
		} {
			write(filepath.Join(dev, k), v+"\n")
		}
		if err != nil {
			return
		}
		if err = os.Symlink(filepath.Join("..", "..", "..", "devices", "rbd", id), filepath.Join(bus, id)); err != nil {
			return
		}
		gid := 50000 + i
		client(filepath.Join(ceph, fmt.Sprintf("%s.client%d", fixtureFSIDB, gid)),
			fmt.Sprintf("instance: client.%d (3)%s:0/3527561932\nblocklisted: false\n", gid, otherAddr))
	}
	return
}

func (b *bench) procScaling(ctx context.Context) error {
	type variant struct {
		label string
		n     int
		inUse map[string]any
		netns string
	}
	vs := []variant{{label: "no rbd, no debugfs (this host)"}}
	for _, n := range []int{1000, 4096} {
		root := filepath.Join(b.cfg.fixtures, fmt.Sprintf("n%d", n))
		sysfs, debugfs, err := buildFixture(root, n)
		if err != nil {
			return fmt.Errorf("fixture n=%d: %w", n, err)
		}
		vs = append(vs, variant{
			label: fmt.Sprintf("%d rbd + %d CephFS clients (fixture)", n, n), n: n,
			inUse: map[string]any{"sysfs": sysfs, "debugfs": debugfs},
		})
	}
	for i := range vs {
		p, err := b.env.netns(b.name(fmt.Sprintf("d%d", i)), fmt.Sprintf("10.250.3.%d/24", i+2))
		if err != nil {
			return err
		}
		vs[i].netns = p
	}
	net := b.name("procs")
	del := func(ctx context.Context, v variant, wrap string) (sample, error) {
		extra := map[string]any{}
		if v.inUse != nil {
			extra["inUse"] = v.inUse
		}
		conf := pluginConf(net, b.pinEntry(extra), prevResult("10.250.3.9"))
		cid := "bench" + randHex(27)
		args := podArgs(holderNS, "csi-holder-"+randHex(5), cid)
		if _, _, err := (call{bin: b.cfg.plugin, env: cniEnv("ADD", cid, v.netns, args, b.cfg.cniPath), stdin: conf}).run(ctx); err != nil {
			return sample{}, err
		}
		s, _, err := call{bin: b.cfg.plugin, env: cniEnv("DEL", cid, v.netns, args, b.cfg.cniPath), stdin: conf}.runRSS(ctx, wrap)
		if err == nil && len(b.pinsLeft()) != 0 {
			err = fmt.Errorf("DEL left pins %v", b.pinsLeft())
		}
		return s, err
	}
	for _, v := range vs { // warm-up (and page in the fixture)
		if _, err := del(ctx, v, ""); err != nil {
			return err
		}
	}
	rss := make([][2]series, len(vs)) // peak RSS of DEL, without and with the sleepers
	// [variant][0: host processes only, 1: +1000 sleeps]
	res := make([][2]series, len(vs))
	var procs [2][]int
	perBlock := b.rounds(30)
	for round := range 2 {
		for k := range 2 {
			block := (k + round) % 2 // round 0: without, with; round 1: with, without
			stop := func() {}
			if block == 1 {
				var err error
				if stop, err = b.env.sleepers(ctx, extraProcs); err != nil {
					return err
				}
			}
			procs[block] = append(procs[block], countProcs())
			ss, err := interleave(ctx, perBlock, len(vs), func(ctx context.Context, _, i int) (sample, error) {
				return del(ctx, vs[i], "")
			})
			if err == nil && round == 1 {
				for i := range vs {
					var x sample
					if x, err = del(ctx, vs[i], b.wrap); err != nil {
						break
					}
					rss[i][block].add(x)
					b.keepPinRSS(x)
				}
			}
			stop()
			if err != nil {
				return err
			}
			for i := range vs {
				res[i][block].samples = append(res[i][block].samples, ss[i].samples...)
			}
		}
	}
	p0, p1 := median(toF(procs[0])), median(toF(procs[1]))
	ref := median(res[0][0].durations())
	for i, v := range vs {
		for block := range 2 {
			t := res[i][block].durations()
			np := p0
			if block == 1 {
				np = p1
			}
			r := durRow("4b", fmt.Sprintf("holder DEL, whole process: %s, %.0f processes", v.label, np), t)
			r.rss = rssCell(&rss[i][block])
			if i == 0 && block == 0 {
				r.ratio = "1.00×"
			} else {
				r.ratio = fmtRatio(median(t)/ref) + " first 4b row"
			}
			notes := []string{cpuNote(&res[i][block])}
			if block == 1 {
				per := (median(t) - median(res[i][0].durations())) / (p1 - p0)
				notes = append(notes, fmt.Sprintf("%s per extra process", fmtDur(per)))
				if i == 0 {
					b.set("procs.per", per)
				}
			}
			if v.n > 0 {
				per := (median(t) - median(res[0][block].durations())) / float64(2*v.n)
				notes = append(notes, fmt.Sprintf("%s per device or client", fmtDur(per)))
			}
			r.note = joinNotes(notes)
			b.rep.add(r)
		}
	}
	return nil
}

func toF(v []int) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func joinNotes(n []string) string {
	s := ""
	for i, x := range n {
		if i > 0 {
			s += "; "
		}
		s += x
	}
	return s
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/netns-pin/netns-pin/internal/host"
)

type bench struct {
	cfg      config
	env      *env
	wrap     string               // rsswrap
	rss      map[string][]float64 // peak RSS (KiB) of every probe run, by netns-pin build
	rows     []row
	ceilings []string
	notes    []string
}

// plugin is a chained plugin compared, with its conflist entry; build is
// "" for those that are no netns-pin build, and pinDir "" for those that
// pin nothing.
type plugin struct {
	label, bin, build, pinDir string
	entry                     map[string]any
}

const holderNS = "rook-ceph"

// pins are the netns-pin builds, the one under test first, each with pins
// and records of its own below the section's folder, and a Rook-like
// holder rule.
func (b *bench) pins(section string) []plugin {
	var ps []plugin
	for _, x := range [][3]string{{"netns-pin", b.cfg.plugin, "netns-pin"}, {"netns-pin " + b.cfg.beforeRev, b.cfg.before, "netns-pin-before"}} {
		if x[1] == "" {
			continue
		}
		dir := filepath.Join(b.cfg.work, section, x[2])
		ps = append(ps, plugin{label: x[0], bin: x[1], build: x[0], pinDir: filepath.Join(dir, "pin"), entry: map[string]any{
			"type": x[2], "pinDir": filepath.Join(dir, "pin"), "stateDir": filepath.Join(dir, "state"),
			"holders": []map[string]any{{"podNamespace": holderNS, "podName": "csi-holder-*", "cluster": holderNS + "/my-cluster"}},
		}})
	}
	return ps
}

func (b *bench) doNothing() plugin {
	return plugin{label: "do-nothing (test/baseline)", bin: b.cfg.baseline, entry: map[string]any{"type": "baseline"}}
}

// name is a host-unique name for a netns, link or network.
func (b *bench) name(s string) string { return b.cfg.prefix + "-" + s }

// podArgs are CNI_ARGS as containerd passes them for a pod.
func podArgs(namespace, name, containerID string) string {
	uid := fmt.Sprintf("%s-%s-%s-%s-%s", host.RandHex(8), host.RandHex(4), host.RandHex(4), host.RandHex(4), host.RandHex(12))
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", namespace, name, containerID, uid)
}

// prevResult is what a bridge + host-local ADD prints for a pod whose
// address is ip: the previous result every chained plugin call gets.
func prevResult(ip string) json.RawMessage {
	return json.RawMessage(`{"cniVersion": "1.0.0",
		"interfaces": [{"name": "cni0", "mac": "2a:5c:19:8e:41:07"}, {"name": "veth3f1a9c2e", "mac": "c6:1e:83:52:9b:aa"},
			{"name": "eth0", "mac": "8e:2d:07:4b:c3:11", "sandbox": "/var/run/netns/cni-0b5f7a1e-6c1d-8e4a-2f3b-9d8c7e6f5a4b"}],
		"ips": [{"interface": 2, "address": "` + ip + `/24", "gateway": "10.250.0.1"}],
		"routes": [{"dst": "0.0.0.0/0", "gw": "10.250.0.1"}],
		"dns": {"nameservers": ["10.96.0.10"], "search": ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"], "options": ["ndots:5"]}}`)
}

// addDel measures ADD then DEL of a fresh attachment by each plugin of
// ps, interleaved: a pod (a holder when holder) in netns nss[i] whose
// address is ip(i). Each must print nothing but the CNI result: prevResult
// on ADD, nothing on DEL; a netns-pin build pins a holder on ADD and
// leaves no pin after DEL.
func (b *bench) addDel(ctx context.Context, ps []plugin, rounds int, holder bool, nss []string, ip func(i int) string) ([]result, error) {
	res, err := b.interleave(ctx, len(ps), rounds, 2, func(ctx context.Context, i int, wrap string) ([]sample, error) {
		p, cid, pod, ns := ps[i], "bench"+host.RandHex(27), "web-7d9f8c6b5-"+host.RandHex(5), "default"
		if holder {
			pod, ns = "csi-holder-"+host.RandHex(5), holderNS
		}
		prev := prevResult(ip(i))
		conf := map[string]any{"cniVersion": "1.0.0", "name": b.name("net"), "prevResult": prev}
		maps.Copy(conf, p.entry)
		stdin, err := json.Marshal(conf)
		if err != nil {
			return nil, err
		}
		var ss []sample
		args := podArgs(ns, pod, cid)
		for k, verb := range []string{"ADD", "DEL"} {
			env := []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + cid, "CNI_NETNS=" + nss[i], "CNI_IFNAME=eth0",
				"CNI_PATH=" + b.cfg.cniPath, "CNI_ARGS=" + args}
			s, out, err := b.exec(ctx, wrap, p.bin, nil, env, stdin)
			switch {
			case err != nil:
			case verb == "ADD" && !sameJSON(out, prev):
				err = fmt.Errorf("%s ADD printed more or other than prevResult:\n%s", p.label, out)
			case verb == "DEL" && len(out) > 0:
				err = fmt.Errorf("%s DEL printed:\n%s", p.label, out)
			case p.pinDir != "":
				want := 0
				if holder && k == 0 {
					want = 1
				}
				if ents, _ := os.ReadDir(filepath.Join(p.pinDir, "pins")); len(ents) != want {
					err = fmt.Errorf("%s %s: %d pin(s), want %d", p.label, verb, len(ents), want)
				}
			}
			if err != nil {
				return nil, err
			}
			ss = append(ss, s)
		}
		return ss, nil
	})
	for i, p := range ps {
		if err == nil && p.build != "" {
			b.rss[p.build] = append(b.rss[p.build], res[i].rss...)
		}
	}
	return res, err
}

// ratioCeiling adds the ceiling "what, at most limit" on v[0], the build
// under test's ratio, with v[1], the before build's, beside it.
func (b *bench) ratioCeiling(what string, limit float64, v ...float64) {
	figures := ratio(v[0])
	if len(v) > 1 {
		figures += fmt.Sprintf(" (%s: %s)", b.cfg.beforeRev, ratio(v[1]))
	}
	b.ceiling(fmt.Sprintf("%s, at most %s", what, ratio(limit)), v[0] <= limit, figures)
}

// passthrough: ADD and DEL of a pod that is no holder, netns-pin against
// the do-nothing plugin and tuning.
func (b *bench) passthrough(ctx context.Context) error {
	ns, err := b.env.netns(b.name("pt"), "10.250.0.5/24")
	if err != nil {
		return err
	}
	ps := append(b.pins("passthrough"), b.doNothing(), plugin{label: "tuning v1.10.0, empty config", bin: b.cfg.tuning, entry: map[string]any{"type": "tuning"}})
	res, err := b.addDel(ctx, ps, b.rounds(1000), false, slices.Repeat([]string{ns}, len(ps)), func(int) string { return "10.250.0.5" })
	if err != nil {
		return err
	}
	nop, tun := len(ps)-2, len(ps)-1
	for f, verb := range []string{"ADD", "DEL"} {
		var vsNop, vsTun []float64
		for i, p := range ps {
			rn, rt := median(res[i].t[f])/median(res[nop].t[f]), median(res[i].t[f])/median(res[tun].t[f])
			b.add("passthrough "+verb+": "+p.label, res[i].t[f], ratio(rn)+" do-nothing, "+ratio(rt)+" tuning", res[i].rss)
			if p.build != "" {
				vsNop, vsTun = append(vsNop, rn), append(vsTun, rt)
			}
		}
		b.ratioCeiling("passthrough "+verb+" vs do-nothing", 1.10, vsNop...)
		b.ratioCeiling("passthrough "+verb+" vs tuning", 1.05, vsTun...)
	}
	return nil
}

// holder: ADD (lock, record, bind mount, link) and DEL of an unused pin
// (in-use check, unmount, unlink, record) against the do-nothing plugin,
// each plugin in a netns of its own with a global address.
func (b *bench) holder(ctx context.Context) error {
	ps := append(b.pins("holder"), b.doNothing())
	var nss []string
	ip := func(i int) string { return fmt.Sprintf("10.250.1.%d", 2+i) }
	for i := range ps {
		ns, err := b.env.netns(b.name(fmt.Sprintf("h%d", i)), ip(i)+"/24")
		if err != nil {
			return err
		}
		nss = append(nss, ns)
	}
	res, err := b.addDel(ctx, ps, b.rounds(300), true, nss, ip)
	if err != nil {
		return err
	}
	nop := len(ps) - 1
	for f, what := range []string{"holder ADD", "holder DEL, unused"} {
		var rs []float64
		for i, p := range ps {
			r := median(res[i].t[f]) / median(res[nop].t[f])
			b.add(what+": "+p.label, res[i].t[f], ratio(r)+" do-nothing", res[i].rss)
			if p.build != "" {
				rs = append(rs, r)
			}
		}
		b.ratioCeiling(what+" vs do-nothing", []float64{1.5, 2.0}[f], rs...)
	}
	return nil
}

// peakRSS reports the peak RSS of every probe run of each netns-pin build.
func (b *bench) peakRSS() {
	var peaks []float64
	for _, p := range b.pins("") {
		if rss := b.rss[p.build]; len(rss) > 0 {
			peaks = append(peaks, slices.Max(rss))
			b.rows = append(b.rows, row{name: "peak RSS of " + p.label + ", every probe run of passthrough and holder ADD and DEL",
				n: fmt.Sprint(len(rss)), med: mib(median(rss)), ratio: "max " + mib(slices.Max(rss)), rss: mib(slices.Max(rss))})
		}
	}
	if len(peaks) > 0 {
		figures := mib(peaks[0])
		if len(peaks) > 1 {
			figures += fmt.Sprintf(" (%s: %s)", b.cfg.beforeRev, mib(peaks[1]))
		}
		b.ceiling("peak RSS of netns-pin, at most 12 MiB", peaks[0] <= 12*1024, figures)
	}
}

// chains is what a user sees: the whole chain a pod that is no holder
// runs, through cnitool, ADD+DEL, with the do-nothing plugin last against
// netns-pin last, for bridge + host-local and macvlan + host-local; each
// plugin set its own network, its own bridge and its own pod netns.
func (b *bench) chains(ctx context.Context) error {
	netconf, master := filepath.Join(b.cfg.work, "net.d"), b.name("m0")
	if err := os.MkdirAll(netconf, 0o755); err != nil {
		return err
	}
	// macvlan's master: one end of a veth pair (this kernel may have no
	// dummy links)
	if err := b.env.link(master, "veth", "peer", "name", b.name("m1")); err != nil {
		return err
	}
	for k, kind := range []string{"bridge", "macvlan"} {
		lasts := append([]plugin{b.doNothing()}, b.pins("chain-"+kind)...)
		var nets, nss []string
		for i, last := range lasts {
			net := b.name(fmt.Sprintf("%c%d", kind[0], i))
			first := map[string]any{"type": kind, "ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(b.cfg.work, "host-local"),
				"ranges": [][]map[string]any{{{"subnet": fmt.Sprintf("10.%d.%d.0/24", 252+k, i)}}}}}
			if kind == "bridge" {
				first["bridge"] = b.name(fmt.Sprintf("b%d", i))
				if err := b.env.link(first["bridge"].(string), "bridge"); err != nil {
					return err
				}
			} else {
				first["master"], first["mode"] = master, "bridge"
			}
			data, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": net, "plugins": []any{first, last.entry}})
			if err == nil {
				err = os.WriteFile(filepath.Join(netconf, net+".conflist"), data, 0o644)
			}
			ns, err2 := b.env.netns(b.name(fmt.Sprintf("%c%dp", kind[0], i)), "")
			if err = errors.Join(err, err2); err != nil {
				return err
			}
			nets, nss = append(nets, net), append(nss, ns)
		}
		res, err := b.interleave(ctx, len(lasts), b.rounds(120), 1, func(ctx context.Context, i int, _ string) ([]sample, error) {
			env := []string{"CNI_PATH=" + b.cfg.cniPath, "NETCONFPATH=" + netconf, "CNI_IFNAME=eth0",
				"CNI_ARGS=" + podArgs("default", "web-7d9f8c6b5-"+host.RandHex(5), host.RandHex(64))}
			add, _, err := b.exec(ctx, "", b.cfg.cnitool, []string{"add", nets[i], nss[i]}, env, nil)
			if err != nil {
				return nil, err
			}
			del, _, err := b.exec(ctx, "", b.cfg.cnitool, []string{"del", nets[i], nss[i]}, env, nil)
			return []sample{{d: add.d + del.d}}, err
		})
		if err != nil {
			return err
		}
		chain, base := kind+" + host-local", median(res[0].t[0])
		b.add("pod ADD+DEL, "+chain+" + do-nothing", res[0].t[0], "1.00x", nil)
		var figures []string
		for i, last := range lasts[1:] {
			t := res[i+1].t[0]
			r := ratio(median(t)/base) + ", " + plusMs(median(t)-base)
			b.add("pod ADD+DEL, "+chain+" + "+last.label, t, r, nil)
			figures = append(figures, r)
		}
		f := figures[0]
		if len(figures) > 1 {
			f += fmt.Sprintf(" (%s: %s)", b.cfg.beforeRev, figures[1])
		}
		b.ceiling("pod ADD+DEL, "+chain+", netns-pin last vs do-nothing last, at most 1.02x", median(res[1].t[0])/base <= 1.02, f)
	}
	return nil
}

// inuse runs BenchmarkCheckNode of inuse/ (the in-use check of an unused
// pin on a node of 5,000 processes, 500 mounts and 100 rbd devices, fixture
// trees on tmpfs) count times, one sample a run, interleaved with the
// before revision's when it has that benchmark.
func (b *bench) inuse(ctx context.Context) error {
	bins, labels := []string{b.cfg.inuseTest}, []string{"netns-pin"}
	if b.cfg.inuseTestBefore != "" {
		bins, labels = append(bins, b.cfg.inuseTestBefore), append(labels, "netns-pin "+b.cfg.beforeRev)
	}
	times := make([][]float64, len(bins))
	for r := range b.cfg.count {
		for k := range bins {
			i := (k + r) % len(bins)
			cmd := exec.CommandContext(ctx, bins[i], "-test.run", "^$", "-test.bench", "^BenchmarkCheckNode$", "-test.benchtime", b.cfg.benchtime, "-test.count", "1")
			cmd.Env = append(os.Environ(), "TMPDIR="+b.cfg.fixtures)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", bins[i], err, out)
			}
			for line := range strings.Lines(string(out)) {
				if f := strings.Fields(line); len(f) >= 4 && strings.HasPrefix(f[0], "BenchmarkCheckNode") && f[3] == "ns/op" {
					v, err := strconv.ParseFloat(f[2], 64)
					if err != nil {
						return fmt.Errorf("%s: %q: %w", bins[i], line, err)
					}
					times[i] = append(times[i], v)
				}
			}
		}
	}
	for i, t := range times {
		if len(t) == 0 {
			return fmt.Errorf("%s printed no BenchmarkCheckNode result", bins[i])
		}
		r := ""
		if i > 0 {
			r = ratio(median(t)/median(times[0])) + " netns-pin"
		}
		b.add("in-use check, unused pin, 5,000 processes, 500 mounts, 100 rbd devices (go test -bench, "+labels[i]+")", t, cmp.Or(r, "—"), nil)
	}
	return nil
}

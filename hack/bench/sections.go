package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

type bench struct {
	cfg              config
	wrap             string // rsswrap binary ("" without a C compiler)
	env              *env
	rep              *report
	pinDir, stateDir string    // of the running section
	pinRSS           []float64 // ru_maxrss (KiB) of every netns-pin probe run
	start            time.Time
	cutShort         bool // the time budget ran out
}

// The targets of the issue, each checked by the section that measures it.
const (
	tPassBase   = "passthrough %s within 1.05× of the baseline plugin"
	tPassTuning = "passthrough %s no slower than tuning"
	tHolderAdd  = "holder ADD within 1.5× of the baseline"
	tHolderDel  = "holder DEL, unused, within 2.0× of the baseline"
	tInUse      = "in-use check at 1000 rbd devices + 1000 CephFS clients under 20 ms"
)

// rounds scales a round count, never below 3.
func (b *bench) rounds(n int) int {
	return max(3, int(math.Round(float64(n)*b.cfg.scale)))
}

// name is a host-unique name for a netns, link or network.
func (b *bench) name(s string) string { return b.cfg.prefix + "-" + s }

// newCID is a fresh container ID.
func newCID() string { return "bench" + host.RandHex(27) }

const holderNS = "rook-ceph"

// pinEntry is netns-pin's conflist entry: a Rook-like holder rule, pins and
// records in the section's folders; extra fields override.
func (b *bench) pinEntry(extra map[string]any) map[string]any {
	m := map[string]any{
		"type":     "netns-pin",
		"pinDir":   b.pinDir,
		"stateDir": b.stateDir,
		"holders":  []map[string]any{{"podNamespace": holderNS, "podName": "csi-holder-*", "cluster": holderNS + "/my-cluster"}},
	}
	maps.Copy(m, extra)
	return m
}

// plugin is a chained plugin measured, with its conflist entry; pinDir is
// "" for those that pin nothing (baseline, tuning).
type plugin struct {
	label, bin string
	entry      map[string]any
	pinDir     string
}

// builds are the netns-pin builds: the one under test, then the candidates
// (-alt), each with pins and records of its own.
func (b *bench) builds(extra map[string]any) []plugin {
	ps := []plugin{{label: "**netns-pin**", bin: b.cfg.plugin, entry: b.pinEntry(extra), pinDir: b.pinDir}}
	for k, a := range b.cfg.alts {
		m, dir := b.pinEntry(extra), filepath.Dir(b.pinDir)
		m["pinDir"], m["stateDir"] = filepath.Join(dir, fmt.Sprintf("pin-alt%d", k)), filepath.Join(dir, fmt.Sprintf("state-alt%d", k))
		ps = append(ps, plugin{label: "candidate " + a.label, bin: a.bin, entry: m, pinDir: m["pinDir"].(string)})
	}
	return ps
}

// keepPinRSS records the peak RSS of netns-pin probe runs (a target).
func (b *bench) keepPinRSS(s *series) { b.pinRSS = append(b.pinRSS, s.rss...) }

// wantPins fails unless exactly n pin files are present in pinDir.
func wantPins(pinDir string, n int, what string) error {
	ents, err := os.ReadDir(filepath.Join(pinDir, "pins"))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err == nil && len(ents) != n {
		var left []string
		for _, e := range ents {
			left = append(left, e.Name())
		}
		err = fmt.Errorf("%s: want %d pin(s), have %v", what, n, left)
	}
	return err
}

// ---------------------------------------------------------------------
// 1. passthrough ADD and DEL of a non-holder pod: netns-pin vs baseline vs
// tuning.

func (b *bench) passthrough(ctx context.Context) error {
	ns, err := b.env.netns(b.name("pt"), "10.250.0.5/24")
	if err != nil {
		return err
	}
	builds := b.builds(nil)
	ps := append([]plugin{builds[0],
		{label: "baseline", bin: b.cfg.baseline, entry: map[string]any{"type": "baseline"}},
		{label: "tuning (empty config)", bin: b.cfg.tuning, entry: map[string]any{"type": "tuning"}},
	}, builds[1:]...)
	for _, verb := range []string{"ADD", "DEL"} {
		if err := b.passthroughVerb(ctx, verb, ns, ps); err != nil {
			return err
		}
	}
	return wantPins(b.pinDir, 0, "a non-holder pod made pins")
}

// passthroughVerb measures one verb of a non-holder pod: ADD prints
// prevResult unchanged, DEL prints nothing; both take the same stdin, as
// a runtime passes prevResult to DEL too.
func (b *bench) passthroughVerb(ctx context.Context, verb, ns string, ps []plugin) error {
	prev := prevResult("10.250.0.5")
	cid := newCID()
	env := cniEnv(verb, cid, ns, podArgs("default", "web-7d9f8c6b5-x2x9k", cid), b.cfg.cniPath)
	ss, rss, err := b.measure(ctx, len(ps), probeRuns, b.rounds(1000), rotate(len(ps), func(ctx context.Context, i int, wrap string) (sample, error) {
		x, out, err := call{bin: ps[i].bin, env: env, stdin: pluginConf(b.name("passthrough"), ps[i].entry, prev)}.run(ctx, wrap)
		switch {
		case err != nil:
		case verb == "ADD" && !sameJSON(out, prev):
			err = fmt.Errorf("%s did not print prevResult unchanged:\n%s", ps[i].label, out)
		case verb == "DEL" && len(out) != 0:
			err = fmt.Errorf("%s printed on DEL:\n%s", ps[i].label, out)
		}
		return x, err
	}))
	if err != nil {
		return err
	}
	b.keepPinRSS(&rss[0])
	pin, base, tun := &ss[0], &ss[1], &ss[2]
	b.rep.timed("1", "passthrough "+verb+", non-holder pod: **netns-pin**", pin, &rss[0], versus(pin, base, " baseline")+"; "+versus(pin, tun, " tuning"),
		fmt.Sprintf("%s; %s (%s baseline, %s tuning)", over(pin, base), cpuNote(pin), ratioOf(pin.cpu, base.cpu), ratioOf(pin.cpu, tun.cpu)))
	b.rep.timed("1", "passthrough "+verb+": baseline plugin (skel + types, parses prevResult)", base, &rss[1], "1.00×", cpuNote(base))
	b.rep.timed("1", "passthrough "+verb+": tuning v1.10.0, empty config", tun, &rss[2], ratioOf(tun.d, base.d)+" baseline", cpuNote(tun))
	for i := 3; i < len(ps); i++ {
		t := &ss[i]
		b.rep.timed("1", "passthrough "+verb+": "+ps[i].label, t, &rss[i],
			fmt.Sprintf("%s; %s tuning; %s", versus(t, base, " baseline"), ratioOf(t.d, tun.d), versus(t, pin, " netns-pin")), cpuNote(t))
	}
	b.rep.ratioTarget(fmt.Sprintf(tPassBase, verb), pin, base, 1.05)
	b.rep.ratioTarget(fmt.Sprintf(tPassTuning, verb), pin, tun, 1.00)
	return nil
}

// ---------------------------------------------------------------------
// 2. holder ADD (pin + record + links) and DEL (in-use check, unused) vs
// the baseline plugin.

// holderVariant is one plugin of section 2, with a pool of netns.
type holderVariant struct {
	plugin
	nss []string
}

const holderPool = 2

// holderVariants are netns-pin, netns-pin with its records on tmpfs (the
// difference is what the fsyncs of the records cost), the candidates and,
// last, the baseline.
func (b *bench) holderVariants() ([]holderVariant, error) {
	pin2, builds := filepath.Join(filepath.Dir(b.pinDir), "pin-tmpfs-state"), b.builds(nil)
	ps := append([]plugin{builds[0], {label: "netns-pin, stateDir on tmpfs", bin: b.cfg.plugin, pinDir: pin2,
		entry: b.pinEntry(map[string]any{"pinDir": pin2, "stateDir": filepath.Join(b.cfg.fixtures, "holder-state")})}}, builds[1:]...)
	ps = append(ps, plugin{label: "baseline", bin: b.cfg.baseline, entry: map[string]any{"type": "baseline"}})
	vs := make([]holderVariant, len(ps))
	for i := range vs {
		for j := range holderPool {
			p, err := b.env.netns(b.name(fmt.Sprintf("h%d%d", i, j)), fmt.Sprintf("10.250.1.%d/24", 2+i*holderPool+j))
			if err != nil {
				return nil, err
			}
			vs[i].plugin, vs[i].nss = ps[i], append(vs[i].nss, p)
		}
	}
	return vs, nil
}

// holderRound is one round: ADD of a fresh holder attachment by each
// variant, then their DELs, in an order that rotates every round. out[i]
// is variant i's ADD, out[len(vs)+i] its DEL.
func (b *bench) holderRound(ctx context.Context, vs []holderVariant, r int, wrap string, out []series) error {
	n, atts := len(vs), make([]attachment, len(vs))
	for k := range 2 * n {
		i, step := (k+r)%n, k/n // step 0: ADD, 1: DEL
		if step == 0 {
			j := r % holderPool
			atts[i] = b.attach("holder", vs[i].nss[j], "csi-holder-"+host.RandHex(5), vs[i].entry, fmt.Sprintf("10.250.1.%d", 2+j))
		}
		verb := []string{"ADD", "DEL"}[step]
		x, _, err := b.call(vs[i].bin, verb, atts[i]).run(ctx, wrap)
		if err == nil && vs[i].pinDir != "" { // netns-pin made its pin, or removed it
			err = wantPins(vs[i].pinDir, 1-step, "holder "+verb)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", vs[i].label, verb, err)
		}
		out[step*n+i].add(x)
	}
	return nil
}

func (b *bench) holder(ctx context.Context) error {
	vs, err := b.holderVariants()
	if err != nil {
		return err
	}
	n := len(vs)
	ss, rss, err := b.measure(ctx, 2*n, probeRuns, b.rounds(300), func(ctx context.Context, r int, wrap string, out []series) error {
		return b.holderRound(ctx, vs, r, wrap, out)
	})
	if err != nil {
		return err
	}
	for i, v := range vs {
		if v.pinDir != "" {
			b.keepPinRSS(&rss[i])
			b.keepPinRSS(&rss[n+i])
		}
	}
	b.holderRows(vs, "holder ADD (lock, addresses, record, bind mount, link)", ss[:n], rss[:n])
	b.holderRows(vs, "holder DEL, unused (in-use check of this host, unmount, unlink, records)", ss[n:], rss[n:])
	b.rep.ratioTarget(tHolderAdd, &ss[0], &ss[n-1], 1.5)
	b.rep.ratioTarget(tHolderDel, &ss[n], &ss[2*n-1], 2.0)
	return b.holderSteps(ctx, vs[0])
}

// holderSteps runs holder ADD and DEL of netns-pin with the debug log,
// untimed, and reports the median of each step the store times (see
// netnsstore's steps): where the time over the baseline goes.
func (b *bench) holderSteps(ctx context.Context, v holderVariant) error {
	v.entry = maps.Clone(v.entry)
	v.entry["logLevel"] = "debug"
	runs := b.rounds(60)
	verbs := []string{"ADD", "DEL"}
	logs := make([]bytes.Buffer, len(verbs))
	for r := range runs {
		j := r % holderPool
		a := b.attach("holder", v.nss[j], "csi-holder-"+host.RandHex(5), v.entry, fmt.Sprintf("10.250.1.%d", 2+j))
		for i, verb := range verbs {
			c := b.call(v.bin, verb, a)
			c.log = &logs[i]
			if _, _, err := c.run(ctx, ""); err != nil {
				return fmt.Errorf("steps, %s: %w", verb, err)
			}
		}
	}
	for i, what := range []string{"holder ADD", "holder DEL, unused"} {
		us, order, err := stepMedians(logs[i].Bytes())
		if err != nil {
			return err
		}
		notes := make([]string, len(order))
		for k, name := range order {
			notes[k] = fmt.Sprintf("%s %s", name, fmtDur(us[name]*float64(time.Microsecond)))
		}
		b.rep.add(row{section: "2", name: what + " by step, netns-pin's debug log (medians, untimed runs)", n: fmt.Sprint(runs),
			note: strings.Join(notes, ", ")})
	}
	return nil
}

// stepMedians reads the "steps (µs)" lines of a debug log: the median of
// each step, and the steps in the order they ran.
func stepMedians(log []byte) (map[string]float64, []string, error) {
	all, order := map[string][]float64{}, []string(nil)
	for _, line := range bytes.Split(bytes.TrimSpace(log), []byte("\n")) {
		if !bytes.Contains(line, []byte(`"msg":"steps (µs)"`)) {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		if _, err := dec.Token(); err != nil {
			return nil, nil, fmt.Errorf("steps log %q: %w", line, err)
		}
		for afterMsg := false; dec.More(); {
			key, err := dec.Token()
			if err != nil {
				return nil, nil, fmt.Errorf("steps log %q: %w", line, err)
			}
			var val any
			if err := dec.Decode(&val); err != nil {
				return nil, nil, fmt.Errorf("steps log %q: %w", line, err)
			}
			name, _ := key.(string)
			if us, ok := val.(float64); ok && afterMsg {
				if _, seen := all[name]; !seen {
					order = append(order, name)
				}
				all[name] = append(all[name], us)
			}
			afterMsg = afterMsg || name == "msg"
		}
	}
	if len(order) == 0 {
		return nil, nil, errors.New("no steps in the debug log")
	}
	out := map[string]float64{}
	for name, v := range all {
		slices.Sort(v)
		out[name] = v[len(v)/2]
	}
	return out, order, nil
}

func (b *bench) holderRows(vs []holderVariant, what string, ss, rss []series) {
	base := &ss[len(vs)-1]
	for i, v := range vs {
		t := &ss[i]
		ratio, note := "1.00×", cpuNote(t)
		if i < len(vs)-1 {
			ratio, note = versus(t, base, " baseline"), over(t, base)+"; "+note
		}
		if i == 1 {
			note += "; record fsyncs cost " + fmtDur(median(ss[0].d)-median(t.d))
		}
		b.rep.timed("2", what+": "+v.label, t, &rss[i], ratio, note)
	}
}

// ---------------------------------------------------------------------
// 3. the whole chain through cnitool: bridge + host-local alone vs with
// netns-pin, for a non-holder and a holder pod; ADD+DEL per round.

// chainVariant is one network of section 3 and the pod that joins it.
type chainVariant struct {
	label, net string
	holder     bool
	netns      string
}

// chainNetworks writes the conflists of three networks, bridge +
// host-local then nothing, netns-pin or the baseline plugin, makes their
// bridges and returns the variants to measure. (cnitool keeps results in
// libcni's cache, /var/lib/cni/results; a DEL removes them, the sweep of
// hack/bench.sh those of a failed one.)
func (b *bench) chainNetworks(netconf string) ([]chainVariant, error) {
	var nets []string
	for i, last := range []map[string]any{nil, b.pinEntry(nil), {"type": "baseline"}} {
		net, bridge := b.name(fmt.Sprintf("chain%d", i)), b.name(fmt.Sprintf("b%d", i))
		if err := b.env.bridge(bridge); err != nil {
			return nil, err
		}
		plugins := []any{map[string]any{"type": "bridge", "bridge": bridge, "ipam": map[string]any{
			"type": "host-local", "dataDir": filepath.Join(b.cfg.work, fmt.Sprintf("host-local-%d", i)),
			"ranges": [][]map[string]any{{{"subnet": fmt.Sprintf("10.251.%d.0/24", i)}}},
		}}}
		if last != nil {
			plugins = append(plugins, last)
		}
		data, err := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": net, "plugins": plugins}, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(netconf, net+".conflist"), data, 0o644)
		}
		if err != nil {
			return nil, fmt.Errorf("conflist %s: %w", net, err)
		}
		nets = append(nets, net)
	}
	vs := []chainVariant{
		{label: "bridge + host-local", net: nets[0]},
		{label: "bridge + host-local + baseline plugin (the cost of any chained plugin)", net: nets[2]},
		{label: "bridge + host-local + **netns-pin**, non-holder pod", net: nets[1]},
		{label: "bridge + host-local + **netns-pin**, holder pod", net: nets[1], holder: true},
	}
	for i := range vs {
		p, err := b.env.netns(b.name(fmt.Sprintf("c%d", i)), "")
		if err != nil {
			return nil, err
		}
		vs[i].netns = p
	}
	return vs, nil
}

// chainPod runs one pod's ADD and DEL through cnitool; under rsswrap the
// peak RSS is the whole tree's (cnitool and the plugins it runs).
func (b *bench) chainPod(ctx context.Context, v chainVariant, env []string, wrap string) (add, del sample, err error) {
	ns, name := "default", "web-7d9f8c6b5-"+host.RandHex(5)
	if v.holder {
		ns, name = holderNS, "csi-holder-"+host.RandHex(5)
	}
	env = append(env, "CNI_IFNAME=eth0", "CNI_ARGS="+podArgs(ns, name, host.RandHex(64)))
	add, _, err = call{bin: b.cfg.cnitool, args: []string{"add", v.net, v.netns}, env: env}.run(ctx, wrap)
	if err == nil && v.holder {
		err = wantPins(b.pinDir, 1, "holder ADD through cnitool")
	}
	if err != nil {
		return add, del, err
	}
	del, _, err = call{bin: b.cfg.cnitool, args: []string{"del", v.net, v.netns}, env: env}.run(ctx, wrap)
	if err == nil {
		err = wantPins(b.pinDir, 0, "DEL through cnitool")
	}
	return add, del, err
}

func (b *bench) chain(ctx context.Context) error {
	// netns-pin and the baseline plugin are found by type on CNI_PATH,
	// whose first folder holds the copies measured everywhere (install).
	netconf := filepath.Join(b.cfg.work, "net.d")
	if err := os.MkdirAll(netconf, 0o755); err != nil {
		return fmt.Errorf("chain folders: %w", err)
	}
	vs, err := b.chainNetworks(netconf)
	if err != nil {
		return err
	}
	env := []string{"CNI_PATH=" + b.cfg.cniPath, "NETCONFPATH=" + netconf}
	adds, dels := make([]series, len(vs)), make([]series, len(vs))
	ss, rss, err := b.measure(ctx, len(vs), probeRuns, b.rounds(120), rotate(len(vs), func(ctx context.Context, i int, wrap string) (sample, error) {
		a, d, err := b.chainPod(ctx, vs[i], slices.Clip(env), wrap)
		if wrap == "" {
			adds[i].add(a)
			dels[i].add(d)
		}
		return sample{d: a.d + d.d, cpu: a.cpu + d.cpu, rssKiB: max(a.rssKiB, d.rssKiB)}, err
	}))
	if err != nil {
		return err
	}
	base, chained := median(ss[0].d), median(ss[1].d)
	for i, v := range vs {
		t := &ss[i]
		ratio, note := "1.00×", fmt.Sprintf("ADD %s + DEL %s", fmtDur(median(adds[i].d)), fmtDur(median(dels[i].d)))
		if i > 0 {
			who, added := "netns-pin", median(t.d)-base
			if i == 1 {
				who = "a chained plugin"
			}
			ratio = versus(t, &ss[0], "")
			note += fmt.Sprintf("; %s adds %s = %.1f%% of the chain's setup", who, fmtDur(added), 100*added/base)
		}
		if i >= 2 {
			note += fmt.Sprintf(", %s more than the chained baseline", fmtDur(median(t.d)-chained))
		}
		b.rep.timed("3", "pod network ADD+DEL via cnitool: "+v.label, t, &rss[i], ratio, note)
	}
	return nil
}

// ---------------------------------------------------------------------
// 5. 64 holders (8 clusters) ADD+DEL at once vs the same work serialised.

const concPods, concClusters = 64, 8

// concMode is one way of running the 64 pods of one build.
type concMode struct {
	plugin
	parallel bool
	add, del series // per call, of the timed runs
}

// concRun runs ADD then DEL of a holder attachment in each netns of nss,
// all at once or one after the other, and keeps the per-call samples when
// keep.
func (b *bench) concRun(ctx context.Context, m *concMode, nss []string, keep bool) error {
	calls, errs := make([][2]sample, len(nss)), make([]error, len(nss))
	one := func(i int) {
		a := b.attach("concurrent", nss[i], fmt.Sprintf("holder-c%d-%s", i%concClusters, host.RandHex(5)), m.entry, fmt.Sprintf("10.250.2.%d", i+2))
		if calls[i][0], _, errs[i] = b.call(m.bin, "ADD", a).run(ctx, ""); errs[i] == nil {
			calls[i][1], _, errs[i] = b.call(m.bin, "DEL", a).run(ctx, "")
		}
	}
	var wg sync.WaitGroup
	for i := range nss {
		if m.parallel {
			wg.Go(func() { one(i) })
			continue
		}
		if one(i); errs[i] != nil { // serialised: stop at the first failure
			break
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || !keep {
		return err
	}
	for _, c := range calls {
		m.add.add(c[0])
		m.del.add(c[1])
	}
	return nil
}

func (b *bench) concurrent(ctx context.Context) error {
	var nss []string
	for i := range concPods {
		p, err := b.env.netns(b.name(fmt.Sprintf("k%d", i)), fmt.Sprintf("10.250.2.%d/24", i+2))
		if err != nil {
			return err
		}
		nss = append(nss, p)
	}
	var rules []map[string]any
	for k := range concClusters {
		rules = append(rules, map[string]any{"podNamespace": holderNS, "podName": fmt.Sprintf("holder-c%d-*", k), "cluster": fmt.Sprintf("%s/cluster-%d", holderNS, k)})
	}
	// Each build all at once (index 2k, warmed up first), then serialised.
	var modes []*concMode
	for _, p := range b.builds(map[string]any{"holders": rules}) {
		par := &concMode{plugin: p, parallel: true}
		if err := b.concRun(ctx, par, nss, false); err != nil {
			return err
		}
		modes = append(modes, par, &concMode{plugin: p})
	}
	ss, _, err := b.measure(ctx, len(modes), 0, b.rounds(7), rotate(len(modes), func(ctx context.Context, i int, _ string) (sample, error) {
		t0 := time.Now()
		err := b.concRun(ctx, modes[i], nss, true)
		d := time.Since(t0)
		if err == nil {
			err = wantPins(modes[i].pinDir, 0, "pins left after every DEL")
		}
		return sample{d: d}, err
	}))
	if err != nil {
		return err
	}
	podsPerSec := func(s *series) float64 { return concPods / (median(s.d) / 1e9) }
	for k := 0; k < len(modes); k += 2 {
		conc, serial, m, ser := &ss[k], &ss[k+1], modes[k], modes[k+1]
		b.rep.timed("5", fmt.Sprintf("%d holders × (ADD+DEL), %d clusters, all at once (wall): %s", concPods, concClusters, m.label), conc, nil,
			ratioOf(conc.d, serial.d)+" serial time",
			fmt.Sprintf("%.0f pods/s; speedup %.2f×; per call ADD %s, DEL %s (median, incl. lock wait)",
				podsPerSec(conc), median(serial.d)/median(conc.d), fmtDur(median(m.add.d)), fmtDur(median(m.del.d))))
		b.rep.timed("5", "same work serialised (wall): "+m.label, serial, nil, "1.00×",
			fmt.Sprintf("%.0f pods/s; per call ADD %s, DEL %s", podsPerSec(serial), fmtDur(median(ser.add.d)), fmtDur(median(ser.del.d))))
	}
	return nil
}

// ---------------------------------------------------------------------
// 6. binary sizes (peak RSS is in every row's RSS column).

func (b *bench) sizes(context.Context) error {
	bins := []struct{ label, path string }{
		{"netns-pin", b.cfg.plugin}, {"baseline", b.cfg.baseline}, {"tuning v1.10.0", b.cfg.tuning},
	}
	full, stripped := make([]int64, len(bins)), make([]int64, len(bins)) // ratios to bins[1], the baseline
	for i, x := range bins {
		fi, err := os.Stat(x.path)
		if err != nil {
			return fmt.Errorf("binary size: %w", err)
		}
		full[i] = fi.Size()
		// Stripped the same way for all three (symbol table and DWARF
		// removed, like -ldflags=-s -w); without strip(1), no stripped size.
		st := filepath.Join(b.cfg.work, filepath.Base(x.path)+".stripped")
		if err := sh("strip", "-o", st, x.path); err != nil {
			logf("no stripped size: %v", err)
			continue
		}
		if fi, err = os.Stat(st); err != nil {
			return fmt.Errorf("stripped size: %w", err)
		}
		stripped[i] = fi.Size()
	}
	for i, x := range bins {
		r := row{section: "6", name: "binary size: " + x.label, med: fmtBytes(full[i]), ratio: fmtRatio(float64(full[i])/float64(full[1])) + " baseline"}
		if stripped[i] > 0 {
			r.note = fmt.Sprintf("stripped %s (%s baseline)", fmtBytes(stripped[i]), fmtRatio(float64(stripped[i])/float64(stripped[1])))
		}
		b.rep.add(r)
	}
	if rss := b.pinRSS; len(rss) > 0 {
		lo, hi := minMax(rss)
		b.rep.add(row{section: "6", name: "peak RSS, every netns-pin probe run above (ADD, DEL, passthrough)", n: fmt.Sprint(len(rss)),
			med: fmtKiB(median(rss)) + " median", rss: fmtKiB(hi) + " max",
			note: fmt.Sprintf("min %s; ru_maxrss of the child under rsswrap (fork without CLONE_VM)", fmtKiB(lo))})
	}
	return nil
}

// rssTarget checks the peak RSS of every netns-pin probe run.
func (b *bench) rssTarget() {
	if len(b.pinRSS) > 0 {
		_, hi := minMax(b.pinRSS)
		b.rep.verdict("peak RSS of any invocation under 8 MiB", fmt.Sprintf("max %s over %d netns-pin runs (median %s)",
			fmtKiB(hi), len(b.pinRSS), fmtKiB(median(b.pinRSS))), hi < 8*1024)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

type bench struct {
	cfg              config
	wrap             string // rsswrap binary ("" without a C compiler)
	env              *env
	rep              *report
	pinDir, stateDir string

	mu     sync.Mutex
	pinRSS []float64 // ru_maxrss (KiB) of every direct netns-pin run

	// named figures for the verdicts
	res map[string]float64

	alts []alt // candidate builds compared alongside netns-pin
}

// alt is a candidate netns-pin build (-alt label=binary): a proposed fix,
// measured in the same interleaved rounds as the build under test.
type alt struct{ label, bin string }

func (b *bench) set(key string, v float64) {
	if b.res == nil {
		b.res = map[string]float64{}
	}
	b.res[key] = v
}

func (b *bench) get(key string) (float64, bool) {
	v, ok := b.res[key]
	return v, ok && !math.IsNaN(v)
}

// rounds scales a round count, never below 3.
func (b *bench) rounds(n int) int {
	return max(3, int(math.Round(float64(n)*b.cfg.scale)))
}

// name is a host-unique name for a netns, link or network.
func (b *bench) name(s string) string { return b.cfg.prefix + "-" + s }

const (
	holderNS      = "rook-ceph"
	holderCluster = "rook-ceph/my-cluster"
)

// pinEntry is netns-pin's conflist entry: a Rook-like holder rule, pins and
// records in the work folder; extra fields override.
func (b *bench) pinEntry(extra map[string]any) map[string]any {
	m := map[string]any{
		"type":     "netns-pin",
		"pinDir":   b.pinDir,
		"stateDir": b.stateDir,
		"holders":  []map[string]any{{"podNamespace": holderNS, "podName": "csi-holder-*", "cluster": holderCluster}},
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// keepPinRSS records the peak RSS of a netns-pin probe run (verdict).
func (b *bench) keepPinRSS(x sample) {
	if x.rssKiB > 0 {
		b.mu.Lock()
		b.pinRSS = append(b.pinRSS, float64(x.rssKiB))
		b.mu.Unlock()
	}
}

// probeRuns is how many runs under rsswrap give a command's peak RSS.
const probeRuns = 3

// cpuNote is the child's median CPU time (user + system), which load from
// elsewhere inflates far less than wall time.
func cpuNote(s *series) string { return "CPU " + fmtDur(median(s.cpu())) }

// softDeadline is when the runner's time budget (-budget) runs out: from
// then on every loop stops after minRounds rounds, so that a machine under
// heavy load still gets a whole report in bounded time.
var (
	softDeadline time.Time
	cutShort     atomic.Bool
)

const minRounds = 5

// overBudget reports whether a loop that has done done rounds should stop.
func overBudget(done int) bool {
	if done < minRounds || softDeadline.IsZero() || time.Now().Before(softDeadline) {
		return false
	}
	cutShort.Store(true)
	return true
}

// interleave runs rounds of n commands, rotating the order every round
// (A B C, B C A, C A B, ...), and returns each command's series.
func interleave(ctx context.Context, rounds, n int, fn func(ctx context.Context, round, i int) (sample, error)) ([]series, error) {
	out := make([]series, n)
	for r := range rounds {
		if overBudget(r) {
			break
		}
		for k := range n {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			i := (k + r) % n
			s, err := fn(ctx, r, i)
			if err != nil {
				return out, fmt.Errorf("round %d: %w", r, err)
			}
			out[i].add(s)
		}
	}
	return out, nil
}

// pinsLeft lists the pin files present.
func (b *bench) pinsLeft() []string {
	ents, _ := os.ReadDir(filepath.Join(b.pinDir, "pins"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// ---------------------------------------------------------------------
// 1. passthrough ADD of a non-holder pod: netns-pin vs baseline vs tuning.

func (b *bench) passthrough(ctx context.Context) error {
	ns, err := b.env.netns(b.name("pt"), "10.250.0.5/24")
	if err != nil {
		return err
	}
	prev := prevResult("10.250.0.5")
	want, _ := json.Marshal(prev)
	cid := "bench" + randHex(27)
	env := cniEnv("ADD", cid, ns, podArgs("default", "web-7d9f8c6b5-x2x9k", cid), b.cfg.cniPath)
	net := b.name("passthrough")
	names := []string{"netns-pin", "baseline", "tuning (empty config)"}
	cmds := []call{
		{bin: b.cfg.plugin, env: env, stdin: pluginConf(net, b.pinEntry(nil), prev)},
		{bin: b.cfg.baseline, env: env, stdin: pluginConf(net, map[string]any{"type": "baseline"}, prev)},
		{bin: filepath.Join(b.cfg.cniPath, "tuning"), env: env, stdin: pluginConf(net, map[string]any{"type": "tuning"}, prev)},
	}
	for _, a := range b.alts {
		names = append(names, a.label)
		cmds = append(cmds, call{bin: a.bin, env: env, stdin: cmds[0].stdin})
	}
	// Every command must print prevResult unchanged; these runs, under
	// rsswrap, also give the peak RSS and warm the page cache.
	rss := make([]series, len(cmds))
	for range probeRuns {
		for i, c := range cmds {
			x, out, err := c.runRSS(ctx, b.wrap)
			if err != nil {
				return err
			}
			if !sameJSON(out, want) {
				return fmt.Errorf("%s did not print prevResult unchanged:\n%s", names[i], out)
			}
			rss[i].add(x)
			if i == 0 {
				b.keepPinRSS(x)
			}
		}
	}
	ss, err := interleave(ctx, b.rounds(1000), len(cmds), func(ctx context.Context, _, i int) (sample, error) {
		s, _, err := cmds[i].run(ctx)
		return s, err
	})
	if err != nil {
		return err
	}
	if left := b.pinsLeft(); len(left) > 0 {
		return fmt.Errorf("a non-holder ADD made pins: %v", left)
	}
	pin, base, tun := ss[0].durations(), ss[1].durations(), ss[2].durations()
	rPB, rPT := median(pin)/median(base), median(pin)/median(tun)
	b.set("pt.base", rPB)
	b.set("pt.tuning", rPT)
	b.set("pt.base.paired", pairedRatio(pin, base))
	b.set("pt.tuning.paired", pairedRatio(pin, tun))
	b.set("pt.base.cpu", median(ss[0].cpu())/median(ss[1].cpu()))
	b.set("pt.tuning.cpu", median(ss[0].cpu())/median(ss[2].cpu()))
	r := durRow("1", "passthrough ADD, non-holder pod: **netns-pin**", pin)
	r.ratio = fmt.Sprintf("%s baseline (paired %s); %s tuning (paired %s)", fmtRatio(rPB), fmtRatio(pairedRatio(pin, base)),
		fmtRatio(rPT), fmtRatio(pairedRatio(pin, tun)))
	r.rss = rssCell(&rss[0])
	r.note = fmt.Sprintf("+%s over baseline; %s (%s baseline, %s tuning)", fmtDur(median(pin)-median(base)), cpuNote(&ss[0]),
		fmtRatio(median(ss[0].cpu())/median(ss[1].cpu())), fmtRatio(median(ss[0].cpu())/median(ss[2].cpu())))
	b.rep.add(r)
	r = durRow("1", "passthrough ADD: baseline plugin (skel + types, prints prevResult)", base)
	r.ratio, r.rss, r.note = "1.00×", rssCell(&rss[1]), cpuNote(&ss[1])
	b.rep.add(r)
	r = durRow("1", "passthrough ADD: tuning v1.10.0, empty config", tun)
	r.ratio, r.rss = fmtRatio(median(tun)/median(base))+" baseline", rssCell(&rss[2])
	r.note = cpuNote(&ss[2]) + "; enters the netns"
	b.rep.add(r)
	for k, a := range b.alts {
		i := 3 + k
		t := ss[i].durations()
		r = durRow("1", "passthrough ADD: candidate "+a.label, t)
		r.ratio = fmt.Sprintf("%s baseline (paired %s); %s tuning; %s netns-pin (paired %s)", fmtRatio(median(t)/median(base)),
			fmtRatio(pairedRatio(t, base)), fmtRatio(median(t)/median(tun)), fmtRatio(median(t)/median(pin)), fmtRatio(pairedRatio(t, pin)))
		r.rss, r.note = rssCell(&rss[i]), cpuNote(&ss[i])
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------
// 2. holder ADD (pin + record + links) and DEL (in-use check, unused) vs
// the baseline plugin.

func (b *bench) holder(ctx context.Context) error {
	type variant struct {
		label  string
		bin    string
		entry  map[string]any
		pinDir string // "" for the baseline
		nss    []string
	}
	// The second netns-pin variant keeps its records on tmpfs: the
	// difference to the first is what the fsyncs of the records cost.
	tmpfsState := filepath.Join(b.cfg.fixtures, "holder-state")
	pin2 := filepath.Join(filepath.Dir(b.pinDir), "pin-tmpfs-state")
	vs := []variant{
		{label: "**netns-pin**", bin: b.cfg.plugin, entry: b.pinEntry(nil), pinDir: b.pinDir},
		{label: "netns-pin, stateDir on tmpfs", bin: b.cfg.plugin, pinDir: pin2,
			entry: b.pinEntry(map[string]any{"pinDir": pin2, "stateDir": tmpfsState})},
	}
	for k, a := range b.alts {
		pd := filepath.Join(filepath.Dir(b.pinDir), fmt.Sprintf("pin-alt%d", k))
		vs = append(vs, variant{label: "candidate " + a.label, bin: a.bin, pinDir: pd,
			entry: b.pinEntry(map[string]any{"pinDir": pd, "stateDir": filepath.Join(filepath.Dir(b.stateDir), fmt.Sprintf("state-alt%d", k))})})
	}
	vs = append(vs, variant{label: "baseline", bin: b.cfg.baseline, entry: map[string]any{"type": "baseline"}})
	baseIdx := len(vs) - 1
	const pool = 2
	for i := range vs {
		for j := range pool {
			p, err := b.env.netns(b.name(fmt.Sprintf("h%d%d", i, j)), fmt.Sprintf("10.250.1.%d/24", 2+i*pool+j))
			if err != nil {
				return err
			}
			vs[i].nss = append(vs[i].nss, p)
		}
	}
	net := b.name("holder")
	type attachment struct {
		cid, args, netns string
		conf             []byte
	}
	newAtt := func(v variant, r int) attachment {
		j := r % pool
		cid := "bench" + randHex(27)
		return attachment{cid: cid, args: podArgs(holderNS, "csi-holder-"+randHex(5), cid), netns: v.nss[j],
			conf: pluginConf(net, v.entry, prevResult(fmt.Sprintf("10.250.1.%d", 2+j)))}
	}
	step := func(ctx context.Context, verb string, v variant, a attachment, wrap bool) (sample, error) {
		c := call{bin: v.bin, env: cniEnv(verb, a.cid, a.netns, a.args, b.cfg.cniPath), stdin: a.conf}
		var s sample
		var err error
		if wrap {
			s, _, err = c.runRSS(ctx, b.wrap)
		} else {
			s, _, err = c.run(ctx)
		}
		if err != nil || v.pinDir == "" {
			return s, err
		}
		_, serr := os.Lstat(filepath.Join(v.pinDir, "pins", a.cid+".eth0"))
		switch {
		case verb == "ADD" && serr != nil:
			err = fmt.Errorf("holder ADD made no pin: %w", serr)
		case verb == "DEL" && !errors.Is(serr, os.ErrNotExist):
			err = fmt.Errorf("holder DEL left the pin (lstat: %v)", serr)
		}
		return s, err
	}
	// Peak RSS (and warm-up): ADD and DEL of each under rsswrap.
	addRSS, delRSS := make([]series, len(vs)), make([]series, len(vs))
	for r := range probeRuns {
		for i, v := range vs {
			a := newAtt(v, r)
			x, err := step(ctx, "ADD", v, a, true)
			if err != nil {
				return err
			}
			addRSS[i].add(x)
			y, err := step(ctx, "DEL", v, a, true)
			if err != nil {
				return err
			}
			delRSS[i].add(y)
			if v.pinDir != "" {
				b.keepPinRSS(x)
				b.keepPinRSS(y)
			}
		}
	}
	// One round: ADD of a fresh holder attachment by each, then their
	// DELs, in an order that rotates every round.
	adds, dels := make([]series, len(vs)), make([]series, len(vs))
	for r := range b.rounds(300) {
		if overBudget(r) {
			break
		}
		atts := make([]attachment, len(vs))
		for k := range vs {
			i := (k + r) % len(vs)
			atts[i] = newAtt(vs[i], r)
			x, err := step(ctx, "ADD", vs[i], atts[i], false)
			if err != nil {
				return fmt.Errorf("round %d: %s ADD: %w", r, vs[i].label, err)
			}
			adds[i].add(x)
		}
		for k := range vs {
			i := (k + r) % len(vs)
			x, err := step(ctx, "DEL", vs[i], atts[i], false)
			if err != nil {
				return fmt.Errorf("round %d: %s DEL: %w", r, vs[i].label, err)
			}
			dels[i].add(x)
		}
	}
	for _, verb := range []string{"ADD", "DEL"} {
		ss, rss := adds, addRSS
		what := "holder ADD (lock, intent record, bind mount, IPs, link, active record)"
		if verb == "DEL" {
			ss, rss = dels, delRSS
			what = "holder DEL, unused (in-use check of this host, unmount, unlink, records)"
		}
		base := ss[baseIdx].durations()
		for i, v := range vs {
			t := ss[i].durations()
			r := durRow("2", what+": "+v.label, t)
			r.rss = rssCell(&rss[i])
			r.note = cpuNote(&ss[i])
			if i == baseIdx {
				r.ratio = "1.00×"
			} else {
				r.ratio = fmt.Sprintf("%s baseline (paired %s)", fmtRatio(median(t)/median(base)), fmtRatio(pairedRatio(t, base)))
				r.note = fmt.Sprintf("+%s over baseline; %s", fmtDur(median(t)-median(base)), r.note)
			}
			if i == 1 {
				r.note += fmt.Sprintf("; record fsyncs cost %s", fmtDur(median(ss[0].durations())-median(t)))
			}
			if i == 0 && verb == "ADD" {
				b.set("holder.add", median(t)/median(base))
				b.set("holder.add.paired", pairedRatio(t, base))
			}
			b.rep.add(r)
		}
	}
	return nil
}

// ---------------------------------------------------------------------
// 3. the whole chain through cnitool: bridge + host-local alone vs with
// netns-pin, for a non-holder and a holder pod; ADD+DEL per round.

func (b *bench) chain(ctx context.Context) error {
	netconf := filepath.Join(b.cfg.work, "net.d")
	if err := os.MkdirAll(netconf, 0o755); err != nil {
		return err
	}
	type chainDef struct {
		net    string
		last   string // chained plugin after bridge: "", "netns-pin" or "baseline"
		bridge string
		subnet string
	}
	defs := []chainDef{
		{b.name("chain-base"), "", b.name("b0"), "10.251.0.0/24"},
		{b.name("chain-pin"), "netns-pin", b.name("b1"), "10.251.1.0/24"},
		{b.name("chain-bl"), "baseline", b.name("b2"), "10.251.2.0/24"},
	}
	// The baseline plugin, found by type "baseline" on CNI_PATH.
	extra := filepath.Join(b.cfg.work, "cni-extra")
	if err := os.MkdirAll(extra, 0o755); err != nil {
		return err
	}
	if err := os.Symlink(b.cfg.baseline, filepath.Join(extra, "baseline")); err != nil {
		return err
	}
	for i, d := range defs {
		if err := b.env.bridge(d.bridge); err != nil {
			return err
		}
		plugins := []any{map[string]any{
			"type": "bridge", "bridge": d.bridge,
			"ipam": map[string]any{
				"type": "host-local", "dataDir": filepath.Join(b.cfg.work, fmt.Sprintf("host-local-%d", i)),
				"ranges": [][]map[string]any{{{"subnet": d.subnet}}},
			},
		}}
		switch d.last {
		case "netns-pin":
			plugins = append(plugins, b.pinEntry(nil))
		case "baseline":
			plugins = append(plugins, map[string]any{"type": "baseline"})
		}
		data, _ := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": d.net, "plugins": plugins}, "", "  ")
		if err := os.WriteFile(filepath.Join(netconf, d.net+".conflist"), data, 0o644); err != nil {
			return err
		}
		net := d.net
		// cnitool keeps results in libcni's default cache; DEL removes
		// them, this catches a failed one.
		b.env.defer_("remove cnitool cache of "+net, func() error {
			for _, dir := range []string{"/var/lib/cni/results", "/var/lib/cni/cache/results"} {
				m, _ := filepath.Glob(filepath.Join(dir, net+"-*"))
				for _, f := range m {
					_ = os.Remove(f)
				}
			}
			return nil
		})
	}
	type variant struct {
		label  string
		def    chainDef
		holder bool
		netns  string
	}
	vs := []variant{
		{label: "bridge + host-local", def: defs[0]},
		{label: "bridge + host-local + baseline plugin (the cost of any chained plugin)", def: defs[2]},
		{label: "bridge + host-local + **netns-pin**, non-holder pod", def: defs[1]},
		{label: "bridge + host-local + **netns-pin**, holder pod", def: defs[1], holder: true},
	}
	for i := range vs {
		p, err := b.env.netns(b.name(fmt.Sprintf("c%d", i)), "")
		if err != nil {
			return err
		}
		vs[i].netns = p
	}
	adds, dels := make([]series, len(vs)), make([]series, len(vs))
	one := func(ctx context.Context, v variant, wrap string) (sample, sample, error) {
		name := "web-7d9f8c6b5-" + randHex(5)
		ns := "default"
		if v.holder {
			ns, name = holderNS, "csi-holder-"+randHex(5)
		}
		env := []string{
			"CNI_PATH=" + b.cfg.cniPath + string(os.PathListSeparator) + extra,
			"NETCONFPATH=" + netconf,
			"CNI_IFNAME=eth0",
			"CNI_ARGS=" + podArgs(ns, name, randHex(64)),
		}
		a, _, err := call{bin: b.cfg.cnitool, args: []string{"add", v.def.net, v.netns}, env: env}.runRSS(ctx, wrap)
		if err != nil {
			return a, sample{}, err
		}
		if v.holder {
			if left := b.pinsLeft(); len(left) != 1 {
				return a, sample{}, fmt.Errorf("holder ADD through cnitool: want one pin, have %v", left)
			}
		}
		d, _, err := call{bin: b.cfg.cnitool, args: []string{"del", v.def.net, v.netns}, env: env}.runRSS(ctx, wrap)
		if err == nil && len(b.pinsLeft()) != 0 {
			err = fmt.Errorf("DEL through cnitool left pins %v", b.pinsLeft())
		}
		return a, d, err
	}
	// Peak RSS of the whole tree (cnitool and the plugins it runs; warm-up).
	rss := make([]series, len(vs))
	for range probeRuns {
		for i, v := range vs {
			a, d, err := one(ctx, v, b.wrap)
			if err != nil {
				return err
			}
			rss[i].add(sample{rssKiB: max(a.rssKiB, d.rssKiB)})
		}
	}
	ss, err := interleave(ctx, b.rounds(120), len(vs), func(ctx context.Context, _, i int) (sample, error) {
		a, d, err := one(ctx, vs[i], "")
		if err != nil {
			return sample{}, err
		}
		adds[i].add(a)
		dels[i].add(d)
		return sample{d: a.d + d.d, cpu: a.cpu + d.cpu}, nil
	})
	if err != nil {
		return err
	}
	base, chained := ss[0].durations(), ss[1].durations()
	for i, v := range vs {
		t := ss[i].durations()
		r := durRow("3", "pod network ADD+DEL via cnitool: "+v.label, t)
		r.rss = rssCell(&rss[i])
		note := fmt.Sprintf("ADD %s + DEL %s", fmtDur(median(adds[i].durations())), fmtDur(median(dels[i].durations())))
		if i == 0 {
			r.ratio = "1.00×"
		} else {
			added := median(t) - median(base)
			r.ratio = fmt.Sprintf("%s (paired %s)", fmtRatio(median(t)/median(base)), fmtRatio(pairedRatio(t, base)))
			who := "netns-pin"
			if i == 1 {
				who = "a chained plugin"
			}
			note += fmt.Sprintf("; %s adds %s = %.1f%% of the chain's setup", who, fmtDur(added), 100*added/median(base))
			if i >= 2 {
				note += fmt.Sprintf(", %s more than the chained baseline", fmtDur(median(t)-median(chained)))
			}
			b.set(fmt.Sprintf("chain.%d", i), median(t)/median(base))
		}
		r.note = note
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------
// 5. 64 holders (8 clusters) ADD+DEL at once vs the same work serialised.

func (b *bench) concurrent(ctx context.Context) error {
	const pods, clusters = 64, 8
	var nss []string
	for i := range pods {
		p, err := b.env.netns(b.name(fmt.Sprintf("k%d", i)), fmt.Sprintf("10.250.2.%d/24", i+2))
		if err != nil {
			return err
		}
		nss = append(nss, p)
	}
	var rules []map[string]any
	for k := range clusters {
		rules = append(rules, map[string]any{"podNamespace": holderNS, "podName": fmt.Sprintf("holder-c%d-*", k), "cluster": fmt.Sprintf("%s/cluster-%d", holderNS, k)})
	}
	net := b.name("concurrent")
	type build struct {
		label, bin string
		entry      map[string]any
	}
	builds := []build{{"**netns-pin**", b.cfg.plugin, b.pinEntry(map[string]any{"holders": rules})}}
	for k, a := range b.alts {
		builds = append(builds, build{"candidate " + a.label, a.bin, b.pinEntry(map[string]any{"holders": rules,
			"pinDir": filepath.Join(filepath.Dir(b.pinDir), fmt.Sprintf("pin-alt%d", k)), "stateDir": filepath.Join(filepath.Dir(b.stateDir), fmt.Sprintf("state-alt%d", k))})})
	}
	// one pod: ADD then DEL of a holder attachment
	pod := func(ctx context.Context, bl build, i int) (sample, sample, error) {
		conf := pluginConf(net, bl.entry, prevResult(fmt.Sprintf("10.250.2.%d", i+2)))
		cid := "bench" + randHex(27)
		args := podArgs(holderNS, fmt.Sprintf("holder-c%d-%s", i%clusters, randHex(5)), cid)
		a, _, err := call{bin: bl.bin, env: cniEnv("ADD", cid, nss[i], args, b.cfg.cniPath), stdin: conf}.run(ctx)
		if err != nil {
			return a, sample{}, err
		}
		d, _, err := call{bin: bl.bin, env: cniEnv("DEL", cid, nss[i], args, b.cfg.cniPath), stdin: conf}.run(ctx)
		return a, d, err
	}
	type mode struct {
		build    build
		parallel bool
		add, del series
	}
	var modes []*mode
	for _, bl := range builds {
		modes = append(modes, &mode{build: bl, parallel: true}, &mode{build: bl})
	}
	runMode := func(ctx context.Context, m *mode, keep bool) error {
		var mu sync.Mutex
		one := func(i int) error {
			a, d, err := pod(ctx, m.build, i)
			if err == nil && keep {
				mu.Lock()
				m.add.add(a)
				m.del.add(d)
				mu.Unlock()
			}
			return err
		}
		if !m.parallel {
			for i := range pods {
				if err := one(i); err != nil {
					return err
				}
			}
			return nil
		}
		var wg sync.WaitGroup
		errs := make([]error, pods)
		for i := range pods {
			wg.Go(func() { errs[i] = one(i) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	for _, m := range modes { // warm-up
		if m.parallel {
			if err := runMode(ctx, m, false); err != nil {
				return err
			}
		}
	}
	ss, err := interleave(ctx, b.rounds(7), len(modes), func(ctx context.Context, _, i int) (sample, error) {
		t0 := time.Now()
		err := runMode(ctx, modes[i], true)
		d := time.Since(t0)
		if err == nil && len(b.pinsLeft()) != 0 {
			err = fmt.Errorf("pins left after every DEL: %v", b.pinsLeft())
		}
		return sample{d: d}, err
	})
	if err != nil {
		return err
	}
	for k, bl := range builds {
		m, ser := modes[2*k], modes[2*k+1]
		conc, serial := ss[2*k].durations(), ss[2*k+1].durations()
		speedup := median(serial) / median(conc)
		if k == 0 {
			b.set("concurrent.speedup", speedup)
		}
		r := durRow("5", fmt.Sprintf("%d holders × (ADD+DEL), %d clusters, all at once (wall): %s", pods, clusters, bl.label), conc)
		r.ratio = fmt.Sprintf("%s serial time", fmtRatio(median(conc)/median(serial)))
		r.note = fmt.Sprintf("%.0f pods/s; speedup %.2f×; per call ADD %s, DEL %s (median, incl. lock wait)",
			pods/(median(conc)/1e9), speedup, fmtDur(median(m.add.durations())), fmtDur(median(m.del.durations())))
		b.rep.add(r)
		r = durRow("5", "same work serialised (wall): "+bl.label, serial)
		r.ratio = "1.00×"
		r.note = fmt.Sprintf("%.0f pods/s; per call ADD %s, DEL %s", pods/(median(serial)/1e9), fmtDur(median(ser.add.durations())), fmtDur(median(ser.del.durations())))
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------
// 6. binary sizes (peak RSS is in every row's RSS column).

func (b *bench) sizes(context.Context) error {
	type bin struct{ label, path, stripped string }
	bins := []bin{
		{"netns-pin", b.cfg.plugin, b.cfg.pluginStripped},
		{"baseline", b.cfg.baseline, b.cfg.baselineStripped},
		{"tuning v1.10.0", filepath.Join(b.cfg.cniPath, "tuning"), b.cfg.tuningStripped},
	}
	size := func(p string) int64 {
		if p == "" {
			return -1
		}
		fi, err := os.Stat(p)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	baseFull, baseStripped := size(b.cfg.baseline), size(b.cfg.baselineStripped)
	for _, x := range bins {
		full, st := size(x.path), size(x.stripped)
		if full < 0 {
			return fmt.Errorf("stat %s", x.path)
		}
		r := row{section: "6", name: "binary size: " + x.label, med: math.NaN(), text: fmtBytes(full)}
		r.ratio = fmtRatio(float64(full)/float64(baseFull)) + " baseline"
		if st > 0 {
			r.note = fmt.Sprintf("stripped %s (%s baseline)", fmtBytes(st), fmtRatio(float64(st)/float64(baseStripped)))
		}
		b.rep.add(r)
	}
	b.mu.Lock()
	rss := append([]float64{}, b.pinRSS...)
	b.mu.Unlock()
	if len(rss) > 0 {
		r := row{section: "6", name: "peak RSS, every netns-pin probe run above (ADD, DEL, passthrough)", n: len(rss), med: math.NaN(),
			text: fmtKiB(median(rss)) + " median", rss: fmtKiB(maxOf(rss)) + " max"}
		r.note = fmt.Sprintf("min %s; ru_maxrss of the child under rsswrap (fork without CLONE_VM)", fmtKiB(minOf(rss)))
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------

func (b *bench) verdicts(want map[string]bool) {
	all := want["all"]
	ratio := func(key, target string, limit float64, section string) {
		if !all && !want[section] {
			return
		}
		v, ok := b.get(key)
		if !ok {
			b.rep.unknown(target, "not measured")
			return
		}
		extra := ""
		if p, ok := b.get(key + ".paired"); ok {
			extra = fmt.Sprintf(" (paired %s)", fmtRatio(p))
		}
		b.rep.verdict(target, fmt.Sprintf("%s%s, limit %s", fmtRatio(v), extra, fmtRatio(limit)), v <= limit)
	}
	ratio("pt.base", "passthrough ADD within 1.15× of the baseline plugin", 1.15, "passthrough")
	ratio("pt.tuning", "passthrough ADD no slower than tuning", 1.00, "passthrough")
	ratio("holder.add", "holder ADD within 2× of the baseline", 2.0, "holder")
	if all || want["gobench"] {
		if v, ok := b.get("inuse.1000"); ok {
			cpu := ""
			if c, ok := b.get("inuse.1000.cpu"); ok {
				cpu = fmt.Sprintf(" (CPU %s per check)", fmtDur(c))
			}
			b.rep.verdict("in-use check at 1000 rbd devices + 1000 CephFS clients under 20 ms",
				fmt.Sprintf("median %s%s", fmtDur(v), cpu), v < 20e6)
		} else {
			b.rep.unknown("in-use check at 1000 rbd devices + 1000 CephFS clients under 20 ms", "not measured")
		}
	}
	b.mu.Lock()
	rss := append([]float64{}, b.pinRSS...)
	b.mu.Unlock()
	if len(rss) > 0 {
		b.rep.verdict("peak RSS under 20 MiB", fmt.Sprintf("max %s over %d netns-pin runs (median %s)",
			fmtKiB(maxOf(rss)), len(rss), fmtKiB(median(rss))), maxOf(rss) < 20*1024)
	}
}

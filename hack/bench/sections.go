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

	"github.com/netns-pin/netns-pin/internal/host"
)

type bench struct {
	cfg              config
	wrap             string // rsswrap binary ("" without a C compiler)
	env              *env
	rep              *report
	pinDir, stateDir string

	mu     sync.Mutex
	pinRSS []float64 // ru_maxrss (KiB) of every direct netns-pin run

	res map[metric]float64 // the figures the verdicts check

	alts []alt // candidate builds compared alongside netns-pin
}

// metric names a figure that a verdict checks.
type metric string

const (
	mPassBase         metric = "pt.base"
	mPassBasePaired   metric = "pt.base.paired"
	mPassTuning       metric = "pt.tuning"
	mPassTuningPaired metric = "pt.tuning.paired"
	mHolderAdd        metric = "holder.add"
	mHolderAddPaired  metric = "holder.add.paired"
	mInUse1000        metric = "inuse.1000"
	mInUse1000CPU     metric = "inuse.1000.cpu"
)

// alt is a candidate netns-pin build (-alt label=binary): a proposed fix,
// measured in the same interleaved rounds as the build under test.
type alt struct{ label, bin string }

func (b *bench) set(key metric, v float64) {
	if b.res == nil {
		b.res = map[metric]float64{}
	}
	b.res[key] = v
}

func (b *bench) get(key metric) (float64, bool) {
	v, ok := b.res[key]
	return v, ok && !math.IsNaN(v)
}

// rounds scales a round count, never below 3.
func (b *bench) rounds(n int) int {
	return max(3, int(math.Round(float64(n)*b.cfg.scale)))
}

// name is a host-unique name for a netns, link or network.
func (b *bench) name(s string) string { return b.cfg.prefix + "-" + s }

// newCID is a fresh container ID.
func newCID() string { return "bench" + host.RandHex(27) }

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

// altEntry is pinEntry for candidate build k, with pins and records of its
// own.
func (b *bench) altEntry(k int, extra map[string]any) map[string]any {
	m := map[string]any{
		"pinDir":   filepath.Join(filepath.Dir(b.pinDir), fmt.Sprintf("pin-alt%d", k)),
		"stateDir": filepath.Join(filepath.Dir(b.stateDir), fmt.Sprintf("state-alt%d", k)),
	}
	for k, v := range extra {
		m[k] = v
	}
	return b.pinEntry(m)
}

// keepPinRSS records the peak RSS of netns-pin probe runs (verdict).
func (b *bench) keepPinRSS(xs ...sample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range xs {
		if x.rssKiB > 0 {
			b.pinRSS = append(b.pinRSS, float64(x.rssKiB))
		}
	}
}

// probeRuns is how many runs under rsswrap give a command's peak RSS.
const probeRuns = 3

// cpuNote is the child's median CPU time (user + system), which load from
// elsewhere inflates far less than wall time.
func cpuNote(s *series) string { return "CPU " + fmtDur(median(s.cpu())) }

// versus formats how t compares with ref: "1.23×<what> (paired 1.30×)".
func versus(t, ref []float64, what string) string {
	return fmt.Sprintf("%s%s (paired %s)", fmtRatio(median(t)/median(ref)), what, fmtRatio(pairedRatio(t, ref)))
}

// over formats what t adds to base: "+1.20 ms over baseline".
func over(t, base []float64) string {
	return fmt.Sprintf("+%s over baseline", fmtDur(median(t)-median(base)))
}

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

// measure runs each of n commands probeRuns times under rsswrap (their peak
// RSS, and a warm-up), then rounds of them interleaved, and returns both
// series of each. run runs command i once, under wrap unless it is "".
func (b *bench) measure(ctx context.Context, n, rounds int, run func(ctx context.Context, i int, wrap string) (sample, error)) (ss, rss []series, err error) {
	rss = make([]series, n)
	for range probeRuns {
		for i := range n {
			x, err := run(ctx, i, b.wrap)
			if err != nil {
				return nil, nil, err
			}
			rss[i].add(x)
		}
	}
	ss, err = interleave(ctx, rounds, n, func(ctx context.Context, _, i int) (sample, error) { return run(ctx, i, "") })
	return ss, rss, err
}

// pinsLeft lists the pin files present.
func (b *bench) pinsLeft() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(b.pinDir, "pins"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, err
}

// wantPins fails unless exactly n pin files are present.
func (b *bench) wantPins(n int, what string) error {
	left, err := b.pinsLeft()
	if err == nil && len(left) != n {
		err = fmt.Errorf("%s: want %d pin(s), have %v", what, n, left)
	}
	return err
}

// ---------------------------------------------------------------------
// 1. passthrough ADD of a non-holder pod: netns-pin vs baseline vs tuning.

func (b *bench) passthrough(ctx context.Context) error {
	ns, err := b.env.netns(b.name("pt"), "10.250.0.5/24")
	if err != nil {
		return err
	}
	prev := prevResult("10.250.0.5")
	want, err := json.Marshal(prev)
	if err != nil {
		return err
	}
	cid := newCID()
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
	// Every command must print prevResult unchanged.
	ss, rss, err := b.measure(ctx, len(cmds), b.rounds(1000), func(ctx context.Context, i int, wrap string) (sample, error) {
		x, out, err := cmds[i].runRSS(ctx, wrap)
		if err == nil && !sameJSON(out, want) {
			err = fmt.Errorf("%s did not print prevResult unchanged:\n%s", names[i], out)
		}
		return x, err
	})
	if err != nil {
		return err
	}
	b.keepPinRSS(rss[0].samples...)
	if err := b.wantPins(0, "a non-holder ADD made pins"); err != nil {
		return err
	}
	pin, base, tun := ss[0].durations(), ss[1].durations(), ss[2].durations()
	b.set(mPassBase, median(pin)/median(base))
	b.set(mPassTuning, median(pin)/median(tun))
	b.set(mPassBasePaired, pairedRatio(pin, base))
	b.set(mPassTuningPaired, pairedRatio(pin, tun))
	r := seriesRow("1", "passthrough ADD, non-holder pod: **netns-pin**", &ss[0], &rss[0])
	r.ratio = versus(pin, base, " baseline") + "; " + versus(pin, tun, " tuning")
	r.note = fmt.Sprintf("%s; %s (%s baseline, %s tuning)", over(pin, base), cpuNote(&ss[0]),
		fmtRatio(median(ss[0].cpu())/median(ss[1].cpu())), fmtRatio(median(ss[0].cpu())/median(ss[2].cpu())))
	b.rep.add(r)
	r = seriesRow("1", "passthrough ADD: baseline plugin (skel + types, prints prevResult)", &ss[1], &rss[1])
	r.ratio, r.note = "1.00×", cpuNote(&ss[1])
	b.rep.add(r)
	r = seriesRow("1", "passthrough ADD: tuning v1.10.0, empty config", &ss[2], &rss[2])
	r.ratio, r.note = fmtRatio(median(tun)/median(base))+" baseline", cpuNote(&ss[2])+"; enters the netns"
	b.rep.add(r)
	for k, a := range b.alts {
		i := 3 + k
		t := ss[i].durations()
		r = seriesRow("1", "passthrough ADD: candidate "+a.label, &ss[i], &rss[i])
		r.ratio = fmt.Sprintf("%s; %s tuning; %s", versus(t, base, " baseline"), fmtRatio(median(t)/median(tun)), versus(t, pin, " netns-pin"))
		r.note = cpuNote(&ss[i])
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------
// 2. holder ADD (pin + record + links) and DEL (in-use check, unused) vs
// the baseline plugin.

// holderVariant is one plugin of section 2, with a pool of netns.
type holderVariant struct {
	label  string
	bin    string
	entry  map[string]any
	pinDir string // "" for the baseline
	nss    []string
}

// attachment is one holder attachment of a plugin call.
type attachment struct {
	cid, args, netns string
	conf             []byte
}

const holderPool = 2

// holderVariants are netns-pin, netns-pin with its records on tmpfs (the
// difference is what the fsyncs of the records cost), the candidates and,
// last, the baseline.
func (b *bench) holderVariants() ([]holderVariant, error) {
	pin2 := filepath.Join(filepath.Dir(b.pinDir), "pin-tmpfs-state")
	vs := []holderVariant{
		{label: "**netns-pin**", bin: b.cfg.plugin, entry: b.pinEntry(nil), pinDir: b.pinDir},
		{label: "netns-pin, stateDir on tmpfs", bin: b.cfg.plugin, pinDir: pin2,
			entry: b.pinEntry(map[string]any{"pinDir": pin2, "stateDir": filepath.Join(b.cfg.fixtures, "holder-state")})},
	}
	for k, a := range b.alts {
		e := b.altEntry(k, nil)
		vs = append(vs, holderVariant{label: "candidate " + a.label, bin: a.bin, entry: e, pinDir: e["pinDir"].(string)})
	}
	vs = append(vs, holderVariant{label: "baseline", bin: b.cfg.baseline, entry: map[string]any{"type": "baseline"}})
	for i := range vs {
		for j := range holderPool {
			p, err := b.env.netns(b.name(fmt.Sprintf("h%d%d", i, j)), fmt.Sprintf("10.250.1.%d/24", 2+i*holderPool+j))
			if err != nil {
				return nil, err
			}
			vs[i].nss = append(vs[i].nss, p)
		}
	}
	return vs, nil
}

// holderStep runs one ADD or DEL of a holder attachment and checks that
// netns-pin made or removed its pin.
func (b *bench) holderStep(ctx context.Context, verb string, v holderVariant, a attachment, wrap string) (sample, error) {
	s, _, err := call{bin: v.bin, env: cniEnv(verb, a.cid, a.netns, a.args, b.cfg.cniPath), stdin: a.conf}.runRSS(ctx, wrap)
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

// holderRound is one round: ADD of a fresh holder attachment by each
// variant, then their DELs, in an order that rotates every round.
func (b *bench) holderRound(ctx context.Context, vs []holderVariant, r int, wrap string, adds, dels []series) error {
	net := b.name("holder")
	atts := make([]attachment, len(vs))
	for k := range vs {
		i, j, cid := (k+r)%len(vs), r%holderPool, newCID()
		atts[i] = attachment{cid: cid, args: podArgs(holderNS, "csi-holder-"+host.RandHex(5), cid), netns: vs[i].nss[j],
			conf: pluginConf(net, vs[i].entry, prevResult(fmt.Sprintf("10.250.1.%d", 2+j)))}
		x, err := b.holderStep(ctx, "ADD", vs[i], atts[i], wrap)
		if err != nil {
			return fmt.Errorf("round %d: %s ADD: %w", r, vs[i].label, err)
		}
		adds[i].add(x)
	}
	for k := range vs {
		i := (k + r) % len(vs)
		x, err := b.holderStep(ctx, "DEL", vs[i], atts[i], wrap)
		if err != nil {
			return fmt.Errorf("round %d: %s DEL: %w", r, vs[i].label, err)
		}
		dels[i].add(x)
	}
	return nil
}

func (b *bench) holder(ctx context.Context) error {
	vs, err := b.holderVariants()
	if err != nil {
		return err
	}
	// Peak RSS (and warm-up) under rsswrap, then the measured rounds.
	addRSS, delRSS := make([]series, len(vs)), make([]series, len(vs))
	for r := range probeRuns {
		if err := b.holderRound(ctx, vs, r, b.wrap, addRSS, delRSS); err != nil {
			return err
		}
	}
	for i, v := range vs {
		if v.pinDir != "" {
			b.keepPinRSS(addRSS[i].samples...)
			b.keepPinRSS(delRSS[i].samples...)
		}
	}
	adds, dels := make([]series, len(vs)), make([]series, len(vs))
	for r := range b.rounds(300) {
		if overBudget(r) {
			break
		}
		if err := b.holderRound(ctx, vs, r, "", adds, dels); err != nil {
			return err
		}
	}
	b.holderRows(vs, "holder ADD (lock, addresses, record, bind mount, link)", true, adds, addRSS)
	b.holderRows(vs, "holder DEL, unused (in-use check of this host, unmount, unlink, records)", false, dels, delRSS)
	return nil
}

func (b *bench) holderRows(vs []holderVariant, what string, add bool, ss, rss []series) {
	base := ss[len(vs)-1].durations()
	for i, v := range vs {
		t := ss[i].durations()
		r := seriesRow("2", what+": "+v.label, &ss[i], &rss[i])
		r.ratio, r.note = "1.00×", cpuNote(&ss[i])
		if i != len(vs)-1 {
			r.ratio, r.note = versus(t, base, " baseline"), over(t, base)+"; "+r.note
		}
		if i == 1 {
			r.note += fmt.Sprintf("; record fsyncs cost %s", fmtDur(median(ss[0].durations())-median(t)))
		}
		if i == 0 && add {
			b.set(mHolderAdd, median(t)/median(base))
			b.set(mHolderAddPaired, pairedRatio(t, base))
		}
		b.rep.add(r)
	}
}

// ---------------------------------------------------------------------
// 3. the whole chain through cnitool: bridge + host-local alone vs with
// netns-pin, for a non-holder and a holder pod; ADD+DEL per round.

// chainVariant is one network of section 3 and the pod that joins it.
type chainVariant struct {
	label  string
	net    string
	holder bool
	netns  string
}

// chainNetworks writes the conflists of the three networks (bridge +
// host-local, then nothing, netns-pin or the baseline plugin), makes their
// bridges and returns the variants to measure.
func (b *bench) chainNetworks(netconf, extra string) ([]chainVariant, error) {
	type chainDef struct{ net, last, bridge, subnet string }
	defs := []chainDef{
		{b.name("chain-base"), "", b.name("b0"), "10.251.0.0/24"},
		{b.name("chain-pin"), "netns-pin", b.name("b1"), "10.251.1.0/24"},
		{b.name("chain-bl"), "baseline", b.name("b2"), "10.251.2.0/24"},
	}
	for i, d := range defs {
		if err := b.env.bridge(d.bridge); err != nil {
			return nil, err
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
		data, err := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": d.net, "plugins": plugins}, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(netconf, d.net+".conflist"), data, 0o644); err != nil {
			return nil, err
		}
		// cnitool keeps results in libcni's default cache; DEL removes
		// them, this catches a failed one.
		b.env.defer_("remove cnitool cache of "+d.net, func() error {
			var errs []error
			for _, dir := range []string{"/var/lib/cni/results", "/var/lib/cni/cache/results"} {
				m, err := filepath.Glob(filepath.Join(dir, d.net+"-*"))
				errs = append(errs, err)
				for _, f := range m {
					errs = append(errs, os.Remove(f))
				}
			}
			return errors.Join(errs...)
		})
	}
	vs := []chainVariant{
		{label: "bridge + host-local", net: defs[0].net},
		{label: "bridge + host-local + baseline plugin (the cost of any chained plugin)", net: defs[2].net},
		{label: "bridge + host-local + **netns-pin**, non-holder pod", net: defs[1].net},
		{label: "bridge + host-local + **netns-pin**, holder pod", net: defs[1].net, holder: true},
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

func (b *bench) chain(ctx context.Context) error {
	netconf := filepath.Join(b.cfg.work, "net.d")
	if err := os.MkdirAll(netconf, 0o755); err != nil {
		return err
	}
	// The baseline plugin, found by type "baseline" on CNI_PATH.
	extra := filepath.Join(b.cfg.work, "cni-extra")
	if err := os.MkdirAll(extra, 0o755); err != nil {
		return err
	}
	if err := os.Symlink(b.cfg.baseline, filepath.Join(extra, "baseline")); err != nil {
		return err
	}
	vs, err := b.chainNetworks(netconf, extra)
	if err != nil {
		return err
	}
	adds, dels := make([]series, len(vs)), make([]series, len(vs))
	// One pod's ADD and DEL through cnitool; under rsswrap the peak RSS is
	// the whole tree's (cnitool and the plugins it runs).
	ss, rss, err := b.measure(ctx, len(vs), b.rounds(120), func(ctx context.Context, i int, wrap string) (sample, error) {
		v := vs[i]
		ns, name := "default", "web-7d9f8c6b5-"+host.RandHex(5)
		if v.holder {
			ns, name = holderNS, "csi-holder-"+host.RandHex(5)
		}
		env := []string{"CNI_PATH=" + b.cfg.cniPath + string(os.PathListSeparator) + extra, "NETCONFPATH=" + netconf,
			"CNI_IFNAME=eth0", "CNI_ARGS=" + podArgs(ns, name, host.RandHex(64))}
		a, _, err := call{bin: b.cfg.cnitool, args: []string{"add", v.net, v.netns}, env: env}.runRSS(ctx, wrap)
		if err == nil && v.holder {
			err = b.wantPins(1, "holder ADD through cnitool")
		}
		if err != nil {
			return a, err
		}
		d, _, err := call{bin: b.cfg.cnitool, args: []string{"del", v.net, v.netns}, env: env}.runRSS(ctx, wrap)
		if err == nil {
			err = b.wantPins(0, "DEL through cnitool")
		}
		if wrap == "" {
			adds[i].add(a)
			dels[i].add(d)
		}
		return sample{d: a.d + d.d, cpu: a.cpu + d.cpu, rssKiB: max(a.rssKiB, d.rssKiB)}, err
	})
	if err != nil {
		return err
	}
	base, chained := ss[0].durations(), ss[1].durations()
	for i, v := range vs {
		t := ss[i].durations()
		r := seriesRow("3", "pod network ADD+DEL via cnitool: "+v.label, &ss[i], &rss[i])
		r.ratio, r.note = "1.00×", fmt.Sprintf("ADD %s + DEL %s", fmtDur(median(adds[i].durations())), fmtDur(median(dels[i].durations())))
		if i > 0 {
			added := median(t) - median(base)
			who := "netns-pin"
			if i == 1 {
				who = "a chained plugin"
			}
			r.ratio = versus(t, base, "")
			r.note += fmt.Sprintf("; %s adds %s = %.1f%% of the chain's setup", who, fmtDur(added), 100*added/median(base))
		}
		if i >= 2 {
			r.note += fmt.Sprintf(", %s more than the chained baseline", fmtDur(median(t)-median(chained)))
		}
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------
// 5. 64 holders (8 clusters) ADD+DEL at once vs the same work serialised.

const concPods, concClusters = 64, 8

// concMode is one way of running the 64 pods of one build.
type concMode struct {
	label, bin string
	entry      map[string]any
	parallel   bool
	add, del   series // per call
}

// concPod is one pod: ADD then DEL of a holder attachment.
func (b *bench) concPod(ctx context.Context, m *concMode, netns string, i int) (sample, sample, error) {
	conf := pluginConf(b.name("concurrent"), m.entry, prevResult(fmt.Sprintf("10.250.2.%d", i+2)))
	cid := newCID()
	args := podArgs(holderNS, fmt.Sprintf("holder-c%d-%s", i%concClusters, host.RandHex(5)), cid)
	a, _, err := call{bin: m.bin, env: cniEnv("ADD", cid, netns, args, b.cfg.cniPath), stdin: conf}.run(ctx)
	if err != nil {
		return a, sample{}, err
	}
	d, _, err := call{bin: m.bin, env: cniEnv("DEL", cid, netns, args, b.cfg.cniPath), stdin: conf}.run(ctx)
	return a, d, err
}

// concRun runs every pod of m, all at once or one after the other, and
// keeps the per-call samples when keep.
func (b *bench) concRun(ctx context.Context, m *concMode, nss []string, keep bool) error {
	var mu sync.Mutex
	one := func(i int) error {
		a, d, err := b.concPod(ctx, m, nss[i], i)
		if err == nil && keep {
			mu.Lock()
			m.add.add(a)
			m.del.add(d)
			mu.Unlock()
		}
		return err
	}
	errs := make([]error, len(nss))
	var wg sync.WaitGroup
	for i := range nss {
		if !m.parallel {
			if errs[i] = one(i); errs[i] != nil {
				break
			}
			continue
		}
		wg.Go(func() { errs[i] = one(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
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
	builds := []concMode{{label: "**netns-pin**", bin: b.cfg.plugin, entry: b.pinEntry(map[string]any{"holders": rules})}}
	for k, a := range b.alts {
		builds = append(builds, concMode{label: "candidate " + a.label, bin: a.bin, entry: b.altEntry(k, map[string]any{"holders": rules})})
	}
	// Each build all at once (index 2k, warmed up first), then serialised.
	var modes []*concMode
	for _, m := range builds {
		par, ser := m, m
		par.parallel = true
		if err := b.concRun(ctx, &par, nss, false); err != nil {
			return err
		}
		modes = append(modes, &par, &ser)
	}
	ss, err := interleave(ctx, b.rounds(7), len(modes), func(ctx context.Context, _, i int) (sample, error) {
		t0 := time.Now()
		err := b.concRun(ctx, modes[i], nss, true)
		d := time.Since(t0)
		if err == nil {
			err = b.wantPins(0, "pins left after every DEL")
		}
		return sample{d: d}, err
	})
	if err != nil {
		return err
	}
	for k := 0; k < len(modes); k += 2 {
		conc, serial := ss[k].durations(), ss[k+1].durations()
		m, ser := modes[k], modes[k+1]
		r := seriesRow("5", fmt.Sprintf("%d holders × (ADD+DEL), %d clusters, all at once (wall): %s", concPods, concClusters, m.label), &ss[k], nil)
		r.ratio = fmt.Sprintf("%s serial time", fmtRatio(median(conc)/median(serial)))
		r.note = fmt.Sprintf("%.0f pods/s; speedup %.2f×; per call ADD %s, DEL %s (median, incl. lock wait)",
			concPods/(median(conc)/1e9), median(serial)/median(conc), fmtDur(median(m.add.durations())), fmtDur(median(m.del.durations())))
		b.rep.add(r)
		r = seriesRow("5", "same work serialised (wall): "+m.label, &ss[k+1], nil)
		r.ratio = "1.00×"
		r.note = fmt.Sprintf("%.0f pods/s; per call ADD %s, DEL %s", concPods/(median(serial)/1e9), fmtDur(median(ser.add.durations())), fmtDur(median(ser.del.durations())))
		b.rep.add(r)
	}
	return nil
}

// ---------------------------------------------------------------------
// 6. binary sizes (peak RSS is in every row's RSS column).

func (b *bench) sizes(context.Context) error {
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if p == "" || err != nil {
			return -1
		}
		return fi.Size()
	}
	baseFull, baseStripped := size(b.cfg.baseline), size(b.cfg.baselineStripped)
	for _, x := range []struct{ label, path, stripped string }{
		{"netns-pin", b.cfg.plugin, b.cfg.pluginStripped},
		{"baseline", b.cfg.baseline, b.cfg.baselineStripped},
		{"tuning v1.10.0", filepath.Join(b.cfg.cniPath, "tuning"), b.cfg.tuningStripped},
	} {
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
	if rss := b.pinRSSRuns(); len(rss) > 0 {
		r := row{section: "6", name: "peak RSS, every netns-pin probe run above (ADD, DEL, passthrough)", n: len(rss), med: math.NaN(),
			text: fmtKiB(median(rss)) + " median", rss: fmtKiB(maxOf(rss)) + " max"}
		r.note = fmt.Sprintf("min %s; ru_maxrss of the child under rsswrap (fork without CLONE_VM)", fmtKiB(minOf(rss)))
		b.rep.add(r)
	}
	return nil
}

func (b *bench) pinRSSRuns() []float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]float64{}, b.pinRSS...)
}

// ---------------------------------------------------------------------

func (b *bench) verdicts(want map[string]bool) {
	all := want["all"]
	ratio := func(key, paired metric, target string, limit float64, section string) {
		if !all && !want[section] {
			return
		}
		v, ok := b.get(key)
		if !ok {
			b.rep.unknown(target, "not measured")
			return
		}
		extra := ""
		if p, ok := b.get(paired); ok {
			extra = fmt.Sprintf(" (paired %s)", fmtRatio(p))
		}
		b.rep.verdict(target, fmt.Sprintf("%s%s, limit %s", fmtRatio(v), extra, fmtRatio(limit)), v <= limit)
	}
	ratio(mPassBase, mPassBasePaired, "passthrough ADD within 1.05× of the baseline plugin", 1.05, "passthrough")
	ratio(mPassTuning, mPassTuningPaired, "passthrough ADD no slower than tuning", 1.00, "passthrough")
	ratio(mHolderAdd, mHolderAddPaired, "holder ADD within 1.5× of the baseline", 1.5, "holder")
	if all || want["gobench"] {
		const target = "in-use check at 1000 rbd devices + 1000 CephFS clients under 20 ms"
		if v, ok := b.get(mInUse1000); ok {
			cpu := ""
			if c, ok := b.get(mInUse1000CPU); ok {
				cpu = fmt.Sprintf(" (CPU %s per check)", fmtDur(c))
			}
			b.rep.verdict(target, fmt.Sprintf("median %s%s", fmtDur(v), cpu), v < 20e6)
		} else {
			b.rep.unknown(target, "not measured")
		}
	}
	if rss := b.pinRSSRuns(); len(rss) > 0 {
		b.rep.verdict("peak RSS of any invocation under 8 MiB", fmt.Sprintf("max %s over %d netns-pin runs (median %s)",
			fmtKiB(maxOf(rss)), len(rss), fmtKiB(median(rss))), maxOf(rss) < 8*1024)
	}
}

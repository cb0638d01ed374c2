package model

// The model and the driver loop. Needs root: it makes network namespaces,
// bind mounts and processes in them, like the e2e suites.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

var (
	seedFlag  = flag.Int64("model.seed", 0, "seed of the random steps (0: SEED from the environment, else the clock)")
	stepsFlag = flag.Int("model.steps", 0, "number of random steps (0: MODEL_STEPS from the environment, else 500)")
)

// defaultSteps keeps make test's run of the model under a minute on two
// cores; make soak asks for more.
const defaultSteps = 500

// rtState is what the runtime thinks of a holder pod's sandbox.
type rtState int

const (
	rtRunning  rtState = iota // ADD succeeded
	rtAdding                  // ADD failed (crashed); the runtime retries ADD or gives up with DEL
	rtDeleting                // DEL failed (refused or crashed); the runtime retries DEL
	rtGone                    // DEL succeeded and the chain tore the netns down; a reboot; or the runtime forgot it
)

func (s rtState) String() string {
	return [...]string{"running", "adding", "deleting", "gone"}[s]
}

// pinState is what the model expects of the holder's record: none, or the
// record's state.
type pinState string

const (
	pinNone     pinState = "none"
	pinActive   pinState = "active"
	pinDraining pinState = "draining"
	// pinUnpinned: in use, its pin unmounted from outside, and nothing the
	// plugin can reach holds the netns (only kernel clients do): kept,
	// without a pin, never a link target.
	pinUnpinned pinState = "unpinned"
)

// holder is a holder pod's attachment.
type holder struct {
	id        int
	cluster   int
	podNS     string
	podName   string
	podUID    string
	claim     string // args.cni.pinCluster, for holders by claim
	cid       string
	att       string // <containerID>.<ifname>
	netnsName string
	netnsPath string
	nsid      host.NSID
	rt        rtState
	pin       pinState
	// uncertain: an operation crashed, or the pin was unmounted behind
	// the plugin's back; the next repairing operation decides the state,
	// within allowed (any state when empty) and the in-use rule.
	uncertain bool
	allowed   []pinState
	unmounted bool     // pin unmounted externally, not yet repaired
	ips       []string // addresses on eth0 now
	addIPs    []string // addresses the record got at ADD
}

func (h *holder) String() string {
	return fmt.Sprintf("h%d(%s %s/%s)", h.id, clusterOf(h.cluster), h.podNS, h.podName)
}

func (h *holder) call(verb string) cniCall {
	c := cniCall{verb: verb, containerID: h.cid, netnsPath: h.netnsPath, podNS: h.podNS, podName: h.podName,
		podUID: h.podUID, claim: h.claim, prevIPs: h.ips}
	if linkless(h.cluster) {
		c.entry = map[string]any{"links": []string{}}
	}
	return c
}

// client is a Ceph client (or any process) that uses a holder's netns.
type client struct {
	id   int
	kind string // "proc", "rbd", "cephfs"
	h    *holder
	ip   string // rbd, cephfs: the address the monitors saw
	p    *proc
	dir  string // rbd, cephfs: the fixture directory
	ref  string // rbd, cephfs: the kernel's reference on the netns (see holdNetns)
}

func (c *client) String() string {
	if c.kind == "proc" {
		return fmt.Sprintf("c%d(proc pid %d in h%d)", c.id, c.p.cmd.Process.Pid, c.h.id)
	}
	return fmt.Sprintf("c%d(%s %s of h%d)", c.id, c.kind, c.ip, c.h.id)
}

type driver struct {
	t       *testing.T
	e       *env
	main    *rand.Rand // chooses the steps
	rng     *rand.Rand // the current step's choices
	script  bool
	trace   []stepRec
	seed    uint64
	fps     []string
	table   []stepDef
	holders []*holder
	clients []*client
	nextH   int
	nextC   int
	nextIP  int
	boot    int
	// dirty: a crash, an external unmount or a reboot happened and no
	// repairing operation has run since; the link rule and the records
	// are checked only when clean.
	dirty bool
	// repaired: the current step ran an operation that repairs the store
	// (takes its lock and repairs) to the end.
	repaired bool
	// ctlRepaired: that operation was netns-pinctl's, whose repair also
	// settles an abandoned record of this boot; the plugin's leaves it
	// for netns-pinctl, which runs the chain's DEL first.
	ctlRepaired bool
	// owed: holders whose abandoned record, with a captured chain, a
	// reboot left; netns-pinctl owes them the chain's DEL (I7).
	owed     map[*holder]bool
	step     int
	log      []string
	ignore   map[string]bool
	counts   map[string]int // invariant checks made
	found    map[string]int // violations of ignored invariants
	stepRuns map[string]int
}

func (d *driver) logf(format string, args ...any) {
	d.log = append(d.log, fmt.Sprintf("%4d. ", d.step)+fmt.Sprintf(format, args...))
}

// violation reports a broken invariant: it stops the run (unless
// MODEL_IGNORE names the invariant, for exploring what follows it); the
// test then reports the seed, the steps and the plugin's log.
func (d *driver) violation(inv, format string, args ...any) {
	d.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if d.ignore[inv] {
		d.found[inv]++
		d.logf("    VIOLATION %s (ignored): %s", inv, msg)
		return
	}
	d.logf("    VIOLATION %s: %s", inv, msg)
	panic(&violated{inv: inv, msg: msg, step: d.step})
}

// violated is a broken invariant, carried out of the run by panic.
type violated struct {
	inv, msg string
	step     int
}

// class is the kind of a violation, without the names and numbers of one
// run, so that a shorter sequence can be told to fail the same way.
func (v *violated) class() string {
	m := regexp.MustCompile(`\([^()]*\)|\[[^\[\]]*\]|/\S+|[0-9]+`).ReplaceAllString(v.msg, "")
	return v.inv + " " + m
}

// report is the failure message of a run.
func (d *driver) report(v *violated) string {
	var b strings.Builder
	from := fmt.Sprintf("seed %d", d.seed)
	if d.script {
		from = "replayed step list"
	}
	fmt.Fprintf(&b, "invariant %s violated at step %d (%s): %s\n\nsteps:\n", v.inv, v.step, from, v.msg)
	for _, l := range d.log {
		b.WriteString(l + "\n")
	}
	var env []string
	for _, name := range []string{"MODEL_ONLY", "MODEL_FAILPOINTS", "MODEL_IGNORE"} {
		if v := os.Getenv(name); v != "" && (name != "MODEL_ONLY" || !d.script) {
			env = append(env, name+"="+v)
		}
	}
	if d.script {
		env = append(env, fmt.Sprintf("MODEL_SCRIPT='%s'", encodeTrace(d.trace)))
	} else {
		env = append(env, fmt.Sprintf("SEED=%d MODEL_STEPS=%d", d.seed, v.step))
	}
	fmt.Fprintf(&b, "\nreplay: %s go test -count=1 -run TestModel ./test/model/\n", strings.Join(env, " "))
	if data, err := os.ReadFile(d.e.logFile); err == nil {
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "\nlast lines of the plugin log:\n%s\n", strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	return b.String()
}

func (d *driver) count(inv string) { d.counts[inv]++ }

func (d *driver) inUse(h *holder) bool {
	return slices.ContainsFunc(d.clients, func(c *client) bool { return c.h == h })
}

func (d *driver) users(h *holder) []string {
	var out []string
	for _, c := range d.clients {
		if c.h == h {
			out = append(out, c.String())
		}
	}
	return out
}

func (d *driver) alive() []*holder {
	return d.filter(func(h *holder) bool { return h.rt != rtGone })
}

func (d *driver) filter(f func(*holder) bool) []*holder {
	var out []*holder
	for _, h := range d.holders {
		if f(h) {
			out = append(out, h)
		}
	}
	return out
}

func pick[T any](d *driver, s []T) T { return s[d.rng.IntN(len(s))] }

func (d *driver) newIP() string {
	d.nextIP++
	return ipOf(d.nextIP)
}

// holderByNetns finds the holder whose netns is id; the newest wins, since
// an inode number is reused only after its netns died.
func (d *driver) holderByNetns(id host.NSID) *holder {
	for i := len(d.holders) - 1; i >= 0; i-- {
		if d.holders[i].nsid == id {
			return d.holders[i]
		}
	}
	return nil
}

// prune forgets holders nothing can refer to any more.
func (d *driver) prune() {
	if d.dirty {
		return
	}
	d.holders = slices.DeleteFunc(d.holders, func(h *holder) bool {
		return h.rt == rtGone && h.pin == pinNone && !h.uncertain && !d.inUse(h)
	})
}

func envInt(name string) (int64, bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", name, v, err))
	}
	return n, true
}

// config is what a run is asked to do.
type config struct {
	seed   uint64
	steps  int
	script []stepRec // replay these steps instead of random ones
	table  []stepDef
	ignore map[string]bool
	bin    string
	fps    []string
}

// stepRec is one applied step: its name and the seed of its own choices,
// enough to replay it in another sequence.
type stepRec struct {
	name string
	seed uint64
}

func encodeTrace(tr []stepRec) string {
	parts := make([]string, len(tr))
	for i, s := range tr {
		parts[i] = fmt.Sprintf("%s:%d", s.name, s.seed)
	}
	return strings.Join(parts, ",")
}

func decodeTrace(t *testing.T, s string) []stepRec {
	var out []stepRec
	for _, p := range strings.Split(s, ",") {
		name, seed, ok := strings.Cut(strings.TrimSpace(p), ":")
		n, err := strconv.ParseUint(seed, 10, 64)
		require.True(t, ok && err == nil, "MODEL_SCRIPT: bad step %q (want name:seed)", p)
		out = append(out, stepRec{name, n})
	}
	return out
}

// TestModel drives the real plugin through random steps and checks the
// invariants after each one. Needs root.
//
//	SEED=n          replay the run of seed n (default: the clock)
//	MODEL_STEPS=n   number of steps (default 500)
//	MODEL_SCRIPT=.. replay a step list as printed by a failure
//	MODEL_SHRINK=1  on failure, look for a shorter step list that fails the same way
//	MODEL_ONLY=a,b  only these steps (exploration)
//	MODEL_IGNORE=I4 do not stop at these invariants (exploration)
//	MODEL_FAILPOINTS=a,b  crash only at these failpoints (exploration)
//	MODEL_LOG=1     print the step log of a passing run
func TestModel(t *testing.T) {
	require.Zero(t, os.Geteuid(), "the model test needs root: network namespaces, mounts, nsenter")
	cfg := config{seed: uint64(*seedFlag), steps: *stepsFlag, ignore: map[string]bool{}, table: stepTable}
	if cfg.seed == 0 {
		if n, ok := envInt("SEED"); ok {
			cfg.seed = uint64(n)
		} else {
			cfg.seed = uint64(time.Now().UnixNano() % 1e9)
		}
	}
	if cfg.steps == 0 {
		if n, ok := envInt("MODEL_STEPS"); ok {
			cfg.steps = int(n)
		} else {
			cfg.steps = defaultSteps
		}
	}
	if s := os.Getenv("MODEL_SCRIPT"); s != "" {
		cfg.script = decodeTrace(t, s)
	}
	for _, inv := range strings.Split(os.Getenv("MODEL_IGNORE"), ",") {
		if inv = strings.TrimSpace(inv); inv != "" {
			cfg.ignore[inv] = true
		}
	}
	if only := os.Getenv("MODEL_ONLY"); only != "" {
		names := strings.Split(only, ",")
		cfg.table = slices.DeleteFunc(slices.Clone(stepTable), func(s stepDef) bool { return !slices.Contains(names, s.name) })
		require.NotEmpty(t, cfg.table, "MODEL_ONLY=%s names no step", only)
	}
	cfg.bin = buildPlugin(t, t.TempDir())
	cfg.fps = failpoints(t)
	if only := os.Getenv("MODEL_FAILPOINTS"); only != "" {
		names := strings.Split(only, ",")
		cfg.fps = slices.DeleteFunc(cfg.fps, func(fp string) bool { return !slices.Contains(names, fp) })
		require.NotEmpty(t, cfg.fps, "MODEL_FAILPOINTS=%s names no failpoint", only)
	}
	t.Logf("seed %d, %d steps, failpoints %v", cfg.seed, cfg.steps, cfg.fps)

	start := time.Now()
	d, v := run(t, cfg)
	elapsed := time.Since(start)
	if v != nil {
		msg := d.report(v)
		if os.Getenv("MODEL_SHRINK") != "" {
			msg += shrink(t, cfg, d.trace, v)
		}
		t.Fatal(msg)
	}

	names := make([]string, 0, len(d.stepRuns))
	for n := range d.stepRuns {
		names = append(names, n)
	}
	sort.Strings(names)
	var runs []string
	for _, n := range names {
		runs = append(runs, fmt.Sprintf("%s=%d", n, d.stepRuns[n]))
	}
	t.Logf("seed %d: %d steps in %s (%.1f steps/s)", cfg.seed, d.step-1, elapsed.Round(time.Millisecond), float64(d.step-1)/elapsed.Seconds())
	t.Logf("steps run: %s", strings.Join(runs, " "))
	t.Logf("invariant checks: I1=%d I2=%d I3=%d I4=%d I5=%d I6=%d I7=%d", d.counts["I1"], d.counts["I2"], d.counts["I3"], d.counts["I4"], d.counts["I5"], d.counts["I6"], d.counts["I7"])
	if os.Getenv("MODEL_LOG") != "" {
		t.Logf("steps:\n%s", strings.Join(d.log, "\n"))
	}
	if len(d.found) > 0 {
		t.Errorf("violations of ignored invariants: %v\nsteps:\n%s", d.found, strings.Join(d.log, "\n"))
	}
}

// run makes a fresh host environment and applies cfg's steps (random, or
// its script) and a final drain, checking the invariants after each. It
// returns the first violation, if any.
func run(t *testing.T, cfg config) (d *driver, v *violated) {
	d = &driver{
		t: t, e: newEnv(t, cfg.bin), main: rand.New(rand.NewPCG(cfg.seed, 0x6e65746e732d7069)), seed: cfg.seed,
		fps: cfg.fps, table: cfg.table, ignore: cfg.ignore, script: cfg.script != nil,
		counts: map[string]int{}, owed: map[*holder]bool{}, found: map[string]int{}, stepRuns: map[string]int{},
	}
	t.Cleanup(d.cleanup)
	defer func() {
		if r := recover(); r != nil {
			var ok bool
			if v, ok = r.(*violated); !ok {
				panic(r)
			}
		}
	}()
	if cfg.script != nil {
		for i, s := range cfg.script {
			d.step = i + 1
			held := d.linksToPinsInUse()
			d.scriptedStep(s)
			d.checkLinksStayed(held)
			d.checkAll()
			d.prune()
		}
	} else {
		for d.step = 1; d.step <= cfg.steps; d.step++ {
			held := d.linksToPinsInUse()
			d.randomStep()
			d.checkLinksStayed(held)
			d.checkAll()
			d.prune()
		}
	}
	d.step = len(d.trace) + 1
	d.logf("final drain")
	d.drainAll()
	d.checkAll()
	return d, nil
}

// randomStep applies one step of the table, chosen by weight among those
// whose preconditions hold. Each step draws its choices from its own
// seed, so that it can be replayed in another sequence.
func (d *driver) randomStep() {
	total := 0
	for _, s := range d.table {
		total += s.weight
	}
	for range 1000 {
		n := d.main.IntN(total)
		for _, s := range d.table {
			if n -= s.weight; n >= 0 {
				continue
			}
			if d.apply(stepRec{s.name, d.main.Uint64()}, s) {
				return
			}
			break
		}
	}
	d.t.Fatalf("no step applicable at step %d (seed %d)", d.step, d.seed)
}

func (d *driver) apply(rec stepRec, s stepDef) bool {
	d.rng = rand.New(rand.NewPCG(rec.seed, uint64(len(rec.name))))
	d.repaired, d.ctlRepaired = false, false
	d.trace = append(d.trace, rec) // kept if the step breaks an invariant
	if !s.run(d) {
		d.trace = d.trace[:len(d.trace)-1]
		return false
	}
	d.stepRuns[s.name]++
	return true
}

func (d *driver) scriptedStep(rec stepRec) {
	i := slices.IndexFunc(stepTable, func(s stepDef) bool { return s.name == rec.name })
	require.True(d.t, i >= 0, "no step %q", rec.name)
	if !d.apply(rec, stepTable[i]) {
		d.logf("%s: does not apply here, skipped", rec.name)
	}
}

// shrink looks for a shorter step list that breaks the same invariant the
// same way (delta debugging over the applied steps), each try in a fresh
// environment, and returns what it found for the failure message.
func shrink(t *testing.T, cfg config, trace []stepRec, v *violated) string {
	budget := 200
	if n, ok := envInt("MODEL_SHRINK_TRIES"); ok {
		budget = int(n)
	}
	want := v.class()
	tries := 0
	var best *driver
	var bestV *violated
	fails := func(cand []stepRec) bool {
		tries++
		c := cfg
		c.script = cand
		var d *driver
		var got *violated
		t.Run(fmt.Sprintf("shrink-%d", tries), func(t *testing.T) { d, got = run(t, c) })
		if got != nil && got.class() == want {
			best, bestV = d, got
			return true
		}
		return false
	}
	list := slices.Clone(trace)
	if !fails(list) {
		return "\n(the step list does not fail the same way when replayed; no shorter list)\n"
	}
	for n := 2; len(list) >= 2 && tries < budget; {
		chunk := (len(list) + n - 1) / n
		reduced := false
		for i := 0; i < len(list) && tries < budget; i += chunk {
			cand := slices.Concat(list[:i], list[min(len(list), i+chunk):])
			if fails(cand) {
				list, reduced = cand, true
				n = max(n-1, 2)
				break
			}
		}
		if !reduced {
			if n >= len(list) {
				break
			}
			n = min(2*n, len(list))
		}
	}
	return fmt.Sprintf("\n\nshortest step list found (%d steps, %d tries) that fails the same way:\n%s", len(list), tries, best.report(bestV))
}

// cleanup kills every client process and deletes every netns name, even
// after a failure; the work folder's own cleanup unmounts the pins.
func (d *driver) cleanup() {
	for _, c := range d.clients {
		if c.p != nil {
			c.p.stop()
		}
	}
	d.clients = nil
	for _, h := range d.holders {
		if _, err := os.Lstat(filepath.Join("/run/netns", h.netnsName)); err == nil {
			if r := host.RunCmd(host.CmdTimeout, nil, nil, "ip", "netns", "del", h.netnsName); r.Err != nil {
				d.t.Errorf("cleanup: %s", r)
			}
		}
	}
}

package model

// The model and the driver loop. Needs root: it makes network namespaces,
// bind mounts and processes in them, like the e2e suites.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/test/internal/hosttest"
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
	rtGone                    // DEL succeeded and the chain tore the netns down, or a reboot
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
	nsid      hosttest.NSID
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
	return cniCall{verb: verb, containerID: h.cid, netnsPath: h.netnsPath, podNS: h.podNS, podName: h.podName,
		podUID: h.podUID, claim: h.claim, prevIPs: h.ips}
}

// client is a Ceph client (or any process) that uses a holder's netns.
type client struct {
	id   int
	kind string // "proc", "rbd", "cephfs"
	h    *holder
	ip   string // rbd, cephfs: the address the monitors saw
	p    *proc
	dir  string // rbd, cephfs: the fixture directory
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
	rng     *rand.Rand
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

// violation reports a broken invariant: the seed, the steps and the
// plugin's log, then stops the test (unless MODEL_IGNORE names the
// invariant, for exploring what follows it).
func (d *driver) violation(inv, format string, args ...any) {
	d.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if d.ignore[inv] {
		d.found[inv]++
		d.logf("    VIOLATION %s (ignored): %s", inv, msg)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invariant %s violated at step %d (seed %d): %s\n\nsteps:\n", inv, d.step, d.seed, msg)
	for _, l := range d.log {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "\nreplay: SEED=%d MODEL_STEPS=%d go test -count=1 -run TestModel ./test/model/\n", d.seed, d.step)
	if data, err := os.ReadFile(d.e.logFile); err == nil {
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "\nlast lines of the plugin log:\n%s\n", strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	d.t.Fatal(b.String())
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
func (d *driver) holderByNetns(id hosttest.NSID) *holder {
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

// TestModel drives the real plugin through random steps and checks the
// invariants after each one. Needs root.
func TestModel(t *testing.T) {
	require.Zero(t, os.Geteuid(), "the model test needs root: network namespaces, mounts, nsenter")
	seed := uint64(*seedFlag)
	if seed == 0 {
		if n, ok := envInt("SEED"); ok {
			seed = uint64(n)
		} else {
			seed = uint64(time.Now().UnixNano() % 1e9)
		}
	}
	steps := *stepsFlag
	if steps == 0 {
		if n, ok := envInt("MODEL_STEPS"); ok {
			steps = int(n)
		} else {
			steps = defaultSteps
		}
	}
	ignore := map[string]bool{}
	for _, inv := range strings.Split(os.Getenv("MODEL_IGNORE"), ",") {
		if inv = strings.TrimSpace(inv); inv != "" {
			ignore[inv] = true
		}
	}
	binDir := t.TempDir()
	bin := buildPlugin(t, binDir)
	d := &driver{
		t: t, e: newEnv(t, bin), rng: rand.New(rand.NewPCG(seed, 0x6e65746e732d7069)), seed: seed,
		fps: failpoints(t), ignore: ignore,
		counts: map[string]int{}, found: map[string]int{}, stepRuns: map[string]int{},
	}
	d.table = stepTable
	if only := os.Getenv("MODEL_ONLY"); only != "" {
		// Exploration: a subset of the steps, to find short sequences.
		names := strings.Split(only, ",")
		d.table = slices.DeleteFunc(slices.Clone(stepTable), func(s stepDef) bool { return !slices.Contains(names, s.name) })
		require.NotEmpty(t, d.table, "MODEL_ONLY=%s names no step", only)
	}
	t.Cleanup(d.cleanup)
	t.Logf("seed %d, %d steps, failpoints %v", seed, steps, d.fps)

	start := time.Now()
	for d.step = 1; d.step <= steps; d.step++ {
		d.randomStep()
		d.checkAll()
		d.prune()
	}
	d.step = steps + 1
	d.logf("final drain")
	d.drainAll()
	d.checkAll()
	elapsed := time.Since(start)

	names := make([]string, 0, len(d.stepRuns))
	for n := range d.stepRuns {
		names = append(names, n)
	}
	sort.Strings(names)
	var runs []string
	for _, n := range names {
		runs = append(runs, fmt.Sprintf("%s=%d", n, d.stepRuns[n]))
	}
	t.Logf("seed %d: %d steps in %s (%.1f steps/s)", seed, steps, elapsed.Round(time.Millisecond), float64(steps)/elapsed.Seconds())
	t.Logf("steps run: %s", strings.Join(runs, " "))
	t.Logf("invariant checks: I1=%d I2=%d I3=%d I4=%d I5=%d", d.counts["I1"], d.counts["I2"], d.counts["I3"], d.counts["I4"], d.counts["I5"])
	if os.Getenv("MODEL_LOG") != "" {
		t.Logf("steps:\n%s", strings.Join(d.log, "\n"))
	}
	if len(d.found) > 0 {
		t.Errorf("violations of ignored invariants: %v\nsteps:\n%s", d.found, strings.Join(d.log, "\n"))
	}
}

// randomStep applies one step of the table, chosen by weight among those
// whose preconditions hold.
func (d *driver) randomStep() {
	total := 0
	for _, s := range d.table {
		total += s.weight
	}
	for range 1000 {
		n := d.rng.IntN(total)
		for _, s := range d.table {
			if n -= s.weight; n >= 0 {
				continue
			}
			d.repaired = false
			if s.run(d) {
				d.stepRuns[s.name]++
				return
			}
			break
		}
	}
	d.t.Fatalf("no step applicable at step %d (seed %d)", d.step, d.seed)
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
			if r := hosttest.RunCmd(hosttest.CmdTimeout, nil, nil, "ip", "netns", "del", h.netnsName); r.Err != nil {
				d.t.Errorf("cleanup: %s", r)
			}
		}
	}
}

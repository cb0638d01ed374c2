package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/netnsstore"
)

func uids(ps []Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.UID)
	}
	return out
}

func TestDecide(t *testing.T) {
	pinned := Pin{Attachment: "c1.net1", Cluster: "rook-ceph/a", PodNamespace: "rook-ceph", PodName: "h-1", PodUID: "u1", State: netnsstore.StateDraining}
	pods := []Pod{
		{Namespace: "rook-ceph", Name: "h-1", UID: "u1", Finalizer: true, Deleting: true},     // draining: keeps it
		{Namespace: "rook-ceph", Name: "h-2", UID: "u2", Finalizer: true, Deleting: true},     // released: lifted
		{Namespace: "rook-ceph", Name: "h-3", UID: "u3", Finalizer: true},                     // not deleted, no pin yet: kept
		{Namespace: "rook-ceph", Name: "h-4", UID: "u4"},                                      // pinned, no finalizer: added
		{Namespace: "rook-ceph", Name: "h-5", UID: "u5", Deleting: true},                      // pinned, deleting, none: unprotected
		{Namespace: "rook-ceph", Name: "other", UID: "u6", Deleting: true},                    // no finalizer, no pin: nothing
		{Namespace: "rook-ceph", Name: "h-7", UID: "u7-new", Finalizer: true, Deleting: true}, // a record without UID names it by name
	}
	pins := []Pin{pinned,
		{Attachment: "c4.net1", PodNamespace: "rook-ceph", PodName: "h-4", PodUID: "u4", State: netnsstore.StateActive},
		{Attachment: "c5.net1", PodNamespace: "rook-ceph", PodName: "h-5", PodUID: "u5", State: netnsstore.StateDraining},
		{Attachment: "c7.net1", PodNamespace: "rook-ceph", PodName: "h-7", State: netnsstore.StateDraining},
		{Attachment: "c8.net1", PodNamespace: "rook-ceph", PodName: "gone", PodUID: "u8", State: netnsstore.StateDraining},
	}
	plan := Decide(pods, View{Pins: pins})
	assert.Equal(t, []string{"u2"}, uids(plan.Lift), "only the pod that no record names")
	assert.Equal(t, []string{"u4"}, uids(plan.Add))
	var unprot []string
	for _, p := range plan.Unprotected {
		unprot = append(unprot, p.Attachment)
	}
	assert.Equal(t, []string{"c5.net1", "c8.net1"}, unprot, "being deleted without the finalizer, and gone from the API")
	assert.Empty(t, plan.Blocked)

	// A record that cannot be read may name any pod: nothing is lifted;
	// adding stays (the safe direction).
	plan = Decide(pods, View{Pins: pins, Unreadable: 1})
	assert.Empty(t, plan.Lift)
	assert.Equal(t, []string{"u4"}, uids(plan.Add))
	assert.NotEmpty(t, plan.Blocked)
	plan = Decide(pods, View{Err: os.ErrPermission})
	assert.Empty(t, plan.Lift, "a store that cannot be listed lifts nothing")

	// After the release, the draining pod's finalizer goes too.
	plan = Decide(pods, View{Pins: pins[1:]})
	assert.ElementsMatch(t, []string{"u1", "u2"}, uids(plan.Lift))
}

func TestTrackerOneEventPerState(t *testing.T) {
	tr := &Tracker{}
	pod := Pod{Namespace: "rook-ceph", Name: "h-1", UID: "u1", Finalizer: true}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pin := Pin{Attachment: "c1.net1", Cluster: "rook-ceph/a", PodNamespace: "rook-ceph", PodName: "h-1", PodUID: "u1",
		State: netnsstore.StateActive, Links: []string{"/p/rook-ceph/a.net"}, Updated: now}
	reasons := func(es []PodEvent) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Reason)
		}
		return out
	}
	es := tr.Observe([]Pod{pod}, View{Pins: []Pin{pin}}, now)
	require.Equal(t, []string{ReasonPinned}, reasons(es))
	assert.Contains(t, es[0].Message, "/p/rook-ceph/a.net")
	assert.Empty(t, tr.Observe([]Pod{pod}, View{Pins: []Pin{pin}}, now.Add(time.Second)), "no change, no Event")

	pin.State, pin.References, pin.DrainingSince, pin.Updated = netnsstore.StateDraining, []string{"process 42 (ceph-fuse)"}, now.Add(2*time.Second), now.Add(2*time.Second)
	es = tr.Observe([]Pod{pod}, View{Pins: []Pin{pin}}, now.Add(2*time.Second))
	require.Equal(t, []string{ReasonRefused}, reasons(es))
	assert.Contains(t, es[0].Message, "is still in use by process 42 (ceph-fuse)")
	assert.Contains(t, es[0].Message, "netns-pinctl inuse c1.net1")
	// Another refusal soon after: no Event; later: a repeat, counted.
	pin.Updated = now.Add(12 * time.Second)
	assert.Empty(t, tr.Observe([]Pod{pod}, View{Pins: []Pin{pin}}, now.Add(12*time.Second)))
	pin.Updated = now.Add(40 * time.Second)
	es = tr.Observe([]Pod{pod}, View{Pins: []Pin{pin}}, now.Add(40*time.Second))
	require.Len(t, es, 1)
	assert.True(t, es[0].Repeat)

	pin.Abandoned = true
	es = tr.Observe([]Pod{pod}, View{Pins: []Pin{pin}}, now.Add(41*time.Second))
	require.Equal(t, []string{ReasonAbandoned}, reasons(es))

	// A store that cannot be read says nothing of a release.
	assert.Empty(t, tr.Observe([]Pod{pod}, View{Unreadable: 1}, now.Add(50*time.Second)))
	es = tr.Observe([]Pod{pod}, View{}, now.Add(62*time.Second))
	require.Equal(t, []string{ReasonReleased}, reasons(es))
	assert.Contains(t, es[0].Message, "draining 1m")
	assert.Empty(t, tr.Observe([]Pod{pod}, View{}, now.Add(63*time.Second)))
}

// registerStore writes a registration of stateDir and pinDir (host
// paths) into the registry below hostRoot, as the plugin would.
func registerStore(t *testing.T, hostRoot, stateDir, pinDir string) {
	t.Helper()
	reg := filepath.Join(hostRoot, netnsstore.RegistryDir())
	require.NoError(t, os.MkdirAll(reg, 0o755))
	b, err := json.Marshal(netnsstore.Registration{StateDir: stateDir, PinDir: pinDir})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(reg, netnsstore.RegistrationName(stateDir)), b, 0o600))
}

// The stores as the agent reads them, lock-free and read-only, through
// the host root, and the metrics of them: a line of the events file that
// is not UTF-8 is skipped and counted.
func TestReadStoresAndMetrics(t *testing.T) {
	root := t.TempDir()
	a := &Agent{cfg: Config{HostRoot: root, Log: discardLog(), Metrics: NewMetrics()}, eventsRead: map[string]int64{}}

	// No registry: the wrong host root, or no sweeper ever ran. Nothing
	// is known: every lift is blocked.
	v, err := a.readStores()
	require.Error(t, err)
	assert.Contains(t, Decide(nil, v).Blocked, "cannot be found")

	dir := filepath.Join(root, "state")
	registerStore(t, root, "/state", "/p")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "records"), 0o700))
	rec := netnsstore.Record{Format: 2, Attachment: "c1.net1", Cluster: "rook-ceph/a", PodNS: "rook-ceph", PodName: "h-1", PodUID: "u1",
		PinDir: "/p", PinPath: "/p/pins/c1.net1", State: netnsstore.StateDraining, DrainingSince: time.Now().Add(-time.Minute)}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "records", "c1.net1.json"), b, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "records", ".tmp-c2.net1.json"), []byte("{"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "events"),
		[]byte("refusal del rook-ceph/a 1 0.002\nrefusal del \xff\xfe 1 -\nrelease del rook-ceph/a 2 -\n"), 0o600))

	v, err = a.readStores()
	require.NoError(t, err)
	require.Len(t, v.Pins, 1)
	assert.Equal(t, 1, v.Stores)
	assert.Equal(t, "u1", v.Pins[0].PodUID)
	assert.Equal(t, "/state", v.Pins[0].StateDir)
	m := a.cfg.Metrics
	m.storeSeen(v, false)
	assert.Equal(t, uint64(1), m.skipped)
	assert.Equal(t, uint64(1), m.stores["/state"].refusals["rook-ceph/a"])
	assert.Equal(t, uint64(2), m.stores["/state"].releases[[2]string{"rook-ceph/a", "del"}])
	assert.Equal(t, 1, m.pins[[2]string{"rook-ceph/a", "draining"}])
	assert.Empty(t, Decide(nil, v).Blocked)

	// A torn record blocks lifts.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "records", "c3.net1.json"), []byte(`{"format":2,"attach`), 0o600))
	v, err = a.readStores()
	require.NoError(t, err)
	assert.Equal(t, 1, v.Unreadable)
	assert.True(t, strings.Contains(Decide(nil, v).Blocked, "cannot be read"))
	require.NoError(t, os.Remove(filepath.Join(dir, "records", "c3.net1.json")))

	// A second store is read too: its pins name pods as the first's do.
	registerStore(t, root, "/other/state", "/other/pins")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "other", "state", "records"), 0o700))
	rec2 := rec
	rec2.Attachment, rec2.PodUID, rec2.PinDir = "c9.net1", "u9", "/other/pins"
	b, err = json.Marshal(rec2)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "other", "state", "records", "c9.net1.json"), b, 0o600))
	v, err = a.readStores()
	require.NoError(t, err)
	assert.Equal(t, 2, v.Stores)
	require.Len(t, v.Pins, 2)
	plan := Decide([]Pod{{Namespace: "ns", Name: "h-9", UID: "u9", Finalizer: true, Deleting: true}}, v)
	assert.Empty(t, plan.Lift, "a pod pinned in the second store keeps its finalizer")

	// A store whose stateDir is gone with its pinDir holds nothing, and so
	// does one whose pinDir is there without a pin (made before the
	// store's first use, as a hostPath volume makes it); one whose
	// stateDir is gone while a pin file is there blocks every lift.
	registerStore(t, root, "/gone/state", "/gone/pindir")
	v, err = a.readStores()
	require.NoError(t, err)
	assert.Empty(t, Decide(nil, v).Blocked)
	pins := filepath.Join(root, "gone", "pindir", netnsstore.PinsSubdir)
	require.NoError(t, os.MkdirAll(filepath.Dir(pins), 0o755))
	v, err = a.readStores()
	require.NoError(t, err, "a pinDir without a pins folder")
	require.NoError(t, os.MkdirAll(pins, 0o755))
	v, err = a.readStores()
	require.NoError(t, err, "an empty pins folder")
	assert.Empty(t, Decide(nil, v).Blocked)
	require.NoError(t, os.WriteFile(filepath.Join(pins, "c1.net1"), nil, 0o600))
	v, err = a.readStores()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has pins (c1.net1)")
	assert.Len(t, v.UnreadStores, 1)
	plan = Decide([]Pod{{Namespace: "ns", Name: "x", UID: "ux", Finalizer: true, Deleting: true}}, v)
	assert.Empty(t, plan.Lift)
	assert.Contains(t, plan.Blocked, "a registered store cannot be read")

	// A registration that cannot be read blocks every lift, as a record.
	require.NoError(t, os.RemoveAll(filepath.Join(root, "gone")))
	reg := filepath.Join(root, netnsstore.RegistryDir())
	require.NoError(t, os.WriteFile(filepath.Join(reg, netnsstore.RegistrationName("/torn")), []byte(`{"stateDir":`), 0o600))
	v, err = a.readStores()
	require.Error(t, err)
	plan = Decide([]Pod{{Namespace: "ns", Name: "x", UID: "ux", Finalizer: true, Deleting: true}}, v)
	assert.Empty(t, plan.Lift)
	assert.Contains(t, plan.Blocked, "a registered store cannot be read")
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

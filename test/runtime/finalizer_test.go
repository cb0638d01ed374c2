package runtime

// A holder's object stays in the API as long as its pin, when the runtime
// gives up on the teardown and only the sweeper can finish it: the node
// agent (agent_test.go) keeps the finalizer netns-pin.io/pin until no
// record names the pod. An IPAM that acts on pod objects cannot free the
// address earlier: whereabouts' stock controller, ip-control-loop, frees a
// pod's addresses the moment its object leaves the API, and its
// reconciler those of pods it cannot find (docs/operating.md, "The
// whereabouts hazard"). The two scenarios below run with whereabouts as
// the storage network's IPAM and its controller and reconciler live for
// the node (whereabouts_test.go), and assert the lease in whereabouts'
// IPPool: kept while the object is, also after the controller has seen
// the deletion and after a reconciler run, never given to a new pod, and
// freed once, by the sweeper's chain DEL, before the object goes.
// TestMultusThinWithoutRetryFinalizerKeepsRetries keeps host-local: the
// runtime's own retries free its lease there.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// abandonedRecord reports whether the record of sb is marked abandoned by
// the runtime.
func (sn *storageNet) abandonedRecord(t *testing.T, sb *sandbox) bool {
	t.Helper()
	b, err := os.ReadFile(sn.recordPath(sb))
	if os.IsNotExist(err) {
		return false
	}
	require.NoError(t, err)
	var r struct {
		Abandoned bool `json:"abandoned"`
	}
	require.NoError(t, json.Unmarshal(b, &r))
	return r.Abandoned
}

// wbScenario is what the two scenarios share: the storage network (IPAM
// whereabouts), its holders' cluster, whereabouts' controller for the
// node, and how the scenario runs a pod of the node on the network that is
// no holder, and tears its sandbox down.
type wbScenario struct {
	s       *suite
	sn      *storageNet
	cluster string
	ctrl    *wbController
	runPod  func(t *testing.T, name string) *sandbox
	stopPod func(t *testing.T, sb *sandbox)
}

// requireObjectStaysUntilRelease is the outcome both scenarios share, from
// the moment the runtime has given up on the holder sb (its netns path is
// gone, its teardown refused once while rbd device 1 or 0 uses the netns)
// and the kubelet has made its final delete of the object:
//
//   - the object stays, with its deletionTimestamp and the finalizer; the
//     pin, the address and whereabouts' lease (one allocation of the
//     sandbox's interface at its address) stay; the agent's Event
//     NetnsReleaseRefused names what uses the netns;
//   - whereabouts' controller has seen the deletion (it frees the lease of
//     a force-deleted pod that carries no finalizer, an Event
//     IPAddressGarbageCollected on that pod, after the holder's delete)
//     and frees nothing of the holder; a reconciler run frees nothing of
//     it either; a new pod on the network gets another address;
//   - the sweeper, started then, marks it abandoned (Event
//     NetnsTeardownAbandoned) and leaves it, with the lease, while the
//     client is there;
//   - once the client leaves (leave), the sweeper runs the chain's DEL and
//     releases the pin, the agent lifts the finalizer and the object goes:
//     by then the lease is freed, by whereabouts' CNI DEL of the sweeper's
//     chain; the controller, seeing the object leave, finds nothing to
//     free (no Event of it on the holder, no deallocation in its log):
//     the address was deallocated once in all; the other pods' leases are
//     as they were; Events NetnsPinned, NetnsReleaseRefused,
//     NetnsTeardownAbandoned and NetnsReleased are on it, one each.
func (w *wbScenario) requireObjectStaysUntilRelease(t *testing.T, sb *sandbox, leave func()) {
	t.Helper()
	s, sn, cluster := w.s, w.sn, w.cluster
	p := s.api.requireObject(t, sb)
	require.NotNil(t, p.DeletionTimestamp, "the object is being deleted")
	assert.Equal(t, []string{agent.Finalizer}, p.Finalizers)
	sn.requirePinned(t, sb, cluster, "draining")
	assert.Equal(t, []string{sb.storageIP}, hosttest.AddrsIn(t, sn.pinPath(sb), sn.ifname), "the pinned netns keeps its address")
	lease := sn.requireLease(t, sb)
	refused := s.api.waitEvent(t, sb, agent.ReasonRefused)
	assert.Equal(t, "Warning", refused.Type)
	assert.Contains(t, refused.Message, "is still in use by rbd", "the Event names what uses the netns")
	assert.Contains(t, refused.Message, "inuse "+sb.id+"."+sn.ifname, "the Event names the command that lists it")

	// whereabouts' controller has seen the holder's deletion, and frees
	// the lease of a pod whose object leaves the API: not the holder's.
	app := w.runPod(t, "app-"+host.RandHex(5))
	w.ctrl.requireControllerFrees(t, sn, app, func() { w.stopPod(t, app) })
	assert.Equal(t, lease, sn.leaseOf(t, sb), "whereabouts' controller saw the deletion and kept the lease of %s", sb)
	assert.Empty(t, s.api.controllerEvents(t, sb, ""), "no Event of whereabouts' controller on the holder")
	w.ctrl.waitReconcilerRun(t)
	assert.Equal(t, lease, sn.leaseOf(t, sb), "whereabouts' reconciler kept the lease of %s", sb)
	fresh := w.runPod(t, "app-"+host.RandHex(5))
	assert.NotEqual(t, sb.storageIP, fresh.storageIP, "a new pod on the network got the draining holder's address")
	sn.requireLease(t, fresh)

	s.startSweeper(t, sn)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool { return sn.abandonedRecord(t, sb) }),
		"the sweeper sees that the runtime abandoned %s", sb)
	abandoned := s.api.waitEvent(t, sb, agent.ReasonAbandoned)
	assert.Equal(t, "Warning", abandoned.Type)
	p = s.api.requireObject(t, sb)
	assert.Equal(t, []string{agent.Finalizer}, p.Finalizers, "the finalizer stays while the pin does")
	sn.requirePinned(t, sb, cluster, "draining")
	assert.Equal(t, lease, sn.leaseOf(t, sb), "whereabouts keeps the lease of %s while the client is there", sb)
	assert.Zero(t, sn.cniDeallocations(sb.storageIP), "whereabouts' CNI binary freed %s", sb.storageIP)

	others := sn.othersOf(t, sb)
	mark := w.ctrl.mark(t)
	leave()
	left := time.Now()
	var gone time.Duration
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		p, err := s.api.getPod(sb.ns, sb.name, sb.uid)
		require.NoError(t, err)
		gone = time.Since(left)
		return p == nil
	}), "the object of %s did not go after its release", sb)
	assert.Empty(t, sn.leaseOf(t, sb), "the sweeper's chain DEL gave %s back before the object went", sb.storageIP)
	t.Logf("the client left; %s later the object was gone", gone.Round(time.Millisecond))
	sn.requireUnpinned(t, sb)

	// The controller saw the object leave and found nothing to free.
	ref := sb.ns + "/" + sb.name
	for _, l := range w.ctrl.waitDeleteHandled(t, sb, mark) {
		assert.False(t, strings.Contains(l, "stale allocation to cleanup") && strings.Contains(l, ref), "whereabouts' controller freed an allocation of %s: %s", sb, l)
		assert.NotContains(t, l, "re-queuing IP address reconciliation request for pod "+ref)
	}
	assert.Empty(t, s.api.controllerEvents(t, sb, ""), "no Event of whereabouts' controller on the holder")
	assert.Zero(t, countLines(w.ctrl.log, "Deallocating given previously used IP: "+sb.storageIP), "whereabouts' controller deallocated %s", sb.storageIP)
	assert.Equal(t, 1, sn.cniDeallocations(sb.storageIP), "whereabouts deallocated %s once", sb.storageIP)
	assert.Equal(t, others, sn.othersOf(t, sb), "the other pods' leases are as they were")
	w.stopPod(t, fresh)

	s.api.waitEvent(t, sb, agent.ReasonReleased)
	objects, posts := s.api.eventsByReason(t, sb)
	t.Logf("Events on %s: %v (posts %v)", sb, objects, posts)
	for _, r := range []string{agent.ReasonPinned, agent.ReasonRefused, agent.ReasonAbandoned, agent.ReasonReleased} {
		assert.Equal(t, 1, objects[r], "one %s Event", r)
	}
	assert.Zero(t, objects[agent.ReasonLifted], "the agent saw the release: no NetnsPinFinalizerLifted")
	assert.Len(t, objects, 4, "no other Event of the agent on the holder")
}

// Scenario: a holder rollout under Multus thick (multus-shim answers every
// DEL with success) while a Ceph client uses the old holder's netns, the
// IPAM whereabouts with its controller and reconciler. The DaemonSet
// controller deletes the old pod and creates its replacement, which takes
// the link over on another address; the kubelet stops the old sandbox (the
// shim reports success, the runtime drops its netns, nothing will DEL it
// again) and makes its final delete. The old object stays in the API, and
// its lease in whereabouts' pool, until the sweeper's release, then goes;
// the replacement is untouched. (The test's name is short: the daemon's
// socket is under its folder and must fit in sun_path.)
func TestThickMultusRolloutKeepsObject(t *testing.T) {
	s := requireRuntime(t, containerd) // multus-daemon runs in a container of containerd
	const cluster = "rook-ceph/thick-f"
	cache := filepath.Join(s.testDir(t), "multus-cache")
	sn := s.newStorageNet(t, netSpec{
		holders:   []map[string]any{{"podNamespace": nadNamespace, "podName": "csi-holder-*", "cluster": cluster}},
		cacheDirs: []string{cache}, whereabouts: true,
	})
	link := sn.link(t, cluster)
	node := "rt-thick-" + host.RandHex(4)
	multus := s.startThickMultusOn(t, node, sn.pinDir, cache)
	s.startAgent(t, sn, node)
	w := &wbScenario{s: s, sn: sn, cluster: cluster, ctrl: s.startWhereaboutsController(t, s.requireWhereabouts(t), node),
		runPod: func(t *testing.T, name string) *sandbox {
			return s.runHolder(t, podObject{ns: nadNamespace, name: name, node: node, annotations: sn.selection("")})
		},
		stopPod: func(t *testing.T, sb *sandbox) {
			require.NoError(t, sb.stop().Err, "crictl stopp %s", sb)
			require.NoError(t, sb.remove().Err, "crictl rmp %s", sb)
		},
	}

	old := s.runHolder(t, holderObject(nadNamespace, "csi-holder-f-"+host.RandHex(5), node, sn.selection("")))
	sn.requirePinned(t, old, cluster, "active")
	pinned := s.api.waitEvent(t, old, agent.ReasonPinned)
	assert.Contains(t, pinned.Message, cluster)
	requireNetworkStatus(t, s, old, sn) // what whereabouts' controller reads
	sn.requireLease(t, old)
	sn.rbdDevice(t, 1, old.storageIP)

	// The rollout: the DaemonSet controller deletes the old pod (graceful:
	// the object stays until the kubelet's final delete) and creates the
	// replacement at once.
	start := time.Now()
	s.api.deletePod(old.ns, old.name)
	require.NotNil(t, s.api.requireObject(t, old).DeletionTimestamp)
	next := s.runHolder(t, holderObject(nadNamespace, "csi-holder-f-"+host.RandHex(5), node, sn.selection("")))
	sn.requirePinned(t, next, cluster, "active")
	sn.requireLinkTo(t, link, next)
	assert.NotEqual(t, old.storageIP, next.storageIP, "the replacement got another address")
	nextLease := sn.requireLease(t, next)

	// The kubelet stops the old sandbox: the daemon's netns-pin refuses,
	// the shim reports success, containerd drops its netns; then the
	// sandbox is removed and the object deleted with grace period 0.
	require.NoError(t, old.stop().Err, "crictl stopp: multus-shim reports success")
	_, err := os.Lstat(old.netnsPath)
	require.True(t, os.IsNotExist(err), "containerd removed its netns (err %v)", err)
	require.NoError(t, old.remove().Err)
	require.NoError(t, s.api.finalDelete(old.ns, old.name))

	w.requireObjectStaysUntilRelease(t, old, func() { sn.removeRBDDevice(t, 1) })
	t.Logf("rollout to release: %s", time.Since(start).Round(time.Millisecond))
	requireContainerPin(t, multus.hostContainer, "/hostroot"+sn.pinPath(old), old, false)

	// The replacement is untouched: pinned, its link, its lease, its
	// object with the finalizer and not being deleted.
	sn.requirePinned(t, next, cluster, "active")
	sn.requireLinkTo(t, link, next)
	assert.Equal(t, nextLease, sn.leaseOf(t, next), "the replacement keeps its lease")
	p := s.api.requireObject(t, next)
	assert.Nil(t, p.DeletionTimestamp)
	assert.Equal(t, []string{agent.Finalizer}, p.Finalizers)
}

// crioOneDEL replays what CRI-O 1.32.8+/1.33.4+/1.34+ does with a pod's
// network (cri-o PR #9372, server/sandbox_network.go; measured with the real
// v1.34.11, docs/operating.md, "When the runtime gives up"): ocicni runs
// the node's CNI configuration, here Multus' thin plugin (a single
// configuration file, which ocicni loads as a list of one), through
// libcni, its result cache in /var/lib/cni, with the CNI_ARGS CRI-O
// passes; Multus runs the pod's networks, the storage network's chain
// among them.
type crioOneDEL struct {
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
}

func newCRIOOneDEL(t *testing.T, s *suite, sn *storageNet, sb *sandbox) *crioOneDEL {
	t.Helper()
	// the plugins' stderr (Multus' and whereabouts' logs) goes where
	// CRI-O's would, to a log file
	stderr, err := os.OpenFile(filepath.Join(sn.dir, "crio-cni.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() {
		stderr.Close()
		if t.Failed() {
			b, _ := os.ReadFile(stderr.Name())
			t.Logf("the plugins' stderr (tail):\n%s", host.Tail(string(b), 40))
		}
	})
	mc := s.multusConfig()
	b, err := json.Marshal(map[string]any{"cniVersion": mc["cniVersion"], "name": mc["name"], "plugins": []any{mc}})
	require.NoError(t, err)
	list, err := libcni.ConfListFromBytes(b)
	require.NoError(t, err)
	return &crioOneDEL{
		cni:  libcni.NewCNIConfigWithCacheDir([]string{s.cniBin}, libcni.CacheDir, &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: stderr}, PluginDecoder: version.PluginDecoder{}}),
		list: list,
		rt: &libcni.RuntimeConf{ContainerID: sb.id, NetNS: sb.netnsPath, IfName: "eth0", Args: [][2]string{
			{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", sb.ns}, {"K8S_POD_NAME", sb.name},
			{"K8S_POD_INFRA_CONTAINER_ID", sb.id}, {"K8S_POD_UID", sb.uid},
		}},
	}
}

func (c *crioOneDEL) resultFile() string {
	return filepath.Join(libcni.CacheDir, "results", fmt.Sprintf("%s-%s-%s", c.list.Name, c.rt.ContainerID, c.rt.IfName))
}

// crioPod is a pod of node on the storage network whose sandbox CRI-O's
// replay starts: its object, a netns, ADD, then CHECK right after it.
func (s *suite) crioPod(t *testing.T, sn *storageNet, obj podObject) (*sandbox, *crioOneDEL, *hosttest.NetnsHandle) {
	t.Helper()
	t.Cleanup(func() { s.api.forgetPod(obj.ns, obj.name) })
	uid, err := s.api.createPodObject(obj)
	require.NoError(t, err)
	netns := hosttest.NewNetns(t, "nprtcrio")
	sb := &sandbox{s: s, ns: obj.ns, name: obj.name, uid: uid, id: host.RandHex(32), netnsPath: netns.Path, netnsID: netns.ID, ifname: storageIfName}
	crio := newCRIOOneDEL(t, s, sn, sb)
	t.Cleanup(func() { _ = os.Remove(crio.resultFile()) })
	ctx := context.Background()
	_, err = crio.cni.AddNetworkList(ctx, crio.list, crio.rt)
	require.NoError(t, err, "ADD of %s", sb)
	require.NoError(t, crio.cni.CheckNetworkList(ctx, crio.list, crio.rt), "CHECK right after ADD of %s", sb)
	addrs := hosttest.AddrsIn(t, sb.netnsPath, sb.ifname)
	require.Len(t, addrs, 1, "%s: addresses of %s", sb, sb.ifname)
	sb.storageIP = addrs[0]
	requireNetworkStatus(t, s, sb, sn) // what whereabouts' controller reads
	return sb, crio, netns
}

// Scenario: CRI-O's one DEL (1.32.8+, 1.33.4+, 1.34+), replayed step by
// step as the real v1.34.11 was measured to act, with Multus thin as the
// node's network and the storage network's IPAM whereabouts with its
// controller and reconciler; the holder's object in the API server and
// the node agent watching it (no sandbox of the suite's runtime: its
// links, CNI bin folder and API server only):
//
//  1. RunPodSandbox: ADD, then CHECK right after it (Multus answers CHECK
//     with its default network's: netns-pin sees ADD only).
//  2. The pod is deleted; the kubelet's first StopPodSandbox: one DEL,
//     refused; CRI-O deletes the result file, and its netns file stays
//     mounted (EBUSY).
//  3. The kubelet's second StopPodSandbox: no DEL; the netns file is
//     unmounted and removed; RemovePodSandbox: no CNI call; the kubelet's
//     final delete of the object.
//
// The object stays, and its lease in whereabouts' pool, until the
// sweeper's release, then goes.
func TestCRIOOneDELKeepsObject(t *testing.T) {
	s := requireRuntime(t, containerd)
	const cluster = "rook-ceph/crio-f"
	sn := s.newStorageNet(t, netSpec{
		holders:   []map[string]any{{"podNamespace": nadNamespace, "podName": "csi-holder-*", "cluster": cluster}},
		cacheDirs: []string{filepath.Join(s.dir, "multus-cache")}, whereabouts: true,
	})
	link := sn.link(t, cluster)
	node := "rt-crio-" + host.RandHex(4)
	s.startAgent(t, sn, node)
	ctx := context.Background()
	w := &wbScenario{s: s, sn: sn, cluster: cluster, ctrl: s.startWhereaboutsController(t, s.requireWhereabouts(t), node)}
	pods := map[*sandbox]*crioOneDEL{}
	w.runPod = func(t *testing.T, name string) *sandbox {
		sb, crio, _ := s.crioPod(t, sn, podObject{ns: nadNamespace, name: name, node: node, annotations: sn.selection("")})
		pods[sb] = crio
		return sb
	}
	w.stopPod = func(t *testing.T, sb *sandbox) {
		require.NoError(t, pods[sb].cni.DelNetworkList(ctx, pods[sb].list, pods[sb].rt), "DEL of %s", sb)
	}

	// 1. ADD, CHECK.
	sb, crio, netns := s.crioPod(t, sn, holderObject(nadNamespace, "csi-holder-c-"+host.RandHex(5), node, sn.selection("")))
	sn.requirePinned(t, sb, cluster, "active")
	sn.requireLinkTo(t, link, sb)
	s.api.waitEvent(t, sb, agent.ReasonPinned)
	sn.requireLease(t, sb)
	sn.rbdDevice(t, 0, sb.storageIP)

	// 2. The pod is deleted; the first stop: one DEL, refused (Multus
	// passes netns-pin's error on); the result file goes, the netns file
	// stays.
	s.api.deletePod(sb.ns, sb.name)
	err := crio.cni.DelNetworkList(ctx, crio.list, crio.rt)
	require.Error(t, err, "the one DEL CRI-O sends is refused")
	var ce *types.Error
	require.True(t, errors.As(err, &ce), "a CNI error: %v", err)
	assert.Contains(t, ce.Msg+ce.Details, "netns-pin: cluster "+cluster+": holder pod "+sb.ns+"/"+sb.name+" is still in use by")
	require.NoError(t, os.Remove(crio.resultFile()))
	require.True(t, netns.Exists(), "the runtime's netns file stays mounted after the first stop")

	// 3. The second stop: no DEL; the netns file goes. The final delete.
	netns.Delete(t)
	require.NoError(t, s.api.finalDelete(sb.ns, sb.name))

	w.requireObjectStaysUntilRelease(t, sb, func() { sn.removeRBDDevice(t, 0) })
	requireNoLink(t, link)
	assert.Equal(t, []string{"ADD", "DEL"}, s.callsOf(sb.id, sb.ifname), "netns-pin ran for ADD and the one DEL only")
}

// Scenario: Multus thin without "retryDeleteOnError" and a force-deleted
// holder. Multus deletes its cache of the pod's delegates after the
// refused DEL; without the finalizer the object would be gone by the
// runtime's retry, and Multus would answer it with success calling no
// delegate (abandoned_test.go). With it the object stays, Multus rebuilds
// the delegates from it at the retry and DELs them again: the runtime's
// retries keep reaching netns-pin, and the one once the client left
// releases and frees the lease; then the object goes. No sweeper runs.
func TestMultusThinWithoutRetryFinalizerKeepsRetries(t *testing.T) {
	s := requireRuntime(t, containerd)
	s.setRetryDeleteOnError(t, false)
	const cluster = "rook-ceph/thin-f"
	sn := s.newStorageNet(t, netSpec{
		holders:   []map[string]any{{"podNamespace": nadNamespace, "podName": "csi-holder-*", "cluster": cluster}},
		cacheDirs: []string{filepath.Join(s.dir, "multus-cache")},
	})
	node := "rt-thin-" + host.RandHex(4)
	s.startAgent(t, sn, node)
	h := s.runHolder(t, holderObject(nadNamespace, "csi-holder-r-"+host.RandHex(5), node, sn.selection("")))
	sn.requirePinned(t, h, cluster, "active")
	s.api.waitEvent(t, h, agent.ReasonPinned)
	sn.rbdDevice(t, 0, h.storageIP)

	require.NoError(t, s.api.finalDelete(h.ns, h.name), "kubectl delete --force --grace-period=0")
	for i := 1; i <= 2; i++ {
		r := h.stop()
		require.Error(t, r.Err, "stop %d is refused while rbd0 uses the netns:\n%s", i, r)
		assert.Contains(t, runtimeError(r), "is still in use by rbd0")
	}
	assert.Equal(t, []string{"ADD", "DEL", "DEL"}, s.callsOf(h.id, storageIfName), "Multus rebuilt the delegates from the object at the retry")
	sn.requirePinned(t, h, cluster, "draining")
	assert.False(t, sn.abandonedRecord(t, h), "the runtime still holds its netns")
	p := s.api.requireObject(t, h)
	require.NotNil(t, p.DeletionTimestamp)
	assert.Equal(t, []string{agent.Finalizer}, p.Finalizers)
	assert.True(t, sn.hostLocalHas(h.storageIP))
	s.api.waitEvent(t, h, agent.ReasonRefused)

	sn.removeRBDDevice(t, 0)
	r := h.stop()
	require.NoError(t, r.Err, "the retry once rbd0 is gone releases:\n%s", r)
	sn.requireUnpinned(t, h)
	assert.False(t, sn.hostLocalHas(h.storageIP), "the runtime's DEL through Multus gave %s back", h.storageIP)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		p, err := s.api.getPod(h.ns, h.name, h.uid)
		require.NoError(t, err)
		return p == nil
	}), "the object of %s did not go after its release", h)
	s.api.waitEvent(t, h, agent.ReasonReleased)
	objects, _ := s.api.eventsByReason(t, h)
	assert.Equal(t, map[string]int{agent.ReasonPinned: 1, agent.ReasonRefused: 1, agent.ReasonReleased: 1}, objects)
	require.NoError(t, h.remove().Err)
}

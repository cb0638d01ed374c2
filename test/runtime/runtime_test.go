package runtime

// The scenarios of the runtime end to end suite: crictl -> containerd or CRI-O ->
// Multus (thin) -> [macvlan + host-local, netns-pin].

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A holder named by a `holders` rule (pod namespace + name glob, which
// the runtime passes as K8S_POD_NAMESPACE / K8S_POD_NAME) is pinned when its
// sandbox starts; the cluster's link leads to the sandbox's own netns. A pod
// on the same network that no rule names passes through untouched.
func TestHolderByRulePinnedOnRunp(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		const cluster = "rook-ceph/cluster-a"
		sn := s.newStorageNet(t, netSpec{holders: []map[string]any{
			{"podNamespace": "rook-ceph", "podName": "csi-holder-*", "cluster": cluster},
		}})
		link := sn.link(t, cluster)

		holder := s.mustRunPod(t, "rook-ceph", "csi-holder-a-"+host.RandHex(5), sn.selection(""))
		r := sn.requirePinned(t, holder, cluster, "active")
		assert.Equal(t, []string{link}, r.Links)
		sn.requireLinkTo(t, link, holder)
		// the link is the same netns object as the sandbox's netns path that
		// the runtime reports (crictl inspectp)
		assert.Equal(t, hosttest.StatNS(t, holder.netnsPath), hosttest.StatNS(t, link))
		requireNetworkStatus(t, s, holder, sn)
		assert.Contains(t, linksIn(t, holder.netnsPath), "eth0", "default network (bridge)")

		// Not a holder: same network, no rule matches, no claim.
		app := s.mustRunPod(t, "rook-ceph", "app-"+host.RandHex(5), sn.selection(""))
		assert.Nil(t, sn.readRecord(t, app), "a pod no rule names must not be pinned")
		_, err := os.Lstat(sn.pinPath(app))
		assert.True(t, os.IsNotExist(err), "no pin for a pod that is no holder")
		sn.requireLinkTo(t, link, holder)
		require.NoError(t, app.stop().Err)
		require.NoError(t, app.remove().Err)

		// Nothing uses the holder: it stops and goes like any pod.
		res := holder.stop()
		require.NoError(t, res.Err, "crictl stopp of an unused holder:\n%s", res)
		sn.requireUnpinned(t, holder)
		requireNoLink(t, link)
		assert.False(t, sn.hostLocalHas(holder.storageIP), "host-local released %s", holder.storageIP)
		res = holder.remove()
		require.NoError(t, res.Err, "crictl rmp:\n%s", res)
		assert.Empty(t, holder.podState(t))
	})
}

// A holder claims its cluster through the pod's network-selection
// annotation: Multus reads the pod and the NetworkAttachmentDefinition from
// the kube API and puts the element's cni-args into netns-pin's args.cni.
// The same claim from a namespace outside cniArgsNamespaces fails the
// sandbox with netns-pin's error.
func TestHolderByCNIArgsAnnotation(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		const cluster = "rook-ceph/cluster-b"
		sn := s.newStorageNet(t, netSpec{cniArgsNamespaces: []string{"rook-ceph"}})
		link := sn.link(t, cluster)

		holder := s.mustRunPod(t, "rook-ceph", "csi-holder-b-"+host.RandHex(5), sn.selection(cluster))
		sn.requirePinned(t, holder, cluster, "active")
		sn.requireLinkTo(t, link, holder)
		assert.Equal(t, hosttest.StatNS(t, holder.netnsPath), hosttest.StatNS(t, link))
		requireNetworkStatus(t, s, holder, sn)

		// A pod of another namespace makes the same claim.
		intruder, res := s.runPod(t, "tenant", "evil-"+host.RandHex(5), sn.selection(cluster))
		require.Error(t, res.Err, "a claim from a namespace outside cniArgsNamespaces must fail the sandbox:\n%s", res)
		assert.Empty(t, intruder.id)
		msg := runtimeError(res)
		t.Logf("crictl runp error: %s", msg)
		assert.Contains(t, msg, `netns-pin: pod tenant/`+intruder.name+`: args.cni.pinCluster "`+cluster+`": claim refused`, "crictl runp error")
		assert.Contains(t, msg, `namespace "tenant" is not in cniArgsNamespaces`, "crictl runp error")
		// nothing of the intruder is pinned; the holder keeps the link
		entries, err := os.ReadDir(filepath.Join(sn.stateDir, "records"))
		require.NoError(t, err)
		assert.Len(t, entries, 1, "only the holder's record")
		sn.requireLinkTo(t, link, holder)
		r := s.crictlRun("pods", "--namespace", "tenant", "--name", intruder.name, "-q")
		require.NoError(t, r.Err)
		assert.Empty(t, strings.TrimSpace(r.Stdout), "the runtime removed the failed sandbox")

		res = holder.stop()
		require.NoError(t, res.Err, "crictl stopp:\n%s", res)
		sn.requireUnpinned(t, holder)
		requireNoLink(t, link)
		require.NoError(t, holder.remove().Err)
	})
}

// While an rbd device mapped from the holder's address exists, `crictl
// stopp` fails with netns-pin's "try again later" naming the cluster, and
// the sandbox's netns keeps the storage interface and its address (the
// chain stopped at netns-pin, so macvlan and host-local never ran). Once
// the device is gone, stopp and rmp succeed and the pin is gone.
func TestStopRefusedWhileReferenced(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		const cluster = "rook-ceph/cluster-c"
		sn := s.newStorageNet(t, netSpec{holders: []map[string]any{
			{"podNamespace": "rook-ceph", "podName": "csi-holder-c-*", "cluster": cluster},
		}})
		link := sn.link(t, cluster)
		holder := s.mustRunPod(t, "rook-ceph", "csi-holder-c-"+host.RandHex(5), sn.selection(""))
		sn.requirePinned(t, holder, cluster, "active")
		sn.rbdDevice(t, 0, holder.storageIP)

		res := holder.stop()
		require.Error(t, res.Err, "crictl stopp must fail while rbd0 uses the holder's netns:\n%s", res)
		t.Logf("crictl stopp error: %s", runtimeError(res))
		assert.Contains(t, runtimeError(res), "netns-pin: cluster "+cluster+": holder pod rook-ceph/"+holder.name+" is still in use by", "crictl stopp error")
		assert.Contains(t, runtimeError(res), "csi-vol-0000", "the error names the rbd image")
		assert.Regexp(t, `\(see: netns-pinctl .*--state-dir `+regexp.QuoteMeta(sn.stateDir)+` .*inuse `+regexp.QuoteMeta(holder.id+"."+storageIfName)+`\)`,
			runtimeError(res), "the error says how to see every reference")

		// The sandbox is refused but its network stays: the runtime keeps the
		// netns, and the storage interface keeps its address and host-local
		// lease.
		assert.Equal(t, stateAfterRefusedStop[s.runtime], holder.podState(t))
		assert.Equal(t, holder.netnsID, hosttest.StatNS(t, holder.netnsPath))
		assert.Equal(t, []string{holder.storageIP}, hosttest.AddrsIn(t, holder.netnsPath, storageIfName), "net1 keeps its address")
		assert.True(t, sn.hostLocalHas(holder.storageIP), "host-local keeps the lease of %s", holder.storageIP)
		t.Logf("interfaces left in the refused sandbox's netns: %v (Multus ran every delegate's DEL)", linksIn(t, holder.netnsPath))
		sn.requirePinned(t, holder, cluster, "draining")
		sn.requireLinkTo(t, link, holder) // the cluster's only pin, draining

		// The plugin's own answer to that DEL is CNI error 11.
		ce, r := sn.pinDEL(t, holder, "")
		require.Error(t, r.Err, "netns-pin DEL:\n%s", r)
		assert.Equal(t, 11, ce.Code, "CNI error code (try again later)")
		assert.Contains(t, runtimeError(res), ce.Msg, "the runtime passes netns-pin's message on")
		assert.Contains(t, ce.Details, "csi-vol-0000")

		// `netns-pinctl inuse <cluster>` shows the same reference to the operator.
		nad := filepath.Join(sn.dir, "nad.json")
		nadJSON, err := s.api.nadJSON(nadNamespace, sn.name)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(nad, nadJSON, 0o644))
		r = host.RunCmd(cmdTimeout, nil, nil, s.ctl, "--conf", nad, "inuse", cluster)
		require.NoError(t, r.Err, "netns-pinctl inuse:\n%s", r)
		assert.Contains(t, r.Stdout, "csi-vol-0000")
		assert.Contains(t, r.Stdout, holder.storageIP)
		t.Logf("netns-pinctl inuse %s:\n%s", cluster, r.Stdout)
		r = host.RunCmd(cmdTimeout, nil, nil, s.ctl, "--conf", nad, "list")
		require.NoError(t, r.Err, "netns-pinctl list:\n%s", r)
		assert.Contains(t, r.Stdout, holder.id+"."+storageIfName)
		assert.Contains(t, r.Stdout, "draining")
		t.Logf("netns-pinctl list:\n%s", r.Stdout)

		// A retry while still referenced fails the same way.
		res = holder.stop()
		require.Error(t, res.Err, "second crictl stopp:\n%s", res)
		assert.Contains(t, runtimeError(res), "netns-pin: cluster "+cluster)

		// The device is unmapped: the retry goes through.
		sn.removeRBDDevice(t, 0)
		res = holder.stop()
		require.NoError(t, res.Err, "crictl stopp after the rbd device is gone:\n%s", res)
		sn.requireUnpinned(t, holder)
		requireNoLink(t, link)
		assert.False(t, sn.hostLocalHas(holder.storageIP), "host-local released %s", holder.storageIP)
		_, err = os.Lstat(holder.netnsPath)
		assert.True(t, os.IsNotExist(err), "the runtime removed the netns %s (err %v)", holder.netnsPath, err)
		res = holder.remove()
		require.NoError(t, res.Err, "crictl rmp:\n%s", res)
		assert.Empty(t, holder.podState(t))
	})
}

// A holder restart or rollout (maxSurge 1): a second holder of the same
// cluster takes over the link for new volumes while the first, still
// referenced, stays pinned and refuses to stop until its last client goes.
func TestHolderRestartTakesOverLink(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		const cluster = "rook-ceph/cluster-d"
		sn := s.newStorageNet(t, netSpec{cniArgsNamespaces: []string{"rook-ceph"}})
		link := sn.link(t, cluster)

		old := s.mustRunPod(t, "rook-ceph", "csi-holder-d-"+host.RandHex(5), sn.selection(cluster))
		sn.requirePinned(t, old, cluster, "active")
		sn.requireLinkTo(t, link, old)
		sn.rbdDevice(t, 3, old.storageIP) // a volume mapped through the old holder

		// The DaemonSet's surge pod comes up.
		next := s.mustRunPod(t, "rook-ceph", "csi-holder-d-"+host.RandHex(5), sn.selection(cluster))
		sn.requirePinned(t, next, cluster, "active")
		sn.requireLinkTo(t, link, next)
		sn.requirePinned(t, old, cluster, "active")
		assert.Equal(t, old.netnsID, hosttest.StatNS(t, sn.pinPath(old)), "the old pin still holds the old netns")
		assert.NotEqual(t, old.netnsID, next.netnsID)

		// The old holder is deleted: refused, it keeps its network and pin.
		res := old.stop()
		require.Error(t, res.Err, "crictl stopp of the referenced old holder:\n%s", res)
		assert.Contains(t, runtimeError(res), "netns-pin: cluster "+cluster+": holder pod rook-ceph/"+old.name+" is still in use by")
		sn.requirePinned(t, old, cluster, "draining")
		assert.Equal(t, []string{old.storageIP}, hosttest.AddrsIn(t, old.netnsPath, storageIfName))
		sn.requireLinkTo(t, link, next) // new volumes go to the new holder

		// The last volume of the old holder is unmapped: it goes, the link stays.
		sn.removeRBDDevice(t, 3)
		res = old.stop()
		require.NoError(t, res.Err, "crictl stopp of the old holder once unused:\n%s", res)
		require.NoError(t, old.remove().Err)
		sn.requireUnpinned(t, old)
		sn.requireLinkTo(t, link, next)
		sn.requirePinned(t, next, cluster, "active")

		res = next.stop()
		require.NoError(t, res.Err, "crictl stopp:\n%s", res)
		require.NoError(t, next.remove().Err)
		sn.requireUnpinned(t, next)
		requireNoLink(t, link)
	})
}

// requireNetworkStatus checks that Multus read the pod and the
// NetworkAttachmentDefinition from the API server and wrote the pod's
// network-status back: the storage interface with the sandbox's address.
func requireNetworkStatus(t *testing.T, s *suite, sb *sandbox, sn *storageNet) {
	t.Helper()
	st, err := s.api.networkStatus(sb.ns, sb.name)
	require.NoError(t, err)
	var found bool
	for _, n := range st {
		if n.Interface == storageIfName {
			found = true
			assert.Equal(t, nadNamespace+"/"+sn.name, n.Name)
			assert.Equal(t, []string{sb.storageIP}, n.IPs)
		}
	}
	assert.True(t, found, "network-status of %s has no %s: %+v", sb, storageIfName, st)
}

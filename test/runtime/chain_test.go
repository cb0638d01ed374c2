package runtime

// netns-pin in the runtime's own CNI configuration, without Multus: the
// runtime runs the chain [bridge + host-local, netns-pin] itself, so every
// CNI command it sends reaches netns-pin. (Multus thin answers CHECK with
// the CHECK of its default network only, pkg/multus/multus.go CmdCheck: a
// network of a NetworkAttachmentDefinition never sees one.)

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// wantAfterAdd is what each runtime sends netns-pin for a sandbox it
// starts: CRI-O calls CHECK right after ADD and fails the sandbox when
// CHECK fails (server/sandbox_network.go networkStart calls ocicni's
// GetPodNetworkStatus right after SetUpPod, and that runs CNI CHECK);
// containerd does not call CHECK.
var wantAfterAdd = map[string][]string{containerd: {"ADD"}, crio: {"ADD", "CHECK"}}

// stateAfterRefusedStop is the sandbox's CRI state after a stop whose DEL
// was refused: containerd stops the sandbox's containers first and keeps
// the netns; CRI-O runs the CNI DEL before it stops the infra container,
// and returns at its error with the sandbox still ready.
var stateAfterRefusedStop = map[string]string{containerd: "SANDBOX_NOTREADY", crio: "SANDBOX_READY"}

// CHECK after ADD passes for a holder (its pin is a mount of its netns) and
// for a non-holder (it passes through); a stop refused while an rbd device
// uses the holder's address keeps eth0 and its address and the host-local
// lease; the runtime retries DEL at every stop (containerd, and the CRI-O
// the module proxy serves), and the retry after the device is gone
// releases the pin and the chain frees the address.
func TestChainInRuntimeConfig(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		const cluster = "rook-ceph/cluster-e"
		sn := s.newStorageNet(t, netSpec{inRuntimeConf: true, holders: []map[string]any{
			{"podNamespace": "rook-ceph", "podName": "csi-holder-e-*", "cluster": cluster},
		}})
		link := sn.link(t, cluster)

		holder, res := s.runPodIf(t, "rook-ceph", "csi-holder-e-"+host.RandHex(5), nil, sn.ifname)
		require.NoError(t, res.Err, "crictl runp of a holder:\n%s", res)
		sn.requirePinned(t, holder, cluster, "active")
		sn.requireLinkTo(t, link, holder)
		assert.Equal(t, wantAfterAdd[s.runtime], s.callsOf(holder.id, sn.ifname), "what %s ran netns-pin for", s.runtime)

		app, res := s.runPodIf(t, "rook-ceph", "app-"+host.RandHex(5), nil, sn.ifname)
		require.NoError(t, res.Err, "crictl runp of a pod that is no holder:\n%s", res)
		assert.Nil(t, sn.readRecord(t, app), "a pod no rule names must not be pinned")
		assert.Equal(t, wantAfterAdd[s.runtime], s.callsOf(app.id, sn.ifname), "what %s ran netns-pin for", s.runtime)
		require.NoError(t, app.stop().Err)
		require.NoError(t, app.remove().Err)

		sn.rbdDevice(t, 0, holder.storageIP)
		dels := func() int {
			return len(slices.DeleteFunc(s.callsOf(holder.id, sn.ifname), func(c string) bool { return c != "DEL" }))
		}
		for i := 1; i <= 2; i++ {
			res = holder.stop()
			require.Error(t, res.Err, "crictl stopp %d must fail while rbd0 uses the holder's netns:\n%s", i, res)
			assert.Contains(t, runtimeError(res), "netns-pin: cluster "+cluster+": holder pod rook-ceph/"+holder.name+" is still in use by")
			assert.Equal(t, i, dels(), "%s sends one DEL per stop", s.runtime)
			assert.Equal(t, stateAfterRefusedStop[s.runtime], holder.podState(t))
			assert.Equal(t, holder.netnsID, hosttest.StatNS(t, holder.netnsPath), "the runtime keeps its netns")
			assert.Equal(t, []string{holder.storageIP}, hosttest.AddrsIn(t, holder.netnsPath, sn.ifname), "eth0 keeps its address")
			assert.True(t, sn.hostLocalHas(holder.storageIP), "host-local keeps the lease of %s", holder.storageIP)
			sn.requirePinned(t, holder, cluster, "draining")
		}

		sn.removeRBDDevice(t, 0)
		res = holder.stop()
		require.NoError(t, res.Err, "crictl stopp once the rbd device is gone:\n%s", res)
		assert.Equal(t, 3, dels())
		sn.requireUnpinned(t, holder)
		requireNoLink(t, link)
		assert.False(t, sn.hostLocalHas(holder.storageIP), "host-local released %s", holder.storageIP)
		assert.False(t, pathExists(holder.netnsPath), "%s removed its netns %s", s.runtime, holder.netnsPath)
		res = holder.remove()
		require.NoError(t, res.Err, "crictl rmp:\n%s", res)
		assert.Empty(t, holder.podState(t))
	})
}

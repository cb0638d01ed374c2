package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// Multus thin without "retryDeleteOnError" deletes its cache of the pod's
// delegates after the failed DEL; when the pod object is gone by the
// retry, it answers DEL with success without calling any delegate, and
// the runtime removes the netns (multus-cni pkg/multus/multus.go CmdDel).
// No runtime will DEL the holder again: the sweeper finishes the teardown
// once nothing uses the netns, macvlan and host-local included. Needs root.
func TestMultusGivesUpAndTheSweeperFinishes(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		s.setRetryDeleteOnError(t, false)
		const cluster = "rook-ceph/cluster-m"
		sn := s.newStorageNet(t, netSpec{
			holders: []map[string]any{{"podNamespace": "rook-ceph", "podName": "csi-holder-m-*", "cluster": cluster}},
			// Multus runs its delegates through libcni with its cniDir as the
			// cache folder.
			cacheDirs: []string{filepath.Join(s.dir, "multus-cache")},
		})
		link := sn.link(t, cluster)
		holder := s.mustRunPod(t, "rook-ceph", "csi-holder-m-"+host.RandHex(5), sn.selection(""))
		sn.requirePinned(t, holder, cluster, "active")
		sn.rbdDevice(t, 0, holder.storageIP)

		res := holder.stop()
		require.Error(t, res.Err, "the first stop is refused while rbd0 uses the netns:\n%s", res)
		raw, err := os.ReadFile(sn.recordPath(holder))
		require.NoError(t, err)
		var rec struct {
			Teardown *struct {
				CacheFile string `json:"cacheFile"`
			} `json:"teardown"`
		}
		require.NoError(t, json.Unmarshal(raw, &rec))
		require.NotNil(t, rec.Teardown, "the refusal captured what a teardown needs")
		assert.Contains(t, rec.Teardown.CacheFile, filepath.Join(s.dir, "multus-cache", "results"), "Multus' delegate cache entry")

		// The pod object goes before the retry (a force delete, the kubelet
		// giving up); Multus has no cache and no pod: success, no delegate.
		s.api.deletePod(holder.ns, holder.name)
		res = holder.stop()
		require.NoError(t, res.Err, "Multus answers the retry with success:\n%s", res)
		_, err = os.Lstat(holder.netnsPath)
		require.True(t, os.IsNotExist(err), "the runtime removed its netns (err %v)", err)
		require.NoError(t, holder.remove().Err)
		sn.requirePinned(t, holder, cluster, "draining")
		assert.True(t, sn.hostLocalHas(holder.storageIP), "host-local keeps %s: no delegate DEL ran", holder.storageIP)

		s.startSweeper(t, sn)
		abandoned := host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
			b, err := os.ReadFile(sn.recordPath(holder))
			var r struct {
				Abandoned bool `json:"abandoned"`
			}
			return err == nil && json.Unmarshal(b, &r) == nil && r.Abandoned
		})
		require.True(t, abandoned, "the sweeper sees that the runtime abandoned the holder")
		sn.requirePinned(t, holder, cluster, "draining")
		assert.Equal(t, []string{holder.storageIP}, hosttest.AddrsIn(t, sn.pinPath(holder), storageIfName), "net1 keeps its address while rbd0 is mapped")
		assert.True(t, sn.hostLocalHas(holder.storageIP))

		sn.removeRBDDevice(t, 0)
		released := host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
			_, err := os.Lstat(sn.recordPath(holder))
			return os.IsNotExist(err)
		})
		require.True(t, released, "the sweeper finishes the teardown once the netns is unused")
		sn.requireUnpinned(t, holder)
		requireNoLink(t, link)
		assert.False(t, sn.hostLocalHas(holder.storageIP), "the sweeper's chain DEL gave %s back to host-local", holder.storageIP)
	})
}

package e2e

// Rook 1.9.2 to 1.15 ran holder pods whose container wrote
// `ln --force --symbolic /proc/$$/ns/net <kubelet>/plugins/<driver>/<ns>.net.ns`
// and slept (pkg/operator/ceph/csi/template/rbd/csi-rbdplugin-holder.yaml).
// With netns-pin at the end of the NetworkAttachmentDefinition's chain and a
// `holders` rule for those pods, and no links of its own at Rook's path, a
// holder restart no longer cuts the clients that entered the old holder's
// netns: the runtime's DEL is refused until they are gone. Needs root.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// rookHolder is the holder container of Rook's template: it points Rook's
// path at its own /proc/<pid>/ns/net and sleeps.
func rookHolder(t *testing.T, ns *hosttest.NetnsHandle, path string) *exec.Cmd {
	t.Helper()
	cmd := hosttest.StartInNetns(t, ns.Path, "sh", "-c", `ln --force --symbolic /proc/$$/ns/net "$0" && exec sleep 600`, path)
	want := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	require.True(t, host.Poll(10*time.Second, 5*time.Millisecond, func() bool {
		got, err := os.Readlink(path)
		return err == nil && got == want
	}), "the Rook-style holder wrote %s", path)
	return cmd
}

func TestRookStyleHolderRestartKeepsClients(t *testing.T) {
	c := newChain(t, chainSpec{holders: []map[string]any{
		{"podNamespace": clusterNS, "podName": "csi-cephfsplugin-holder-*", "cluster": cluster},
	}})
	rookPath := filepath.Join(c.work, "plugins", "rook-ceph.cephfs.csi.ceph.com", clusterNS+".net.ns")
	require.NoError(t, os.MkdirAll(filepath.Dir(rookPath), 0o755))

	nsA := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, nsA, podArgs(clusterNS, "csi-cephfsplugin-holder-my-cluster-a"), true)
	ipA := sandboxIP(t, a.mustAdd(t))
	holderA := rookHolder(t, nsA, rookPath)
	clientA := startClient(t, rookPath, nsA.ID, "") // a volume mapped through Rook's path

	// The holder restarts: its process dies, the runtime tears the sandbox
	// down (refused: the client's netns stays, interface and address too).
	require.NoError(t, host.Stop(holderA))
	assertKeptInUse(t, a, libcniDel(t, a), ipA)

	nsB := hosttest.NewNetns(t, "npe2e")
	b := c.newAttachment(t, nsB, podArgs(clusterNS, "csi-cephfsplugin-holder-my-cluster-b"), true)
	b.mustAdd(t)
	holderB := rookHolder(t, nsB, rookPath)
	clientB := startClient(t, rookPath, nsB.ID, "")
	assert.Equal(t, nsB.ID, hosttest.StatNS(t, fmt.Sprintf("/proc/%d/ns/net", clientB.cmd.Process.Pid)), "new clients land in the new holder's netns")
	got, err := os.Readlink(rookPath)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, "/proc/"), "netns-pin leaves Rook's path to Rook: %s", got)
	assert.True(t, containsIP(nsenterAddrs(t, a.pinPath()), ipA), "the old holder's clients keep %s", ipA)

	clientA.stop(t)
	r := a.cnitoolRun("del")
	require.NoError(t, r.Err, "%s", r)
	assertReleased(t, a, nsA.Path)
	clientB.stop(t)
	require.NoError(t, host.Stop(holderB))
	r = b.cnitoolRun("del")
	require.NoError(t, r.Err, "%s", r)
	assertReleased(t, b, nsB.Path)
}

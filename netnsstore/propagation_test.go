package netnsstore

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// A csi node plugin container has its own mount namespace in which the
// kubelet plugins folder is a slave (or shared) copy of the host's. Pins
// made after it started must appear in it, and a release must disappear
// from it, or the pinned netns would live on there.
func TestPinsPropagateToAnotherMountNamespace(t *testing.T) {
	s := testStore(t)
	// pinDir becomes a shared mount before the other namespace exists, as
	// it does on the first pin (or is, under a systemd host's shared /).
	unlock, err := s.lock()
	require.NoError(t, err)
	require.NoError(t, s.ensureShared())
	unlock()

	csi := exec.Command("unshare", "--mount", "--propagation", "slave", "sleep", "600")
	require.NoError(t, csi.Start())
	t.Cleanup(func() { assert.NoError(t, host.Stop(csi)) })
	self, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	mntNS := "/proc/" + strconv.Itoa(csi.Process.Pid) + "/ns/mnt"
	require.Eventually(t, func() bool {
		other, err := os.Readlink(mntNS)
		return err == nil && other != self
	}, 10*time.Second, time.Millisecond, "the child enters its own mount namespace")
	childMountinfo := "/proc/" + strconv.Itoa(csi.Process.Pid) + "/mountinfo"

	n := testNetns(t, "10.98.11.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	assert.Contains(t, hosttest.NsfsMountsOfIn(t, childMountinfo, r.NetnsIno), r.PinPath, "the pin appears in the other mount namespace")
	out, err := exec.Command("nsenter", "--mount="+mntNS, "--", "stat", "-L", "-c", "%i", r.Links[0]).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, strconv.FormatUint(r.NetnsIno, 10), strings.TrimSpace(string(out)), "the link resolves to the netns inside it")

	n.Delete(t)
	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
	assert.Empty(t, hosttest.NsfsMountsOfIn(t, childMountinfo, r.NetnsIno), "the release disappears from the other mount namespace")
	assert.Zero(t, nsfsMounts(t, r.NetnsIno), "no copy of the netns is left anywhere: it is gone")
}

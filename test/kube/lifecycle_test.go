package kube

// Holders that go another way than a rollout: force-deleted, or draining
// across a restart of the kubelet and containerd.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// Scenario 4: `kubectl delete pod --force --grace-period=0` of a holder in
// use removes the API object at once; on the node the netns stays pinned
// with its interface and address while the client uses it, and once unused
// the kubelet's cleanup of the orphaned sandbox releases pin, sandbox and
// lease.
func TestForceDeletedHolderInUse(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	cl := startClient(t, h.link)
	require.Equal(t, old.sb.netns, cl.netns)

	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", old.pod.Metadata.Name, "--force", "--grace-period=0")
	r := c.kubectl("-n", pinNamespace, "get", "pod", old.pod.Metadata.Name)
	require.Error(t, r.Err, "the API object must be gone at once:\n%s", r)
	assert.Contains(t, r.Stderr, "NotFound")

	// The DaemonSet's replacement takes the link over.
	next := h.waitHolder(t, old.pod.Metadata.UID)
	h.requireLinkTo(t, next)
	// The kubelet has tried to tear the old sandbox down by now (it kills
	// a removed pod at once); the pin holds, the interface keeps its address.
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := c.readRecord(t, old.sb)
		return rec != nil && rec.State == "draining"
	}), "the force-deleted holder's record did not turn draining")
	c.requirePinned(t, old.pod, old.sb, h.cluster, "draining")
	assert.Equal(t, []string{old.ip}, hosttest.AddrsIn(t, c.pinPath(old.sb), storageIf))
	assert.True(t, c.whereaboutsHas(t, old.pod), "whereabouts keeps the lease while the netns is used")

	cl.stop(t)
	left := time.Now()
	ok := host.Poll(releaseTimeout, time.Second, func() bool {
		return c.unpinned(old.sb) && !c.whereaboutsHas(t, old.pod) && c.crictlRun("inspectp", old.sb.id).Err != nil
	})
	if !ok {
		c.dumpState(t, pinNamespace)
	}
	require.True(t, ok, "the orphaned sandbox, its pin or its lease is still there %s after the client left", releaseTimeout)
	t.Logf("force-deleted holder released %s after its client left", time.Since(left).Round(time.Millisecond))
	h.requireLinkTo(t, next)
}

// restart kills a component of the node by its recorded PID and starts
// it again with hack/kube/up.sh, which starts what is not running.
func (c *cluster) restart(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(c.env["KUBE_DIR"], "pids", n))
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL), "kill %s (%d)", n, pid)
		require.True(t, host.Poll(30*time.Second, 50*time.Millisecond, func() bool {
			return syscall.Kill(pid, 0) != nil
		}), "%s (%d) did not die", n, pid)
	}
	r := host.RunCmd(10*time.Minute, nil, nil, filepath.Join(c.repo, "hack", "kube", "up.sh"))
	require.NoError(t, r.Err, "hack/kube/up.sh after killing %v:\n%s", names, host.Tail(r.Stderr, 30))
}

// Scenario 5: the kubelet and containerd die and come back while an old
// holder is draining: its pin, record and lease survive, it stays
// Terminating, and it is released once unused, after the restart.
func TestDrainingHolderSurvivesNodeRestart(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	cl := startClient(t, h.link)
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next := h.waitHolder(t, old.pod.Metadata.UID)
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		return len(c.eventsOf(t, old.pod, "FailedKillPod")) > 0
	}), "the old holder is not draining (no FailedKillPod)")

	c.restart(t, "kubelet", "containerd")

	_, present := c.podByUID(t, pinNamespace, h.selector, old.pod.Metadata.UID)
	assert.True(t, present, "the draining holder is still Terminating after the restart")
	c.requirePinned(t, old.pod, old.sb, h.cluster, "draining")
	assert.Equal(t, []string{old.ip}, hosttest.AddrsIn(t, c.pinPath(old.sb), storageIf))
	assert.True(t, c.whereaboutsHas(t, old.pod))
	h.requireLinkTo(t, next)
	c.waitRunning(t, pinNamespace, h.selector, old.pod.Metadata.UID)

	cl.stop(t)
	c.requireReleased(t, h.selector, old.pod, old.sb, time.Second, "the old holder was not released after the restart")
	h.requireLinkTo(t, next)
	c.requirePinned(t, next.pod, next.sb, h.cluster, "active")
}

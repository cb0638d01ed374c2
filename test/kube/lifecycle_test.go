package kube

// Holders that go another way than a rollout: draining across a restart of
// the kubelet and containerd (a force-deleted holder: finalizer_test.go).

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

package kube

// The node agent as deployed (deploy/agent-daemonset.yaml): a force-deleted
// holder in use keeps its object, Terminating with the finalizer
// netns-pin.io/pin, and the agent's Event says what uses its netns; once
// the client leaves, the kubelet's retried DEL releases the pin, the agent
// lifts the finalizer and the object goes (docs/operating.md, "The holder
// in the API").

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

func TestAgentKeepsForceDeletedHolderUntilReleased(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		return len(c.eventsOf(t, old.pod, "NetnsPinned")) > 0
	}), "the agent posts NetnsPinned on the holder")
	cl := startClient(t, h.link)

	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", old.pod.Metadata.Name, "--force", "--grace-period=0")
	p, present := c.podByUID(t, pinNamespace, h.selector, old.pod.Metadata.UID)
	require.True(t, present, "the finalizer keeps the force-deleted holder's object")
	require.NotNil(t, p.Metadata.DeletionTimestamp, "it is being deleted")
	next := h.waitHolder(t, old.pod.Metadata.UID)
	h.requireLinkTo(t, next)
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		return len(c.eventsOf(t, old.pod, "NetnsReleaseRefused")) > 0
	}), "the agent's Event of the refusal")
	ev := c.eventsOf(t, old.pod, "NetnsReleaseRefused")[0]
	t.Logf("NetnsReleaseRefused: %+v", ev)
	assert.True(t, c.whereaboutsHas(t, old.pod), "whereabouts keeps the lease while the object stays")
	_, present = c.podByUID(t, pinNamespace, h.selector, old.pod.Metadata.UID)
	assert.True(t, present, "the object stays while the pin is in use")

	cl.stop(t)
	left := time.Now()
	c.requireReleased(t, h.selector, old.pod, old.sb, time.Second, "pin, object or lease still there after the client left")
	t.Logf("force-deleted holder released and its object gone %s after its client left", time.Since(left).Round(time.Millisecond))
	assert.NotEmpty(t, c.eventsOf(t, old.pod, "NetnsReleased"), "the agent's Event of the release")
	h.requireLinkTo(t, next)
}

// The agent restarted while a holder drains loses nothing: the finalizer
// stays while the pin does, and goes after the release.
func TestAgentRestartWhileDraining(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	cl := startClient(t, h.link)
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", old.pod.Metadata.Name, "--force", "--grace-period=0")
	h.waitHolder(t, old.pod.Metadata.UID)
	c.mustKubectl(t, "-n", "kube-system", "rollout", "restart", "daemonset/netns-pin-agent")
	c.mustKubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/netns-pin-agent", "--timeout=120s")
	_, present := c.podByUID(t, pinNamespace, h.selector, old.pod.Metadata.UID)
	require.True(t, present, "the object stays across the agent's restart")
	cl.stop(t)
	c.requireReleased(t, h.selector, old.pod, old.sb, time.Second, "not released after the agent's restart")
}

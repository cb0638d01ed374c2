package kube

// The holder DaemonSet of deploy/ through its whole life: up, rolled, its
// old pod draining while a client uses it, released once unused.

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// holderSet is a holder DaemonSet of deploy/ on a NAD of deploy/, applied
// for one test and deleted (with its pods) when the test ends.
type holderSet struct {
	c        *cluster
	name     string
	cluster  string // Ceph cluster, namespace/name
	selector string
	nad      *storageNet
	link     string
}

func (c *cluster) newHolderSet(t *testing.T, nadFile string) *holderSet {
	t.Helper()
	suffix := host.RandHex(5)
	return c.newHolderSetOn(t, suffix, c.nad(t, nadFile, "ceph-public-"+suffix, nil))
}

// newHolderSetOn applies nad and a holder DaemonSet named after suffix.
func (c *cluster) newHolderSetOn(t *testing.T, suffix string, nad *storageNet) *holderSet {
	t.Helper()
	h := &holderSet{c: c, name: "csi-holder-" + suffix, cluster: pinNamespace + "/ceph-" + suffix, nad: nad}
	h.selector = "app.kubernetes.io/name=csi-holder,app.kubernetes.io/instance=" + h.name
	h.link = c.linkOf(h.cluster)
	c.ensureNamespace(t, pinNamespace)
	c.apply(t, h.nad.object)
	t.Cleanup(func() {
		c.deleteAndWait(t, pinNamespace, "network-attachment-definitions.k8s.cni.cncf.io", h.nad.name, "")
	})
	c.apply(t, c.holderDaemonSet(t, h.name, h.nad.name, h.cluster))
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "daemonset", h.name, h.selector) })
	return h
}

func (c *cluster) ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	c.apply(t, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
}

// deleteAndWait deletes an object and waits until the pods matching
// selector are gone, so the next test starts from a clean node.
func (c *cluster) deleteAndWait(t *testing.T, ns, kind, name, selector string) {
	t.Helper()
	r := c.kubectl("-n", ns, "delete", kind, name, "--ignore-not-found", "--wait=true", "--timeout=60s")
	assert.NoError(t, r.Err, "%s", r)
	if selector == "" {
		return
	}
	ok := host.Poll(releaseTimeout, 500*time.Millisecond, func() bool { return len(c.allPods(t, ns, selector)) == 0 })
	if !ok {
		c.dumpState(t, ns)
	}
	assert.True(t, ok, "pods %s still there %s after deleting %s %s", selector, releaseTimeout, kind, name)
}

// holder is one running holder pod and its sandbox.
type holder struct {
	pod pod
	sb  sandbox
	ip  string
}

// waitHolder waits for a Ready holder pod other than those in skip, and
// checks it is pinned with the cluster's link leading into its netns.
func (h *holderSet) waitHolder(t *testing.T, skip ...string) holder {
	t.Helper()
	p := h.c.waitRunning(t, pinNamespace, h.selector, skip...)
	sb := h.c.sandboxOf(t, p)
	r := h.c.requirePinned(t, p, sb, h.cluster, "active")
	ho := holder{pod: p, sb: sb, ip: p.storageIP()}
	require.NotEmpty(t, ho.ip, "no %s address in the network-status of %s", storageIf, p)
	assert.Contains(t, r.IPs, ho.ip, "record's addresses")
	assert.Equal(t, []string{ho.ip}, hosttest.AddrsIn(t, sb.netnsPath, storageIf), "%s of %s", storageIf, p)
	return ho
}

// requireLinkTo checks the cluster's link leads to the holder's pin and
// netns.
func (h *holderSet) requireLinkTo(t *testing.T, ho holder) {
	t.Helper()
	assert.Equal(t, h.c.hostPath(h.c.pinPath(ho.sb)), linkTarget(h.link), "link %s", h.link)
	assert.Equal(t, ho.sb.netns, hosttest.StatNS(t, h.link), "link %s does not lead into the netns of %s", h.link, ho.pod)
}

// Scenarios 1 and 2: the holder DaemonSet of deploy/ (RollingUpdate,
// maxSurge 1, maxUnavailable 0) comes up and publishes its netns; a client
// enters it through the link. `kubectl rollout restart` brings the new
// holder up and re-points the link before the old pod is deleted; the old
// pod stays Terminating, with netns-pin's reason in FailedKillPod events,
// while its client lives, and goes with its pin and its whereabouts lease
// within one kubelet retry once the client is gone.
func TestHolderDaemonSetRollout(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")

	// 1. up: pinned, linked, entered through the link
	old := h.waitHolder(t)
	h.requireLinkTo(t, old)
	cl := startClient(t, h.link)
	assert.Equal(t, old.sb.netns, cl.netns, "the client runs in the holder's netns")
	out := hosttest.MustRun(t, "nsenter", "--net="+h.link, "--", "ip", "-o", "-4", "addr", "show", storageIf)
	assert.Contains(t, out, old.ip+"/", "through the link: %s", out)

	// 2. rollout restart
	start := time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next := h.waitHolder(t, old.pod.Metadata.UID)
	t.Logf("new holder %s Ready %s after the restart", next.pod, time.Since(start).Round(time.Millisecond))
	h.requireLinkTo(t, next)
	assert.NotEqual(t, old.sb.netns, next.sb.netns)

	// The DaemonSet controller deletes the old pod only after the new one
	// is Ready (the link was re-pointed at the new pod's ADD, before).
	var gone pod
	require.True(t, host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		p, ok := c.podByUID(t, pinNamespace, h.selector, old.pod.Metadata.UID)
		gone = p
		return ok && p.Metadata.DeletionTimestamp != nil
	}), "the old holder %s was not deleted after the new one was Ready", old.pod)
	grace := 5 * time.Second // deploy/holder-daemonset.yaml's terminationGracePeriodSeconds
	deletedAt := gone.Metadata.DeletionTimestamp.Add(-grace)
	assert.False(t, deletedAt.Before(next.pod.readySince()),
		"old pod deleted at %s, before the new one was Ready at %s", deletedAt, next.pod.readySince())

	// The old pod stays Terminating with netns-pin's reason.
	var evs []event
	ok := host.Poll(releaseTimeout, time.Second, func() bool {
		evs = c.eventsOf(t, old.pod, "FailedKillPod")
		return len(evs) > 0
	})
	if !ok {
		c.dumpState(t, pinNamespace)
	}
	require.True(t, ok, "no FailedKillPod event for the old holder %s", old.pod)
	msg := evs[0].Message
	t.Logf("FailedKillPod (%s, count %d): %s", evs[0].Source.Component, evs[0].Count, msg)
	wantLine := "netns-pin: cluster " + h.cluster + ": holder pod " + old.pod.String() + " is still in use by"
	assert.Contains(t, msg, wantLine, "the event carries netns-pin's line")
	assert.Contains(t, msg, "process ", "the event names the first references")
	assert.Regexp(t, regexp.MustCompile(`netns-pinctl .*inuse `+regexp.QuoteMeta(old.sb.id+"."+storageIf)), msg,
		"the event says how to see every reference")
	assert.NotContains(t, msg, "\\n", "one readable line, no escaped newlines")
	var refused []event
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		refused = c.eventsOf(t, old.pod, "NetnsReleaseRefused")
		return len(refused) > 0
	}), "no NetnsReleaseRefused event of the node agent for the old holder %s", old.pod)
	assert.Contains(t, refused[0].Message, wantLine, "the agent's event says what the runtime's says")
	assert.Regexp(t, regexp.MustCompile(`netns-pinctl .*inuse `+regexp.QuoteMeta(old.sb.id+"."+storageIf)), refused[0].Message,
		"the agent's event names the same command")
	describe := c.mustKubectl(t, "-n", pinNamespace, "describe", "pod", old.pod.Metadata.Name)
	assert.Contains(t, describe, "FailedKillPod")
	assert.Contains(t, describe, wantLine, "kubectl describe pod shows the reason")
	t.Logf("kubectl get events:\n%s", c.mustKubectl(t, "-n", pinNamespace, "get", "events",
		"--field-selector", "involvedObject.name="+old.pod.Metadata.Name))

	p, ok := c.podByUID(t, pinNamespace, h.selector, old.pod.Metadata.UID)
	require.True(t, ok, "the old holder must stay Terminating while its client lives")
	assert.NotNil(t, p.Metadata.DeletionTimestamp)
	c.requirePinned(t, old.pod, old.sb, h.cluster, "draining")
	assert.Equal(t, []string{old.ip}, hosttest.AddrsIn(t, c.pinPath(old.sb), storageIf), "the old netns keeps its interface and address")
	assert.True(t, c.whereaboutsHas(t, old.pod), "whereabouts keeps the old holder's lease")
	h.requireLinkTo(t, next)
	assert.Equal(t, old.sb.netns, cl.netns)

	// The client leaves: within one kubelet retry, everything goes.
	before := failedKills(c.eventsOf(t, old.pod, "FailedKillPod"))
	cl.stop(t)
	took := c.requireReleased(t, h.selector, old.pod, old.sb, 500*time.Millisecond, "the old holder, its pin or its lease is still there after its client left")
	t.Logf("old holder released %s after its client left", took.Round(time.Millisecond))
	// a retry already under way when the client left may fail once more
	after := failedKills(c.eventsOf(t, old.pod, "FailedKillPod"))
	assert.LessOrEqual(t, after, before+1, "FailedKillPod events after the client left: the kubelet needed more than one retry")
	h.requireLinkTo(t, next)
	c.requirePinned(t, next.pod, next.sb, h.cluster, "active")
	assert.True(t, strings.HasPrefix(next.ip, strings.TrimSuffix(c.env["KUBE_STORAGE_SUBNET"], "0/24")))
}

// failedKills counts the kubelet's failed KillPod attempts in events
// (repeated events are one event with a count).
func failedKills(evs []event) int {
	n := 0
	for _, e := range evs {
		n += max(e.Count, 1)
	}
	return n
}

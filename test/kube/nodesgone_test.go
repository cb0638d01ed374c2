package kube

// Nodes that go away (docs/operating.md, "Nodes that go away"): three
// nodes, the cluster controller of deploy/ (two replicas) and
// whereabouts' controller live. A node only unreachable keeps every
// finalizer; a node declared off (out-of-service) or whose Node object is
// gone lets its holders go, and whereabouts frees their addresses.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

const (
	// partition is how long node 2 is cut off: well past the time the
	// node lifecycle controller marks it Unknown.
	partition = 2 * time.Minute
	// liftAfterQuarantine bounds a lift of the controller after the
	// quarantine of a gone Node (or after the taint): a pass, and a new
	// leader's Lease wait when the leader was on the node that went.
	liftAfterQuarantine = 60 * time.Second
)

// withStore is the view with another pinDir and stateDir (a NAD's second
// pair).
func (c *cluster) withStore(pinDir, stateDir string) *cluster {
	v := *c
	v.pinDir, v.stateDir = pinDir, stateDir
	return &v
}

// nodeReady is the Ready condition's status of a node ("" when it is gone).
func (c *cluster) nodeReady(t *testing.T, name string) string {
	t.Helper()
	r := c.kubectl("get", "node", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if r.Err != nil {
		require.Contains(t, r.Stderr, "NotFound", "kubectl get node %s: %s", name, r)
		return ""
	}
	return strings.TrimSpace(r.Stdout)
}

// waitNodeNotReady waits until the node lifecycle controller has marked
// the node NotReady or Unknown.
func (c *cluster) waitNodeNotReady(t *testing.T, name string) time.Time {
	t.Helper()
	var st string
	require.True(t, host.Poll(3*time.Minute, time.Second, func() bool {
		st = c.nodeReady(t, name)
		return st == "False" || st == "Unknown"
	}), "node %s is still Ready (%q)", name, st)
	t.Logf("node %s: Ready=%s", name, st)
	return time.Now()
}

// requireKept checks that a deleted holder still has its object with the
// finalizer, and whereabouts its lease.
func (c *cluster) requireKept(t *testing.T, ho holder, what string) {
	t.Helper()
	p, ok := c.podNamed(t, ho.pod)
	require.True(t, ok, "%s: the object of %s is gone", what, ho.pod)
	assert.NotNil(t, p.Metadata.DeletionTimestamp, "%s: %s", what, ho.pod)
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer, "%s: %s", what, ho.pod)
	assert.True(t, c.whereaboutsHas(t, ho.pod), "%s: whereabouts keeps the lease of %s", what, ho.pod)
}

// waitLifted waits until the controller has let the holder go: its
// object gone within limit, its Event says why, whereabouts (its
// reconciler, every 10 s here) frees its address. It returns when the
// object was seen gone.
func (c *cluster) waitLifted(t *testing.T, ho holder, limit time.Duration, reason string) time.Time {
	t.Helper()
	var goneAt time.Time
	require.True(t, host.Poll(limit, 250*time.Millisecond, func() bool {
		_, ok := c.podNamed(t, ho.pod)
		goneAt = time.Now()
		return !ok
	}), "the controller did not let %s go within %s", ho.pod, limit)
	evs := c.eventsOf(t, ho.pod, reason)
	require.NotEmpty(t, evs, "no %s Event on %s", reason, ho.pod)
	assert.Equal(t, "netns-pin-controller", evs[0].Source.Component)
	t.Logf("%s: %s", reason, evs[0].Message)
	require.True(t, host.Poll(reconcilerTimeout, time.Second, func() bool { return !c.whereaboutsHas(t, ho.pod) }),
		"whereabouts still holds the address of %s, let go by the controller", ho.pod)
	return goneAt
}

// Three nodes, one NAD whose netns-pin has a second pinDir/stateDir pair,
// a holder and a client on each node.
//  1. The holders of nodes 1 and 2 force-deleted while in use: objects,
//     pins and leases stay; node 1's client leaves: its holder goes.
//  2. Node 2 partitioned for 2 minutes (its link down) while node 3 loses
//     power, its holder deleted, the node declared off (out-of-service):
//     node 3's holder is let go and its address freed, node 2's holder
//     stays through the partition and is as before once it ends.
//  3. Node 2 loses power and its Node object is deleted: its holder is let
//     go once the quarantine is over, and its address freed.
//
// No address is ever held by two pods.
func TestNodesThatGoAway(t *testing.T) {
	c := requireCluster(t)
	n2, n3 := c.addNode(t, 2), c.addNode(t, 3)
	pinDir := filepath.Join(c.env["KUBELET_DIR"], "plugins", "netns-pin-b")
	stateDir := filepath.Join(c.env["KUBE_DIR"], "lib", "cni", "netns-pin-b")
	suffix := host.RandHex(5)
	nad := c.nad(t, "network-attachment-definition.yaml", "ceph-public-"+suffix, func(_, pin map[string]any) {
		pin["pinDir"], pin["stateDir"] = pinDir, stateDir
	})
	views := []*cluster{c.withStore(pinDir, stateDir), n2.withStore(pinDir, stateDir), n3.withStore(pinDir, stateDir)}
	h := c.newHolderSetOn(t, suffix, nad)
	sets := []*holderSet{h.on(views[0]), h.on(views[1]), h.on(views[2])}
	var held [3]holder
	var clients [3]*client
	for i, s := range sets {
		held[i] = s.waitHolder(t)
		s.requireLinkTo(t, held[i])
		if i == 0 {
			clients[i] = startClient(t, s.link)
		} else {
			clients[i] = startNodeClient(t, views[i], views[i].linkOf(h.cluster))
		}
		require.Equal(t, held[i].sb.netns, clients[i].netns, "the client on node %d", i+1)
	}
	requireNoAddressTwice(t, views...)

	// 1. force-deleted while in use, on nodes 1 and 2
	for i := range 2 {
		c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", held[i].pod.Metadata.Name, "--force", "--grace-period=0", "--wait=false")
	}
	for i := range 2 {
		v := views[i]
		require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
			rec := v.readRecord(t, held[i].sb)
			return rec != nil && rec.State == "draining"
		}), "node %d's force-deleted holder did not turn draining in its store %s", i+1, stateDir)
		c.requireKept(t, held[i], "force-deleted in use")
		assert.Equal(t, []string{held[i].ip}, hosttest.AddrsIn(t, v.hostPath(v.pinPath(held[i].sb)), storageIf))
	}
	next1 := sets[0].waitHolder(t, held[0].pod.Metadata.UID)
	next2 := sets[1].waitHolder(t, held[1].pod.Metadata.UID)
	for _, n := range []holder{next1, next2} {
		assert.NotEqual(t, held[0].ip, n.ip)
		assert.NotEqual(t, held[1].ip, n.ip)
	}
	requireNoAddressTwice(t, views...)
	clients[0].stop(t)
	took := views[0].requireReleased(t, h.selector, held[0].pod, held[0].sb, 500*time.Millisecond,
		"node 1's force-deleted holder, its pin or its lease is still there after its client left")
	t.Logf("node 1's force-deleted holder (store %s) released %s after its client left", stateDir, took.Round(time.Millisecond))

	// 2. node 2 partitioned; meanwhile node 3 loses power and is declared off
	cut := time.Now()
	require.NoError(t, c.nodeScript(cmdTimeout, "link", "2", "down").Err)
	linkUp := func() { c.nodeScript(cmdTimeout, "link", "2", "up") }
	t.Cleanup(linkUp)
	require.NoError(t, c.nodeScript(cmdTimeout, "kill", "3").Err)
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", held[2].pod.Metadata.Name, "--wait=false")
	c.waitNodeNotReady(t, n3.nodeName)
	c.requireKept(t, held[2], "node 3 off, not yet declared so")
	tainted := time.Now()
	c.mustKubectl(t, "taint", "node", n3.nodeName, controller.TaintOutOfService+"=nodeshutdown:NoExecute")
	liftedAt := c.waitLifted(t, held[2], liftAfterQuarantine, controller.ReasonNodeOutOfService)
	t.Logf("node 3's holder let go %s after the out-of-service taint", liftedAt.Sub(tainted).Round(time.Millisecond))
	requireNoAddressTwice(t, views[0])

	c.waitNodeNotReady(t, n2.nodeName)
	c.requireKept(t, held[1], "node 2 partitioned")
	quiet := time.Now() // node 1 idle, node 2 cut off, node 3 off
	require.True(t, host.Poll(partition, time.Second, func() bool {
		c.requireKept(t, held[1], "node 2 partitioned")
		return time.Since(cut) >= partition
	}))
	requireNoAddressTwice(t, views[0])
	c.logFootprint(t, "node 1 idle while node 2 is partitioned", quiet, time.Now())
	linkUp()
	require.True(t, host.Poll(3*time.Minute, time.Second, func() bool { return c.nodeReady(t, n2.nodeName) == "True" }),
		"node 2 is not Ready again after its link came back")
	t.Logf("node 2 Ready again %s after the partition began", time.Since(cut).Round(time.Second))
	c.requireKept(t, held[1], "after the partition")
	rec := views[1].readRecord(t, held[1].sb)
	require.NotNil(t, rec, "node 2's record of its force-deleted holder")
	assert.Equal(t, "draining", rec.State)
	assert.Equal(t, []string{held[1].ip}, hosttest.AddrsIn(t, views[1].hostPath(views[1].pinPath(held[1].sb)), storageIf))
	requireNoAddressTwice(t, views[0], views[1])

	// 3. node 2 loses power, its Node object deleted
	require.NoError(t, c.nodeScript(cmdTimeout, "kill", "2").Err)
	c.requireKept(t, held[1], "node 2 off")
	gone := time.Now()
	c.mustKubectl(t, "delete", "node", n2.nodeName, "--wait=true")
	liftedAt = c.waitLifted(t, held[1], controller.DefaultQuarantine+liftAfterQuarantine, controller.ReasonNodeGone)
	assert.GreaterOrEqual(t, liftedAt.Sub(gone), controller.DefaultQuarantine, "the controller let go before the quarantine")
	t.Logf("node 2's holder let go %s after its Node object was deleted (quarantine %s)",
		liftedAt.Sub(gone).Round(time.Millisecond), controller.DefaultQuarantine)
	requireNoAddressTwice(t, views[0])
}

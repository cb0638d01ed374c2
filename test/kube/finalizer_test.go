package kube

// The holder's object lives as long as its pin: the finalizer
// netns-pin.io/pin of deploy/holder-daemonset.yaml's template, lifted by the
// node agent (deploy/, cmd/netns-pin-agent) only once no record of the node
// names the pod. With whereabouts' controller live in the suite
// (whereabouts_test.go), these scenarios assert what it would otherwise
// break: a holder's lease is freed only after its pin is released.

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// pinFinalizer is the finalizer of holder pods (deploy/holder-daemonset.yaml).
const pinFinalizer = agent.Finalizer

// waitAgentEvent waits for an Event of the node agent with that reason on
// the pod and returns it.
func (c *cluster) waitAgentEvent(t *testing.T, p pod, reason string) event {
	t.Helper()
	var evs []event
	ok := host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		evs = c.eventsOf(t, p, reason)
		return len(evs) > 0
	})
	require.True(t, ok, "no %s Event of the agent on %s", reason, p)
	assert.Equal(t, "netns-pin-agent", evs[0].Source.Component)
	t.Logf("%s: %s", reason, evs[0].Message)
	return evs[0]
}

// podNamed returns the pod of that UID by name (a pod being deleted with a
// finalizer is still listed), false when it is gone.
func (c *cluster) podNamed(t *testing.T, p pod) (pod, bool) {
	t.Helper()
	var got pod
	r := c.kubectl("-n", p.Metadata.Namespace, "get", "pod", p.Metadata.Name, "-o", "json")
	if r.Err != nil {
		require.Contains(t, r.Stderr, "NotFound", "kubectl get pod %s: %s", p, r)
		return pod{}, false
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &got), "kubectl get pod %s", p)
	if got.Metadata.UID != p.Metadata.UID {
		return pod{}, false
	}
	return got, true
}

// arpingDAD runs duplicate address detection for ip on the storage
// interface of the netns at path (busybox arping -D: exit 0 when nobody
// answers, 1 when some interface on the segment has ip), and returns the
// MAC address that answered, "" when none did, and the output.
func arpingDAD(t *testing.T, path, ip string) (string, string) {
	t.Helper()
	r := host.RunCmd(30*time.Second, nil, nil, "nsenter", "--net="+path, "--",
		"/bin/busybox", "arping", "-D", "-f", "-c", "3", "-w", "3", "-I", storageIf, ip)
	if r.Err == nil {
		return "", r.Stdout
	}
	m := regexp.MustCompile(`reply from \S+ \[([0-9a-f:]+)\]`).FindStringSubmatch(r.Stdout)
	require.NotNil(t, m, "arping -D %s in %s failed without an answer: %s", ip, path, r)
	return m[1], r.Stdout
}

// macIn is the MAC address of the storage interface in the netns at path.
func macIn(t *testing.T, path string) string {
	t.Helper()
	out := hosttest.MustRun(t, "nsenter", "--net="+path, "--", "ip", "-o", "link", "show", storageIf)
	m := regexp.MustCompile(`link/ether ([0-9a-f:]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "no MAC address of %s in %s: %s", storageIf, path, out)
	return m[1]
}

// Scenario 1 (and 7): `kubectl delete pod --force --grace-period=0` of a
// holder in use. The object stays, Terminating, with its finalizer; the
// lease stays, also across a run of whereabouts' reconciler; the
// DaemonSet's replacement gets another address (arping -D from it gets no
// answer for its own, and the old netns' MAC for the old one); kubectl
// describe pod shows the refusal. Once the client leaves, the pin is
// released, the finalizer lifted, the object gone and the lease freed
// once, the replacement's untouched.
func TestForceDeletedHolderInUse(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	assert.Contains(t, old.pod.Metadata.Finalizers, pinFinalizer, "the holder's template carries the finalizer")
	lease := c.allocationsOf(t, old.pod)
	require.Len(t, lease, 1, "whereabouts' allocation of %s", old.pod)
	cl := startClient(t, h.link)
	require.Equal(t, old.sb.netns, cl.netns)

	deleted := time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", old.pod.Metadata.Name, "--force", "--grace-period=0", "--wait=false")
	p, ok := c.podNamed(t, old.pod)
	require.True(t, ok, "the force-deleted holder's object must stay while its pin does")
	require.NotNil(t, p.Metadata.DeletionTimestamp, "the object is being deleted")
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)

	// The DaemonSet's replacement takes the link over, on another address.
	next := h.waitHolder(t, old.pod.Metadata.UID)
	h.requireLinkTo(t, next)
	assert.NotEqual(t, old.ip, next.ip, "the replacement got the old holder's address")
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := c.readRecord(t, old.sb)
		return rec != nil && rec.State == "draining"
	}), "the force-deleted holder's record did not turn draining")
	c.requirePinned(t, old.pod, old.sb, h.cluster, "draining")
	assert.Equal(t, []string{old.ip}, hosttest.AddrsIn(t, c.pinPath(old.sb), storageIf))

	// No two interfaces on the storage network share an address: nobody
	// answers the replacement's probe for its own address, while the old,
	// pinned netns answers the one for its own (the probe sees it).
	mac, out := arpingDAD(t, next.sb.netnsPath, next.ip)
	assert.Empty(t, mac, "arping -D %s from the replacement was answered:\n%s", next.ip, out)
	mac, out = arpingDAD(t, next.sb.netnsPath, old.ip)
	assert.Equal(t, macIn(t, c.pinPath(old.sb)), mac, "arping -D %s (the pinned netns' address) from the replacement:\n%s", old.ip, out)

	// kubectl describe pod shows the refusal.
	var evs []event
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		evs = c.eventsOf(t, old.pod, "FailedKillPod")
		return len(evs) > 0
	}), "no FailedKillPod event for the force-deleted holder %s", old.pod)
	wantLine := "netns-pin: cluster " + h.cluster + ": holder pod " + old.pod.String() + " is still in use by"
	assert.Contains(t, evs[0].Message, wantLine)
	c.waitAgentEvent(t, old.pod, agent.ReasonPinned)
	refused := c.waitAgentEvent(t, old.pod, agent.ReasonRefused)
	assert.Contains(t, refused.Message, "process ", "the agent's Event names what uses the pin")
	describe := c.mustKubectl(t, "-n", pinNamespace, "describe", "pod", old.pod.Metadata.Name)
	assert.Contains(t, describe, wantLine, "kubectl describe pod shows the refusal")
	assert.Contains(t, describe, agent.ReasonRefused)

	// Scenario 7: a reconciler run while it drains frees nothing, and
	// whereabouts' controller has freed nothing either.
	c.waitReconcilerRun(t)
	assert.Equal(t, lease, c.allocationsOf(t, old.pod), "whereabouts keeps the draining holder's lease")
	assert.Empty(t, c.eventsOf(t, old.pod, "IPAddressGarbageCollected"), "whereabouts' controller freed the lease")
	assert.Len(t, c.allocationsOf(t, next.pod), 1, "the replacement's lease")
	t.Logf("force-deleted holder drained %s with its lease kept", time.Since(deleted).Round(time.Millisecond))

	// The client leaves: pin released, finalizer lifted, object gone,
	// lease freed.
	cl.stop(t)
	took := c.requireReleased(t, h.selector, old.pod, old.sb, 250*time.Millisecond,
		"the force-deleted holder, its pin or its lease is still there after its client left")
	t.Logf("force-deleted holder released and gone %s after its client left", took.Round(time.Millisecond))
	_, present := c.podNamed(t, old.pod)
	assert.False(t, present)
	assert.NotEmpty(t, c.eventsOf(t, old.pod, agent.ReasonReleased), "the agent's Released Event")
	assert.LessOrEqual(t, len(c.eventsOf(t, old.pod, "IPAddressGarbageCollected")), 1, "the lease was freed more than once")
	assert.Len(t, c.allocationsOf(t, next.pod), 1, "the replacement keeps its lease")
	h.requireLinkTo(t, next)
	c.requirePinned(t, next.pod, next.sb, h.cluster, "active")
}

// objectGoneAfterKubelet deletes nothing: it polls pod p until its object is
// gone and returns how long it stayed after the kubelet had finished with
// it (deletionGracePeriodSeconds 0: the kubelet's final delete) and after its
// record was gone (the release), both measured at this poll's resolution.
func (c *cluster) objectGoneAfterKubelet(t *testing.T, p pod, sb sandbox) (afterKubelet, afterRelease time.Duration) {
	t.Helper()
	var kubeletDone, released time.Time
	ok := host.Poll(releaseTimeout, 50*time.Millisecond, func() bool {
		now := time.Now()
		if released.IsZero() && c.unpinned(sb) {
			released = now
		}
		got, present := c.podNamed(t, p)
		if !present {
			if kubeletDone.IsZero() {
				kubeletDone = now
			}
			if released.IsZero() {
				released = now
			}
			return true
		}
		if kubeletDone.IsZero() && got.Metadata.DeletionGracePeriodSeconds != nil && *got.Metadata.DeletionGracePeriodSeconds == 0 {
			kubeletDone = now
		}
		return false
	})
	require.True(t, ok, "%s is still there %s after its delete", p, releaseTimeout)
	gone := time.Now()
	return gone.Sub(kubeletDone), gone.Sub(released)
}

// Scenario 4: a graceful delete and a rollout of unused holders. The
// finalizer adds no wait beyond 2 s to today's release: the object goes at
// most 2 s after the kubelet's final delete (which is when it went before
// the finalizer) and after the pin's release.
func TestUnusedHolderDeleteDelay(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	first := h.waitHolder(t)
	const bound = 2 * time.Second

	start := time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", first.pod.Metadata.Name, "--wait=false")
	afterKubelet, afterRelease := c.objectGoneAfterKubelet(t, first.pod, first.sb)
	t.Logf("graceful delete of an unused holder: gone %s after the delete, %s after the kubelet's final delete, %s after the release",
		time.Since(start).Round(time.Millisecond), afterKubelet.Round(time.Millisecond), afterRelease.Round(time.Millisecond))
	assert.LessOrEqual(t, afterKubelet, bound, "the finalizer delayed the object beyond the kubelet's final delete")
	assert.LessOrEqual(t, afterRelease, bound, "the finalizer delayed the object beyond the release")
	assert.False(t, c.whereaboutsHas(t, first.pod), "the deleted holder's lease")

	second := h.waitHolder(t, first.pod.Metadata.UID)
	start = time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	third := h.waitHolder(t, first.pod.Metadata.UID, second.pod.Metadata.UID)
	afterKubelet, afterRelease = c.objectGoneAfterKubelet(t, second.pod, second.sb)
	t.Logf("rollout of an unused holder: old one gone %s after the restart, %s after the kubelet's final delete, %s after the release",
		time.Since(start).Round(time.Millisecond), afterKubelet.Round(time.Millisecond), afterRelease.Round(time.Millisecond))
	assert.LessOrEqual(t, afterKubelet, bound, "the finalizer delayed the object beyond the kubelet's final delete")
	assert.LessOrEqual(t, afterRelease, bound, "the finalizer delayed the object beyond the release")
	assert.False(t, c.whereaboutsHas(t, second.pod), "the rolled holder's lease")
	h.requireLinkTo(t, third)
}

// Scenario 6: a pod that carries the finalizer but whose ADD failed (its
// claim names another namespace's cluster, which netns-pin refuses) is
// never pinned; deleted, it goes as any pod does, the agent lifting the
// finalizer that no record justifies.
func TestFinalizerOfUnpinnedPodLifted(t *testing.T) {
	c := requireCluster(t)
	nad := c.storageNAD(t)
	name := "csi-holder-bad-" + host.RandHex(5)
	obj := c.appPod(pinNamespace, name,
		`[{"name":"`+nad.name+`","namespace":"`+pinNamespace+`","cni-args":{"pinCluster":"other-ns/ceph"}}]`)
	obj["metadata"].(map[string]any)["finalizers"] = []any{pinFinalizer}
	c.apply(t, obj)
	t.Cleanup(func() {
		// never leave a pod with a finalizer behind a failed test
		_ = c.kubectl("-n", pinNamespace, "patch", "pod", name, "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
	})
	var p pod
	var evs []event
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		ps := c.pods(t, pinNamespace, "app="+name)
		if len(ps) != 1 {
			return false
		}
		p = ps[0]
		evs = c.eventsOf(t, p, "FailedCreatePodSandBox")
		return len(evs) > 0
	}), "the pod's ADD did not fail")
	t.Logf("FailedCreatePodSandBox: %s", evs[0].Message)
	assert.Contains(t, evs[0].Message, "netns-pin")
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)

	start := time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", name, "--wait=false")
	ok := host.Poll(60*time.Second, 100*time.Millisecond, func() bool {
		_, present := c.podNamed(t, p)
		return !present
	})
	require.True(t, ok, "the never-pinned pod with the finalizer is still there 60 s after its delete")
	t.Logf("never-pinned pod with the finalizer gone %s after its delete", time.Since(start).Round(time.Millisecond))
	assert.NotEmpty(t, c.eventsOf(t, p, agent.ReasonLifted), "the agent's Event on lifting the finalizer")
	assert.True(t, host.Poll(30*time.Second, 250*time.Millisecond, func() bool { return len(c.allocationsOf(t, p)) == 0 }),
		"whereabouts keeps a lease of the never-pinned pod")
}

// The node agent as deploy/ runs it: its DaemonSet and container.
const (
	agentNS        = "kube-system"
	agentDaemonSet = "netns-pin-agent"
	agentContainer = "agent"
)

// agentPodInfo is what the tests read of an agent pod.
type agentPodInfo struct {
	Metadata struct {
		Name              string     `json:"name"`
		DeletionTimestamp *time.Time `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status struct {
		ContainerStatuses []struct {
			Name         string `json:"name"`
			Ready        bool   `json:"ready"`
			RestartCount int    `json:"restartCount"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// agentPods lists the pods of the agent DaemonSet (by its selector).
func (c *cluster) agentPods(t *testing.T) []agentPodInfo {
	t.Helper()
	sel := c.mustKubectl(t, "-n", agentNS, "get", "daemonset", agentDaemonSet, "-o", "jsonpath={.spec.selector.matchLabels}")
	var labels map[string]string
	require.NoError(t, json.Unmarshal([]byte(sel), &labels), "the agent DaemonSet's selector: %s", sel)
	var terms []string
	for k, v := range labels {
		terms = append(terms, k+"="+v)
	}
	var list struct {
		Items []agentPodInfo `json:"items"`
	}
	c.getJSON(t, &list, "-n", agentNS, "get", "pods", "-l", strings.Join(terms, ","))
	return list.Items
}

// agentPod returns the node's ready agent pod and its container's restart
// count ("" when none is ready).
func (c *cluster) agentPod(t *testing.T) (string, int) {
	t.Helper()
	for _, p := range c.agentPods(t) {
		if p.Metadata.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == agentContainer && cs.Ready {
				return p.Metadata.Name, cs.RestartCount
			}
		}
	}
	return "", -1
}

// killAgent SIGKILLs the agent's process (found through the CRI) and waits
// until the kubelet has started it again and it is ready.
func (c *cluster) killAgent(t *testing.T) {
	t.Helper()
	name, restarts := c.agentPod(t)
	require.NotEmpty(t, name, "no ready agent pod")
	r := c.crictlRun("ps", "-q", "--label", "io.kubernetes.pod.namespace="+agentNS,
		"--label", "io.kubernetes.pod.name="+name, "--label", "io.kubernetes.container.name="+agentContainer)
	require.NoError(t, r.Err, "%s", r)
	id := strings.TrimSpace(r.Stdout)
	require.NotEmpty(t, id, "no agent container in pod %s", name)
	r = c.crictlRun("inspect", "-o", "go-template", "--template", "{{.info.pid}}", id)
	require.NoError(t, r.Err, "%s", r)
	pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	require.NoError(t, err, "the agent's pid: %q", r.Stdout)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL), "kill the agent (%d)", pid)
	require.True(t, host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		n, rs := c.agentPod(t)
		return n == name && rs > restarts
	}), "the agent was not started again after SIGKILL")
}

// setAgentRunning stops the node's agent (a nodeSelector no node has: the
// DaemonSet deletes its pod) or lets it run again, and waits for it.
func (c *cluster) setAgentRunning(t *testing.T, run bool) {
	t.Helper()
	patch := `[{"op":"add","path":"/spec/template/spec/nodeSelector","value":{"netns-pin.io/no-such-node":"true"}}]`
	if run {
		patch = `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`
	}
	c.mustKubectl(t, "-n", agentNS, "patch", "daemonset", agentDaemonSet, "--type=json", "-p", patch)
	ok := host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		if !run {
			var ds struct {
				Status struct {
					CurrentNumberScheduled int `json:"currentNumberScheduled"`
					NumberMisscheduled     int `json:"numberMisscheduled"`
				} `json:"status"`
			}
			c.getJSON(t, &ds, "-n", agentNS, "get", "daemonset", agentDaemonSet)
			return ds.Status.CurrentNumberScheduled == 0 && ds.Status.NumberMisscheduled == 0 && len(c.agentPods(t)) == 0
		}
		n, _ := c.agentPod(t)
		return n != ""
	})
	require.True(t, ok, "the agent did not %s", map[bool]string{true: "start", false: "stop"}[run])
}

// Scenario 5: the agent is killed while a holder drains and starts again,
// and is away while the release happens: nothing is lost. The holder
// keeps its finalizer, pin and lease across the agent's crash; released
// while no agent runs, its object stays (no one else lifts the finalizer);
// the agent, back, lifts it.
func TestAgentRestartWhileHolderDrains(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	cl := startClient(t, h.link)
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next := h.waitHolder(t, old.pod.Metadata.UID)
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		return len(c.eventsOf(t, old.pod, "FailedKillPod")) > 0
	}), "the old holder is not draining (no FailedKillPod)")
	lease := c.allocationsOf(t, old.pod)
	require.Len(t, lease, 1)

	// 1. killed and started again while the holder drains
	c.killAgent(t)
	p, present := c.podNamed(t, old.pod)
	require.True(t, present, "the draining holder's object after the agent's restart")
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)
	c.requirePinned(t, old.pod, old.sb, h.cluster, "draining")
	assert.Equal(t, lease, c.allocationsOf(t, old.pod))

	// 2. away while the release happens
	c.setAgentRunning(t, false)
	stopped := true
	t.Cleanup(func() {
		// a failed step must not leave the node without its agent
		if stopped {
			c.setAgentRunning(t, true)
		}
	})
	cl.stop(t)
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool { return c.unpinned(old.sb) }),
		"the old holder was not released after its client left")
	require.True(t, host.Poll(30*time.Second, 250*time.Millisecond, func() bool { return !c.whereaboutsHas(t, old.pod) }),
		"the chain's DEL did not free the released holder's lease")
	p, present = c.podNamed(t, old.pod)
	require.True(t, present, "released while no agent runs, the holder's object must stay (its finalizer)")
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)

	// 3. back: it lifts the finalizer of the released holder
	start := time.Now()
	c.setAgentRunning(t, true)
	stopped = false
	require.True(t, host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		_, present := c.podNamed(t, old.pod)
		return !present
	}), "the agent, started again, did not lift the released holder's finalizer")
	t.Logf("released holder gone %s after the agent was let run again", time.Since(start).Round(time.Millisecond))
	h.requireLinkTo(t, next)
	c.requirePinned(t, next.pod, next.sb, h.cluster, "active")
	assert.Len(t, c.allocationsOf(t, next.pod), 1)
}

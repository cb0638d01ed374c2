package kube

// whereabouts as its users run it: besides the CNI binary, its controller
// (ip-control-loop, hack/kube/whereabouts.sh), whose pod informer frees
// every address of a pod whose object leaves the API, and whose cron
// reconciler frees addresses whose pod it cannot find. These helpers watch
// both; the test below proves that the suite's controller is live, so that
// the scenarios that assert "the lease stays" assert it against the real
// thing.

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

const (
	// whereaboutsNS is where whereabouts' DaemonSet, its IPPools and its
	// Events for pods run (WHEREABOUTS_NAMESPACE of its DaemonSet).
	whereaboutsNS = "kube-system"
	// reconcilerTimeout bounds the wait for one reconciler run: its
	// schedule during the suite is "@every 10s" (hack/kube/whereabouts.sh).
	reconcilerTimeout = time.Minute
)

// allocation is one address of a whereabouts IPPool (spec.allocations,
// keyed by the address' offset in the range).
type allocation struct {
	ID     string `json:"id"`
	PodRef string `json:"podref"`
	IfName string `json:"ifname,omitempty"`
}

// ipPool is what the tests read of a whereabouts IPPool.
type ipPool struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Range       string                `json:"range"`
		Allocations map[string]allocation `json:"allocations"`
	} `json:"spec"`
}

// ipPools lists every whereabouts IPPool.
func (c *cluster) ipPools(t *testing.T) []ipPool {
	t.Helper()
	var list struct {
		Items []ipPool `json:"items"`
	}
	c.getJSON(t, &list, "get", "ippools.whereabouts.cni.cncf.io", "-A")
	return list.Items
}

// allocationsOf returns the allocations whose podref is the pod, keyed by
// "<pool>/<offset>".
func (c *cluster) allocationsOf(t *testing.T, p pod) map[string]allocation {
	t.Helper()
	got := map[string]allocation{}
	for _, pool := range c.ipPools(t) {
		for off, a := range pool.Spec.Allocations {
			if a.PodRef == p.String() {
				got[pool.Metadata.Name+"/"+off] = a
			}
		}
	}
	return got
}

// whereaboutsLogs returns the controller's log lines written at or after
// since (kubectl logs --timestamps; since is the host's clock, as is the
// kubelet's).
func (c *cluster) whereaboutsLogs(t *testing.T, since time.Time) []string {
	t.Helper()
	out := c.mustKubectl(t, "-n", whereaboutsNS, "logs", "daemonset/whereabouts", "--timestamps",
		"--since-time="+since.Add(-time.Second).UTC().Format(time.RFC3339))
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		ts, line, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(since) {
			continue
		}
		lines = append(lines, line)
	}
	require.NoError(t, sc.Err())
	return lines
}

// waitReconcilerRun waits until whereabouts' reconciler has started a run
// after this call and finished it, and fails the test if that run failed.
// What the reconciler would free when called is what that run freed: a
// scenario asserts its leases right after it.
func (c *cluster) waitReconcilerRun(t *testing.T) {
	t.Helper()
	since := time.Now()
	var result string
	ok := host.Poll(reconcilerTimeout, 500*time.Millisecond, func() bool {
		var ended bool
		result, ended = host.WhereaboutsReconcilerRun(c.whereaboutsLogs(t, since))
		return ended
	})
	require.True(t, ok, "no whereabouts reconciler run started and finished within %s", reconcilerTimeout)
	require.Contains(t, result, "reconciler success", "the reconciler's run failed")
	t.Logf("whereabouts' reconciler ran (%s after the wait began)", time.Since(since).Round(time.Millisecond))
}

// storageNAD applies a NetworkAttachmentDefinition of deploy/ for one test
// (deleted when it ends).
func (c *cluster) storageNAD(t *testing.T) *storageNet {
	t.Helper()
	nad := c.nad(t, "network-attachment-definition.yaml", "ceph-public-"+host.RandHex(5), nil)
	c.ensureNamespace(t, pinNamespace)
	c.apply(t, nad.object)
	t.Cleanup(func() {
		c.deleteAndWait(t, pinNamespace, "network-attachment-definitions.k8s.cni.cncf.io", nad.name, "")
	})
	return nad
}

// The suite's whereabouts is the real one, controller and reconciler:
//   - a pod on the storage network that is force-deleted (no finalizer:
//     not a holder) has its address freed by the controller's pod
//     informer, with whereabouts' IPAddressGarbageCollected Event on the
//     pod, within seconds (about 70 ms measured by hand), the hazard that
//     holders' finalizer answers;
//   - an allocation whose pod does not exist is freed by the next
//     reconciler run.
func TestWhereaboutsControllerAndReconcilerRun(t *testing.T) {
	c := requireCluster(t)
	nad := c.storageNAD(t)
	name := "app-" + host.RandHex(5)
	c.apply(t, c.appPod(pinNamespace, name, `[{"name":"`+nad.name+`","namespace":"`+pinNamespace+`"}]`))
	p := c.waitRunning(t, pinNamespace, "app="+name)
	ip := p.storageIP()
	require.NotEmpty(t, ip, "%s has no %s address", p, storageIf)
	held := c.allocationsOf(t, p)
	require.Len(t, held, 1, "whereabouts' allocations of %s", p)

	// 1. the controller: a force delete frees the address at once
	start := time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", name, "--force", "--grace-period=0")
	ok := host.Poll(30*time.Second, 50*time.Millisecond, func() bool { return len(c.allocationsOf(t, p)) == 0 })
	freed := time.Since(start)
	require.True(t, ok, "the force-deleted %s still holds %v after 30 s", p, held)
	var evs []event
	require.True(t, host.Poll(30*time.Second, 250*time.Millisecond, func() bool {
		evs = c.eventsOf(t, p, "IPAddressGarbageCollected")
		return len(evs) > 0
	}), "no IPAddressGarbageCollected event of whereabouts' controller for %s", p)
	assert.Equal(t, "pod-ip-controlloop", evs[0].Source.Component)
	t.Logf("force-deleted %s: address %s freed %s after the delete; %s: %s", p, ip,
		freed.Round(time.Millisecond), evs[0].Reason, evs[0].Message)

	// 2. the reconciler: an allocation of a pod that does not exist goes
	pools := c.ipPools(t)
	require.NotEmpty(t, pools)
	pool := pools[0]
	const offset = "250" // far above what the suite's pods take (the lowest free first)
	_, taken := pool.Spec.Allocations[offset]
	require.False(t, taken, "offset %s of %s is taken", offset, pool.Metadata.Name)
	orphan := allocation{ID: "netns-pin-test-" + host.RandHex(5), PodRef: pinNamespace + "/no-such-pod", IfName: storageIf}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"allocations": map[string]any{offset: orphan}}})
	require.NoError(t, err)
	c.mustKubectl(t, "-n", pool.Metadata.Namespace, "patch", "ippools.whereabouts.cni.cncf.io", pool.Metadata.Name,
		"--type=merge", "-p", string(patch))
	c.waitReconcilerRun(t)
	for _, pl := range c.ipPools(t) {
		if pl.Metadata.Name == pool.Metadata.Name {
			assert.NotContains(t, pl.Spec.Allocations, offset, "the reconciler left the orphaned allocation %+v", orphan)
		}
	}
}

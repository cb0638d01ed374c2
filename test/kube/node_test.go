package kube

// What the tests look at: pods and events through the API server, sandboxes
// through containerd's CRI, and netns-pin's records, pins and links on the
// node.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// pod is what the tests read of a Pod.
type pod struct {
	Metadata struct {
		Name              string     `json:"name"`
		Namespace         string     `json:"namespace"`
		UID               string     `json:"uid"`
		DeletionTimestamp *time.Time `json:"deletionTimestamp"`
		// DeletionGracePeriodSeconds turns 0 when the kubelet has finished
		// with the pod (its final delete); a finalizer keeps the object.
		DeletionGracePeriodSeconds *int64            `json:"deletionGracePeriodSeconds"`
		Finalizers                 []string          `json:"finalizers"`
		Annotations                map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type               string    `json:"type"`
			Status             string    `json:"status"`
			LastTransitionTime time.Time `json:"lastTransitionTime"`
		} `json:"conditions"`
	} `json:"status"`
}

func (p pod) String() string { return p.Metadata.Namespace + "/" + p.Metadata.Name }

// readySince is when the pod became Ready; zero when it is not.
func (p pod) readySince() time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" && c.Status == "True" {
			return c.LastTransitionTime
		}
	}
	return time.Time{}
}

// storageIP is net1's address as Multus reports it in the pod's
// network-status annotation.
func (p pod) storageIP() string {
	var st []struct {
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
	}
	_ = json.Unmarshal([]byte(p.Metadata.Annotations["k8s.v1.cni.cncf.io/network-status"]), &st)
	for _, s := range st {
		if s.Interface == storageIf && len(s.IPs) > 0 {
			return s.IPs[0]
		}
	}
	return ""
}

// pods lists the pods of a namespace matching a label selector that are
// bound to the view's node (or to no node yet).
func (c *cluster) pods(t *testing.T, ns, selector string) []pod {
	t.Helper()
	var mine []pod
	for _, p := range c.allPods(t, ns, selector) {
		if p.Spec.NodeName == "" || p.Spec.NodeName == c.nodeName {
			mine = append(mine, p)
		}
	}
	return mine
}

// allPods lists the pods of a namespace matching a label selector, on
// every node.
func (c *cluster) allPods(t *testing.T, ns, selector string) []pod {
	t.Helper()
	var list struct {
		Items []pod `json:"items"`
	}
	args := []string{"-n", ns, "get", "pods"}
	if selector != "" {
		args = append(args, "-l", selector)
	}
	c.getJSON(t, &list, args...)
	return list.Items
}

// podByUID returns the pod with that UID, false when it is gone.
func (c *cluster) podByUID(t *testing.T, ns, selector, uid string) (pod, bool) {
	t.Helper()
	for _, p := range c.pods(t, ns, selector) {
		if p.Metadata.UID == uid {
			return p, true
		}
	}
	return pod{}, false
}

// waitRunning waits for one Ready pod matching selector whose UID is not
// in skip, and returns it.
func (c *cluster) waitRunning(t *testing.T, ns, selector string, skip ...string) pod {
	t.Helper()
	var got pod
	ok := host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		for _, p := range c.pods(t, ns, selector) {
			if !slices.Contains(skip, p.Metadata.UID) && p.Metadata.DeletionTimestamp == nil &&
				p.Status.Phase == "Running" && !p.readySince().IsZero() {
				got = p
				return true
			}
		}
		return false
	})
	if !ok {
		c.dumpState(t, ns)
	}
	require.True(t, ok, "no Ready pod %s in %s within %s", selector, ns, podTimeout)
	return got
}

// requireReleased waits until pod p (of those selector selects in
// pinNamespace) is gone, and with it its pin and record (its sandbox sb)
// and its whereabouts lease; a wait that fails logs the node's state and
// fails the test with what. It returns how long the wait took.
func (c *cluster) requireReleased(t *testing.T, selector string, p pod, sb sandbox, interval time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	ok := host.Poll(releaseTimeout, interval, func() bool {
		_, present := c.podByUID(t, pinNamespace, selector, p.Metadata.UID)
		return !present && c.unpinned(sb) && !c.whereaboutsHas(t, p)
	})
	if !ok {
		c.dumpState(t, pinNamespace)
	}
	require.True(t, ok, "%s (waited %s)", what, releaseTimeout)
	return time.Since(start)
}

// dumpState logs what a person would look at when a wait fails.
func (c *cluster) dumpState(t *testing.T, ns string) {
	t.Helper()
	t.Logf("kubectl get pods:\n%s", c.kubectl("-n", ns, "get", "pods", "-o", "wide").Stdout)
	t.Logf("kubectl get events:\n%s", c.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp").Stdout)
	t.Logf("crictl pods:\n%s", c.crictlRun("pods").Stdout)
}

// sandbox is a pod's sandbox as containerd knows it.
type sandbox struct {
	id        string
	netnsPath string
	netns     host.NSID
}

// sandboxOf finds the pod's (newest) sandbox through the CRI.
func (c *cluster) sandboxOf(t *testing.T, p pod) sandbox {
	t.Helper()
	r := c.crictlRun("pods", "--label", "io.kubernetes.pod.uid="+p.Metadata.UID, "-q", "--latest")
	require.NoError(t, r.Err, "%s", r)
	id := strings.TrimSpace(r.Stdout)
	require.NotEmpty(t, id, "no sandbox for %s", p)
	r = c.crictlRun("inspectp", "-o", "json", id)
	require.NoError(t, r.Err, "%s", r)
	st, err := host.ParseInspectp([]byte(r.Stdout))
	require.NoError(t, err)
	require.NotEmpty(t, st.NetnsPath(), "sandbox %s has no netns path", id)
	sb := sandbox{id: id, netnsPath: c.hostPath(st.NetnsPath())}
	sb.netns = hosttest.StatNS(t, sb.netnsPath)
	return sb
}

// recordPath is where the host reads the sandbox's record.
func (c *cluster) recordPath(sb sandbox) string {
	return c.hostPath(filepath.Join(c.stateDir, "records", sb.id+"."+storageIf+".json"))
}

// pinPath is the sandbox's pin as the node names it (in its records);
// the host reaches it at c.hostPath(c.pinPath(sb)).
func (c *cluster) pinPath(sb sandbox) string {
	return filepath.Join(c.pinDir, "pins", sb.id+"."+storageIf)
}

// readRecord returns the sandbox's record, nil when there is none.
func (c *cluster) readRecord(t *testing.T, sb sandbox) *hosttest.Record {
	t.Helper()
	return hosttest.ReadRecord(t, c.recordPath(sb))
}

// requirePinned checks the pod's netns is pinned for clusterName in state
// want and the pin holds that netns.
func (c *cluster) requirePinned(t *testing.T, p pod, sb sandbox, clusterName, want string) *hosttest.Record {
	t.Helper()
	r := c.readRecord(t, sb)
	require.NotNil(t, r, "no record for %s (%s)", p, c.recordPath(sb))
	assert.Equal(t, clusterName, r.Cluster)
	assert.Equal(t, want, r.State, "record state of %s", p)
	assert.Equal(t, p.Metadata.Namespace, r.PodNS)
	assert.Equal(t, p.Metadata.Name, r.PodName)
	assert.Equal(t, p.Metadata.UID, r.PodUID)
	assert.Equal(t, c.pinPath(sb), r.PinPath)
	assert.Equal(t, sb.netns, hosttest.StatNS(t, c.hostPath(c.pinPath(sb))), "pin of %s", p)
	assert.Equal(t, sb.netns, r.NetnsID(), "record's netns identity of %s", p)
	return r
}

// unpinned reports whether nothing of the sandbox is left in netns-pin's
// folders: no record, no pin.
func (c *cluster) unpinned(sb sandbox) bool {
	_, errR := os.Lstat(c.recordPath(sb))
	_, errP := os.Lstat(c.hostPath(c.pinPath(sb)))
	return os.IsNotExist(errR) && os.IsNotExist(errP)
}

// linkTarget is the pin a cluster's link leads to (through its relative
// symlink), "" when there is no link.
func linkTarget(link string) string {
	target, err := os.Readlink(link)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(link), target)
	}
	return target
}

// client stands for a Ceph client made in a holder's netns: a process
// started with `nsenter --net=<link>`, the way ceph-csi runs `rbd map` and
// CephFS mounts in the holder's netns. netns-pin counts it as a process
// that uses the netns.
type client struct {
	cmd   *exec.Cmd
	netns host.NSID // the netns it runs in
	group bool      // stopped by killing its process group (startNodeClient)
}

func startClient(t *testing.T, link string) *client {
	t.Helper()
	id := hosttest.StatNS(t, link)
	return &client{cmd: hosttest.StartInNetns(t, link, "sleep", "3600"), netns: id}
}

func (cl *client) stop(t *testing.T) {
	t.Helper()
	if cl.group && cl.cmd.ProcessState == nil {
		// nsenter forks into the node's PID namespace: the group holds both
		require.NoError(t, syscall.Kill(-cl.cmd.Process.Pid, syscall.SIGKILL))
	}
	require.NoError(t, host.Stop(cl.cmd))
}

// event is a Kubernetes event (the fields kubectl prints).
type event struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Count   int    `json:"count"`
	Source  struct {
		Component string `json:"component"`
	} `json:"source"`
}

// eventsOf lists the events of a pod with a reason.
func (c *cluster) eventsOf(t *testing.T, p pod, reason string) []event {
	t.Helper()
	var list struct {
		Items []event `json:"items"`
	}
	c.getJSON(t, &list, "-n", p.Metadata.Namespace, "get", "events",
		"--field-selector", "involvedObject.uid="+p.Metadata.UID+",reason="+reason)
	return list.Items
}

// whereaboutsHas reports whether whereabouts holds an address for the pod
// (an allocation in any IPPool whose podref is the pod).
func (c *cluster) whereaboutsHas(t *testing.T, p pod) bool {
	t.Helper()
	var list struct {
		Items []struct {
			Spec struct {
				Allocations map[string]struct {
					PodRef string `json:"podref"`
				} `json:"allocations"`
			} `json:"spec"`
		} `json:"items"`
	}
	c.getJSON(t, &list, "get", "ippools.whereabouts.cni.cncf.io", "-A")
	for _, pool := range list.Items {
		for _, a := range pool.Spec.Allocations {
			if a.PodRef == p.String() {
				return true
			}
		}
	}
	return false
}

package kube

// More nodes (hack/kube/node.sh): each its own kubelet and containerd in
// network, mount and PID namespaces of its own, joined to the suite's API
// server, whereabouts and netns-pin DaemonSets. A view of the cluster
// (viewOf) looks at one node: its pods, its sandboxes through its
// containerd, its records and pins through its mount namespace.

import (
	"fmt"
	"os"
	"os/exec"
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

// nodeUpTimeout bounds hack/kube/node.sh up: a kubelet and a containerd
// that imports the suite's images.
const nodeUpTimeout = 5 * time.Minute

// nodeScript runs hack/kube/node.sh.
func (c *cluster) nodeScript(timeout time.Duration, args ...string) host.CmdResult {
	return host.RunCmd(timeout, nil, nil, filepath.Join(c.repo, "hack", "kube", "node.sh"), args...)
}

// addNode starts node n for the test and removes it (its Node object
// included) when the test ends; it returns once the node is Ready and the
// DaemonSets of the suite (netns-pin's installer and agent, whereabouts'
// controller) run on it.
func (c *cluster) addNode(t *testing.T, n int) *cluster {
	t.Helper()
	r := c.nodeScript(nodeUpTimeout, "up", strconv.Itoa(n))
	t.Logf("hack/kube/node.sh up %d:\n%s", n, host.Tail(r.Stderr, 5))
	t.Cleanup(func() {
		r := c.nodeScript(downTimeout, "down", strconv.Itoa(n))
		assert.NoError(t, r.Err, "hack/kube/node.sh down %d: %s", n, r)
	})
	require.NoError(t, r.Err, "hack/kube/node.sh up %d: %s", n, r)
	for _, ds := range []string{"netns-pin-installer", "netns-pin-agent", "whereabouts"} {
		c.mustKubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/"+ds, "--timeout="+podTimeout.String())
	}
	return c.viewOf(t, n)
}

// viewOf is the cluster as node n sees it.
func (c *cluster) viewOf(t *testing.T, n int) *cluster {
	t.Helper()
	v := *c
	v.nodeN, v.nodeName = n, fmt.Sprintf("netns-pin-node-%d", n)
	r := c.nodeScript(cmdTimeout, "pid", strconv.Itoa(n))
	require.NoError(t, r.Err, "node %d is not running: %s", n, r)
	v.root = "/proc/" + strings.TrimSpace(r.Stdout) + "/root"
	// The node's containerd socket is on its disk, which the host sees.
	v.crictlConf = filepath.Join(t.TempDir(), "crictl.yaml")
	sock := filepath.Join(c.env["KUBE_DIR"]+"-node"+strconv.Itoa(n), "containerd", "containerd.sock")
	require.NoError(t, os.WriteFile(v.crictlConf,
		[]byte("runtime-endpoint: unix://"+sock+"\nimage-endpoint: unix://"+sock+"\ntimeout: 60\n"), 0o600))
	return &v
}

// hostPath is where the host reaches a path of the view's node.
func (c *cluster) hostPath(p string) string {
	if c.root == "" {
		return p
	}
	return c.root + p
}

// on is the holder set as node v sees it.
func (h *holderSet) on(v *cluster) *holderSet {
	o := *h
	o.c = v
	o.link = v.hostPath(v.linkOf(h.cluster))
	return &o
}

// startNodeClient starts a client on node v, in the netns the link (as
// the node names it) leads to: a process of the node's PID namespace, as
// netns-pin on that node sees the processes of its own node only.
func startNodeClient(t *testing.T, v *cluster, link string) *client {
	t.Helper()
	id := hosttest.StatNS(t, v.hostPath(link))
	cmd := exec.Command(filepath.Join(v.repo, "hack", "kube", "node.sh"), "exec", strconv.Itoa(v.nodeN),
		"nsenter", "--net="+link, "--", "sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	cl := &client{cmd: cmd, netns: id, group: true}
	t.Cleanup(func() { cl.stop(t) })
	// running once its netns is the link's
	require.True(t, host.Poll(podTimeout, 100*time.Millisecond, func() bool {
		out, err := exec.Command("pgrep", "-g", strconv.Itoa(cmd.Process.Pid), "-x", "sleep").Output()
		if err != nil {
			return false
		}
		pid := strings.TrimSpace(strings.Split(string(out), "\n")[0])
		got, err := host.NSIDOf("/proc/" + pid + "/ns/net")
		return err == nil && got == id
	}), "the client on node %d did not start in %s", v.nodeN, link)
	return cl
}

// owners maps each storage address to the pods that hold it: those whose
// network-status names it, and those whose pinned netns (a record in a
// node's store) still carries it.
func owners(t *testing.T, views ...*cluster) map[string]map[string]bool {
	t.Helper()
	got := map[string]map[string]bool{}
	add := func(ip, uid string) {
		if got[ip] == nil {
			got[ip] = map[string]bool{}
		}
		got[ip][uid] = true
	}
	for _, p := range views[0].allPods(t, pinNamespace, "") {
		if ip := p.storageIP(); ip != "" {
			add(ip, p.Metadata.UID)
		}
	}
	for _, v := range views {
		dir := v.hostPath(filepath.Join(v.stateDir, "records"))
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err, "records of node %d", v.nodeN)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			r := hosttest.ReadRecord(t, filepath.Join(dir, e.Name()))
			if r == nil {
				continue
			}
			for _, cidr := range r.IPs {
				add(strings.Split(cidr, "/")[0], r.PodUID)
			}
		}
	}
	return got
}

// requireNoAddressTwice fails the test when two pods hold one storage
// address, on any of the nodes.
func requireNoAddressTwice(t *testing.T, views ...*cluster) {
	t.Helper()
	for ip, uids := range owners(t, views...) {
		require.Len(t, uids, 1, "address %s is held by more than one pod: %v", ip, uids)
	}
}

// A holder DaemonSet on two nodes: each node pins its own holder in its
// own store, with its own agent. A rollout while a client uses each node's
// holder keeps each old holder (object, pin, address, lease) until its own
// node's client leaves, node 1's first; whereabouts' controller is live
// throughout and no address is ever held by two pods.
func TestHolderRolloutOnTwoNodes(t *testing.T) {
	c := requireCluster(t)
	n2 := c.addNode(t, 2)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	h2 := h.on(n2)

	old1, old2 := h.waitHolder(t), h2.waitHolder(t)
	h.requireLinkTo(t, old1)
	h2.requireLinkTo(t, old2)
	assert.NotEqual(t, old1.ip, old2.ip, "whereabouts gave both nodes' holders one address")
	assert.Empty(t, c.readRecord(t, old2.sb), "node 1's store has a record of node 2's holder")
	requireNoAddressTwice(t, c, n2)

	cl := startNodeClient(t, n2, n2.linkOf(h.cluster))
	require.Equal(t, old2.sb.netns, cl.netns, "the client runs in node 2's holder netns")
	cl1 := startClient(t, h.link)
	require.Equal(t, old1.sb.netns, cl1.netns, "the client runs in node 1's holder netns")

	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next1 := h.waitHolder(t, old1.pod.Metadata.UID)
	next2 := h2.waitHolder(t, old2.pod.Metadata.UID)
	requireNoAddressTwice(t, c, n2)
	// node 1's old holder drains too, until its own client leaves
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := c.readRecord(t, old1.sb)
		return rec != nil && rec.State == "draining"
	}), "node 1's old holder did not turn draining")
	c.requireKept(t, old1, "node 1's old holder in use")
	cl1.stop(t)
	took1 := c.requireReleased(t, h.selector, old1.pod, old1.sb, 500*time.Millisecond, "node 1's old holder was not released after its client left")
	t.Logf("node 1's old holder released %s after its client left", took1.Round(time.Millisecond))
	h.requireLinkTo(t, next1)
	h2.requireLinkTo(t, next2)
	requireNoAddressTwice(t, c, n2)

	// node 2's old holder drains: object, pin, address and lease stay
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := n2.readRecord(t, old2.sb)
		return rec != nil && rec.State == "draining"
	}), "node 2's old holder did not turn draining")
	p, ok := n2.podByUID(t, pinNamespace, h.selector, old2.pod.Metadata.UID)
	require.True(t, ok, "node 2's old holder must stay while its client lives")
	assert.NotNil(t, p.Metadata.DeletionTimestamp)
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)
	assert.Equal(t, []string{old2.ip}, hosttest.AddrsIn(t, n2.hostPath(n2.pinPath(old2.sb)), storageIf))
	assert.True(t, c.whereaboutsHas(t, old2.pod), "whereabouts keeps node 2's old holder's lease")
	assert.NotEqual(t, old2.ip, next1.ip)
	assert.NotEqual(t, old2.ip, next2.ip)
	requireNoAddressTwice(t, c, n2)

	cl.stop(t)
	took := n2.requireReleased(t, h.selector, old2.pod, old2.sb, 500*time.Millisecond,
		"node 2's old holder, its pin or its lease is still there after its client left")
	t.Logf("node 2's old holder released %s after its client left", took.Round(time.Millisecond))
	requireNoAddressTwice(t, c, n2)
}

// A node that reboots (hack/kube/node.sh kill, then up: every process,
// mount and pin of it gone, its disk kept, a new boot id) while an old
// holder drains with a client: after the boot the sweeper's first round
// drops the record of the earlier boot and the agent lifts the finalizer
// at its next pass; the object and its lease go. The holder of the
// DaemonSet comes back pinned in the new boot, the link on it.
func TestNodeReboot(t *testing.T) {
	c := requireCluster(t)
	n2 := c.addNode(t, 2)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	h2 := h.on(n2)
	old := h2.waitHolder(t)
	cl := startNodeClient(t, n2, n2.linkOf(h.cluster))
	require.Equal(t, old.sb.netns, cl.netns)
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next := h2.waitHolder(t, old.pod.Metadata.UID)
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := n2.readRecord(t, old.sb)
		return rec != nil && rec.State == "draining"
	}), "node 2's old holder did not turn draining")
	c.requireKept(t, old, "draining before the reboot")
	bootBefore := n2.nodeBootID(t)

	require.NoError(t, c.nodeScript(cmdTimeout, "kill", "2").Err)
	r := c.nodeScript(nodeUpTimeout, "up", "2")
	require.NoError(t, r.Err, "hack/kube/node.sh up 2: %s", r)
	booted := time.Now()
	n2 = c.viewOf(t, 2)
	require.True(t, host.Poll(podTimeout, time.Second, func() bool {
		return n2.nodeBootID(t) != bootBefore && c.nodeReady(t, n2.nodeName) == "True"
	}), "node 2 is not Ready with a new boot id after its reboot")

	var gone time.Duration
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool {
		_, ok := c.podNamed(t, old.pod)
		gone = time.Since(booted)
		return !ok
	}), "node 2's old holder is still there after the reboot")
	t.Logf("node 2's old holder (pin of the earlier boot) gone %s after the node was up again", gone.Round(time.Millisecond))
	assert.Nil(t, n2.readRecord(t, old.sb), "the record of the earlier boot")
	require.True(t, host.Poll(reconcilerTimeout, time.Second, func() bool { return !c.whereaboutsHas(t, old.pod) }),
		"whereabouts still holds the old holder's address after the reboot")

	// the DaemonSet's holder runs again, pinned in the new boot
	_, ok := n2.podByUID(t, pinNamespace, h.selector, next.pod.Metadata.UID)
	require.True(t, ok, "the holder of the DaemonSet on node 2")
	require.True(t, host.Poll(podTimeout, time.Second, func() bool {
		r := n2.crictlRun("pods", "--label", "io.kubernetes.pod.uid="+next.pod.Metadata.UID, "--state", "ready", "-q")
		ids := strings.Fields(r.Stdout)
		return r.Err == nil && len(ids) == 1 && ids[0] != next.sb.id
	}), "the holder did not get a sandbox of the new boot")
	again := h.on(n2).waitHolder(t)
	assert.Equal(t, next.pod.Metadata.UID, again.pod.Metadata.UID, "the same pod, restarted by its kubelet")
	h.on(n2).requireLinkTo(t, again)
	requireNoAddressTwice(t, c, n2)
}

// nodeBootID is the boot id the view's node reports.
func (c *cluster) nodeBootID(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(c.mustKubectl(t, "get", "node", c.nodeName, "-o", "jsonpath={.status.nodeInfo.bootID}"))
}

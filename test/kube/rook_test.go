package kube

// A holder the way Rook (v1.9 to v1.15) made it, on a network whose chain
// ends in netns-pin with a `holders` rule for it.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// rookHolderDaemonSet is a holder DaemonSet shaped like Rook 1.15's
// csi-rbdplugin-holder: a shell that links its own netns into the rbd
// plugin's folder and sleeps, on the storage network without any claim.
// Busybox's ln spells --force as -f; the kubelet expands $(VAR) in
// commands, so the shell's $$ is written $$$$.
func (c *cluster) rookHolderDaemonSet(name, nadName, pluginDir, path string) map[string]any {
	labels := map[string]any{"app": name}
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": name, "namespace": pinNamespace},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": labels},
			// Rook's holders roll with maxUnavailable 1: the DaemonSet
			// controller then makes no new pod while the old one is
			// Terminating (it counts it as the node's pod), so the node
			// would have no holder while the old one drains. Surge, as in
			// deploy/holder-daemonset.yaml, is what an operator sets.
			"updateStrategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdate": map[string]any{"maxSurge": 1, "maxUnavailable": 0}},
			"template": map[string]any{
				"metadata": map[string]any{
					"labels":      labels,
					"annotations": map[string]any{"k8s.v1.cni.cncf.io/networks": `[{"name":"` + nadName + `","namespace":"` + pinNamespace + `"}]`},
				},
				"spec": map[string]any{
					// the link names a host PID
					"hostPID":                       true,
					"automountServiceAccountToken":  false,
					"terminationGracePeriodSeconds": 1,
					"containers": []any{map[string]any{
						"name": "holder", "image": c.env["KUBE_BUSYBOX_IMAGE"], "imagePullPolicy": "Never",
						"command":      []any{"/bin/sh", "-c", "ln -f -s /proc/$$$$/ns/net " + path + " && sleep infinity"},
						"volumeMounts": []any{map[string]any{"name": "plugin-dir", "mountPath": pluginDir}},
					}},
					"volumes": []any{map[string]any{
						"name": "plugin-dir", "hostPath": map[string]any{"path": pluginDir, "type": "DirectoryOrCreate"},
					}},
				},
			},
		},
	}
}

// Scenario 7: deleting a Rook-style holder while a client uses its netns
// keeps that netns with its interface and address; the DaemonSet's new
// holder serves new clients through Rook's path; the old one goes once
// unused.
func TestRookStyleHolder(t *testing.T) {
	c := requireCluster(t)
	suffix := host.RandHex(5)
	name := "csi-rbdplugin-holder-" + suffix
	clusterName := pinNamespace + "/rook-" + suffix
	nad := c.nad(t, "network-attachment-definition-rook-links.yaml", "public-net-"+suffix, func(_, pin map[string]any) {
		pin["holders"] = []any{map[string]any{"podNamespace": pinNamespace, "podName": name + "-*", "cluster": clusterName}}
	})
	pluginDir := filepath.Join(c.env["KUBELET_DIR"], "plugins", "rook-ceph.rbd.csi.ceph.com")
	rookPath := filepath.Join(pluginDir, pinNamespace+".net.ns")
	c.ensureNamespace(t, pinNamespace)
	c.apply(t, nad.object)
	t.Cleanup(func() {
		c.deleteAndWait(t, pinNamespace, "network-attachment-definitions.k8s.cni.cncf.io", nad.name, "")
	})
	c.apply(t, c.rookHolderDaemonSet(name, nad.name, pluginDir, rookPath))
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "daemonset", name, "app="+name) })

	old := c.waitRunning(t, pinNamespace, "app="+name)
	oldSB := c.sandboxOf(t, old)
	c.requirePinned(t, old, oldSB, clusterName, "active")
	oldIP := old.storageIP()
	require.NotEmpty(t, oldIP)
	// Rook's path leads into the holder's netns (whether the holder's own
	// ln or netns-pin wrote it last)
	require.True(t, host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		id, err := host.NSIDOf(rookPath)
		return err == nil && id == oldSB.netns
	}), "%s does not lead into the holder's netns: %s", rookPath, c.describePath(rookPath, old))
	cl := startClient(t, rookPath)
	require.Equal(t, oldSB.netns, cl.netns)

	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", old.Metadata.Name, "--wait=false")
	next := c.waitRunning(t, pinNamespace, "app="+name, old.Metadata.UID)
	nextSB := c.sandboxOf(t, next)
	c.requirePinned(t, next, nextSB, clusterName, "active")
	require.True(t, host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		id, err := host.NSIDOf(rookPath)
		return err == nil && id == nextSB.netns
	}), "%s does not lead into the new holder's netns", rookPath)
	newClient := startClient(t, rookPath)
	assert.Equal(t, nextSB.netns, newClient.netns, "a new client gets the new holder's netns")
	out := hosttest.MustRun(t, "nsenter", "--net="+rookPath, "--", "ip", "-o", "-4", "addr", "show", storageIf)
	assert.Contains(t, out, next.storageIP()+"/")

	// The old holder drains: Terminating, netns pinned with its interface.
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		return len(c.eventsOf(t, old, "FailedKillPod")) > 0
	}), "no FailedKillPod for the old Rook-style holder")
	_, present := c.podByUID(t, pinNamespace, "app="+name, old.Metadata.UID)
	assert.True(t, present, "the old holder stays Terminating while used")
	c.requirePinned(t, old, oldSB, clusterName, "draining")
	assert.Equal(t, []string{oldIP}, hosttest.AddrsIn(t, c.pinPath(oldSB), storageIf), "the old netns keeps its interface and address")
	assert.True(t, c.whereaboutsHas(t, old))
	evs := c.eventsOf(t, old, "FailedKillPod")
	assert.True(t, strings.Contains(evs[0].Message, "netns-pin: cluster "+clusterName), "event: %s", evs[0].Message)

	cl.stop(t)
	c.requireReleased(t, "app="+name, old, oldSB, time.Second, "the old Rook-style holder was not released once unused")
	c.requirePinned(t, next, nextSB, clusterName, "active")
	newClient.stop(t)
}

// describePath says where a Rook path leads and what the holder printed,
// for failure messages.
func (c *cluster) describePath(path string, p pod) string {
	target, err := os.Readlink(path)
	logs := c.kubectl("-n", p.Metadata.Namespace, "logs", p.Metadata.Name)
	return fmt.Sprintf("readlink: %q (%v); holder's output: %s%s", target, err, logs.Stdout, logs.Stderr)
}

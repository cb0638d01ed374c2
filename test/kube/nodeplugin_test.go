package kube

// ceph-csi's node plugin as its own holder (docs/operating.md, "Two
// modes"): a stand-in node plugin DaemonSet, shaped as ceph-csi's
// csi-rbdplugin (host network, hostPID), patched by the kustomize Component
// of deploy/nodeplugin/ as a user would (kubectl kustomize), on that
// Component's NetworkAttachmentDefinition ("links": [], a holder rule for
// the node plugin's pods). The client it made is a host process in its
// pod's netns, outside the container, as a kernel client is.

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/netns-pin/netns-pin/deploy"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// nodePluginSet is the stand-in node plugin, applied for one test and
// deleted (with its pods) when the test ends.
type nodePluginSet struct {
	c        *cluster
	name     string // csi-rbdplugin: the Component's patch targets it
	cluster  string // its holder rule's cluster key
	selector string
	nad      *storageNet
}

// newNodePluginSet builds the stand-in through deploy/nodeplugin with the
// cluster's kubectl kustomize, and applies it with the Component's NAD
// (patched to this node: names, addresses, folders, and the rule's
// podNamespace, the suite's holder namespace, where the node agent may
// lift finalizers).
func (c *cluster) newNodePluginSet(t *testing.T) *nodePluginSet {
	t.Helper()
	np := &nodePluginSet{c: c, name: "csi-rbdplugin", cluster: pinNamespace + "/rbd", selector: "app=csi-rbdplugin"}
	ds := c.kustomizeNodePlugin(t, np.name)

	suffix := host.RandHex(5)
	np.nad = c.nad(t, "nodeplugin/network-attachment-definition.yaml", "ceph-public-"+suffix, func(_, pin map[string]any) {
		links, ok := pin["links"].([]any)
		require.True(t, ok && len(links) == 0, `deploy/nodeplugin's NAD: "links": []`)
		for _, r := range pin["holders"].([]any) {
			r.(map[string]any)["podNamespace"] = pinNamespace
		}
		// Multus' libcni cache: under thick the sweeper finishes the
		// teardown from it
		pin["cacheDirs"] = []any{c.multusCacheDir()}
	})
	np.nad.object["metadata"].(map[string]any)["namespace"] = pinNamespace
	annots := get(ds, "spec", "template", "metadata", "annotations").(map[string]any)
	require.Equal(t, "ceph-public", annots["k8s.v1.cni.cncf.io/networks"], "the Component's annotation")
	annots["k8s.v1.cni.cncf.io/networks"] = np.nad.name

	c.ensureNamespace(t, pinNamespace)
	c.apply(t, np.nad.object)
	t.Cleanup(func() {
		c.deleteAndWait(t, pinNamespace, "network-attachment-definitions.k8s.cni.cncf.io", np.nad.name, "")
	})
	c.apply(t, ds)
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "daemonset", np.name, np.selector) })
	return np
}

// kustomizeNodePlugin runs kubectl kustomize on a kustomization of the
// stand-in DaemonSet name with deploy/nodeplugin as its component and
// returns the patched DaemonSet.
func (c *cluster) kustomizeNodePlugin(t *testing.T, name string) map[string]any {
	t.Helper()
	dir := t.TempDir()
	component, err := filepath.Rel(dir, filepath.Join(c.repo, "deploy", "nodeplugin"))
	require.NoError(t, err)
	base := map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": name, "namespace": pinNamespace},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name}},
				"spec": map[string]any{
					// ceph-csi's own node plugin manifests: host network and
					// hostPID, which the Component turns off.
					"hostNetwork": true, "hostPID": true, "dnsPolicy": "ClusterFirstWithHostNet",
					"automountServiceAccountToken":  false,
					"terminationGracePeriodSeconds": 5,
					"tolerations":                   []any{map[string]any{"operator": "Exists"}},
					"containers": []any{map[string]any{
						// sleep as PID 1 ignores SIGTERM: the kubelet kills
						// it at the end of the grace period.
						"name": "csi-rbdplugin", "image": c.env["KUBE_BUSYBOX_IMAGE"], "imagePullPolicy": "Never",
						"command": []any{"sleep", "3600"},
					}},
				},
			},
		},
	}
	writeYAML(t, filepath.Join(dir, "csi-rbdplugin.yaml"), base)
	writeYAML(t, filepath.Join(dir, "kustomization.yaml"), map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources": []any{"csi-rbdplugin.yaml"}, "components": []any{component},
	})
	out := c.mustKubectl(t, "kustomize", dir)
	built := filepath.Join(dir, "built.yaml")
	require.NoError(t, os.WriteFile(built, []byte(out), 0o644))
	objs, err := deploy.Objects(built)
	require.NoError(t, err)
	var ds map[string]any
	kinds := []string{}
	for _, o := range objs {
		kinds = append(kinds, str(o, "kind"))
		if str(o, "kind") == "DaemonSet" {
			ds = o
		}
	}
	require.ElementsMatch(t, []string{"DaemonSet", "NetworkAttachmentDefinition"}, kinds, "kubectl kustomize:\n%s", out)
	spec := get(ds, "spec", "template", "spec").(map[string]any)
	require.Equal(t, false, spec["hostNetwork"], "the Component turned the host network off:\n%s", out)
	require.Equal(t, false, spec["hostPID"])
	require.Equal(t, "ClusterFirst", spec["dnsPolicy"])
	require.Equal(t, []any{pinFinalizer}, get(ds, "spec", "template", "metadata", "finalizers"))
	require.Equal(t, 1, get(ds, "spec", "updateStrategy", "rollingUpdate", "maxSurge"))
	return ds
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// waitPlugin waits for a Ready node plugin pod other than those in skip,
// pinned active with no link.
func (np *nodePluginSet) waitPlugin(t *testing.T, skip ...string) holder {
	t.Helper()
	p := np.c.waitRunning(t, pinNamespace, np.selector, skip...)
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer, "the template carries the finalizer")
	sb := np.c.sandboxOf(t, p)
	r := np.c.requirePinned(t, p, sb, np.cluster, "active")
	assert.Empty(t, r.Links, "links: [] makes no link")
	_, err := os.Lstat(np.c.linkOf(np.cluster))
	assert.True(t, os.IsNotExist(err), "no default link for %s", np.cluster)
	ho := holder{pod: p, sb: sb, ip: p.storageIP()}
	require.NotEmpty(t, ho.ip, "no %s address in the network-status of %s", storageIf, p)
	assert.Equal(t, []string{ho.ip}, hosttest.AddrsIn(t, sb.netnsPath, storageIf), "%s of %s", storageIf, p)
	return ho
}

// requireOneHolderPerAddress checks that no storage address is held by two
// pods: the network-status of every pod of the namespace, whereabouts'
// allocations and the pinned netns' own interfaces agree.
func (c *cluster) requireOneHolderPerAddress(t *testing.T, pinned ...holder) {
	t.Helper()
	owner := map[string]string{}
	var all struct {
		Items []pod `json:"items"`
	}
	c.getJSON(t, &all, "-n", pinNamespace, "get", "pods")
	for _, p := range all.Items {
		ip := p.storageIP()
		if ip == "" {
			continue
		}
		if o, ok := owner[ip]; ok && o != p.String() {
			assert.Failf(t, "address held by two pods", "%s: %s and %s", ip, o, p)
		}
		owner[ip] = p.String()
	}
	for _, pool := range c.ipPools(t) {
		for _, a := range pool.Spec.Allocations {
			for ip, o := range owner {
				if o == a.PodRef {
					delete(owner, ip) // each pod's one address is allocated to it
				}
			}
		}
	}
	assert.Empty(t, owner, "pods whose storage address whereabouts no longer allocates to them")
	for _, h := range pinned {
		assert.Equal(t, []string{h.ip}, hosttest.AddrsIn(t, c.pinPath(h.sb), storageIf), "the pinned netns of %s", h.pod)
	}
}

// requireRefused waits for the node plugin's DEL to be refused while its
// client lives. Under Multus thin the kubelet's KillPod fails with
// netns-pin's refusal, and it retries. Under Multus thick multus-shim
// answers every DEL with success: the runtime drops its netns handle and
// nothing will DEL again; the refusal captured the teardown (Multus
// daemon's libcni cache entry of the chain) and the sweeper marks it
// abandoned, to finish it once the client is gone.
func (np *nodePluginSet) requireRefused(t *testing.T, h holder) {
	t.Helper()
	c := np.c
	if !c.thick() {
		require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
			return len(c.eventsOf(t, h.pod, "FailedKillPod")) > 0
		}), "no FailedKillPod event for the node plugin %s", h.pod)
		evs := c.eventsOf(t, h.pod, "FailedKillPod")
		assert.Contains(t, evs[0].Message, "netns-pin: cluster "+np.cluster+": holder pod "+h.pod.String()+" is still in use by")
		t.Logf("FailedKillPod: %s", evs[0].Message)
		return
	}
	var raw map[string]any
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool {
		raw = readRawRecord(t, c.recordPath(h.sb))
		return raw != nil && raw["state"] == "draining" && raw["abandoned"] == true
	}), "the node plugin's DEL was not refused and then marked abandoned by the sweeper: %v", raw)
	assert.Equal(t, filepath.Join(c.multusCacheDir(), "results", np.nad.name+"-"+h.sb.id+"-"+storageIf), str(raw, "teardown", "cacheFile"),
		"the refusal captured multus-daemon's cache entry of the chain")
	assert.Empty(t, c.eventsOf(t, h.pod, "FailedKillPod"), "multus-shim reports every DEL a success")
	t.Logf("%s: refused, its teardown captured (%s), abandoned by the runtime", h.pod, str(raw, "teardown", "cacheFile"))
}

// The node plugin rolled, and deleted outright, while a client it made
// lives in its netns: `kubectl rollout restart` brings the new pod up
// (Ready) while the old pod's netns, address and object stay (whereabouts'
// controller and reconciler live: the address is never handed to another
// pod); the client leaves and the old pod, its pin and its lease go. Then
// the new pod, force-deleted with a client of its own, the same.
func TestNodePluginAsItsOwnHolder(t *testing.T) {
	c := requireCluster(t)
	np := c.newNodePluginSet(t)
	old := np.waitPlugin(t)
	lease := c.allocationsOf(t, old.pod)
	require.Len(t, lease, 1, "whereabouts' allocation of %s", old.pod)
	cl := startClient(t, old.sb.netnsPath)
	require.Equal(t, old.sb.netns, cl.netns)

	// 1. rollout restart: surge, then the old pod is deleted and stays
	start := time.Now()
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+np.name)
	next := np.waitPlugin(t, old.pod.Metadata.UID)
	t.Logf("new node plugin %s Ready %s after the restart", next.pod, time.Since(start).Round(time.Millisecond))
	assert.NotEqual(t, old.sb.netns, next.sb.netns, "the new pod has its own netns")
	assert.NotEqual(t, old.ip, next.ip)
	require.True(t, host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		p, ok := c.podByUID(t, pinNamespace, np.selector, old.pod.Metadata.UID)
		return ok && p.Metadata.DeletionTimestamp != nil
	}), "the old node plugin %s was not deleted after the new one was Ready", old.pod)
	np.requireRefused(t, old)

	p, ok := c.podByUID(t, pinNamespace, np.selector, old.pod.Metadata.UID)
	require.True(t, ok, "the old node plugin's object must stay while its client lives")
	assert.NotNil(t, p.Metadata.DeletionTimestamp)
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)
	c.requirePinned(t, old.pod, old.sb, np.cluster, "draining")
	assert.Equal(t, old.sb.netns, cl.netns)
	c.requireOneHolderPerAddress(t, old, next)
	c.waitReconcilerRun(t)
	assert.Equal(t, lease, c.allocationsOf(t, old.pod), "whereabouts keeps the draining node plugin's lease")
	assert.Empty(t, c.eventsOf(t, old.pod, "IPAddressGarbageCollected"), "whereabouts' controller freed the lease")
	c.requireOneHolderPerAddress(t, old, next)

	// 2. the client leaves: the old pod, its pin and its lease go
	cl.stop(t)
	took := c.requireReleased(t, np.selector, old.pod, old.sb, 500*time.Millisecond,
		"the old node plugin, its pin or its lease is still there after its client left")
	t.Logf("old node plugin released and gone %s after its client left", took.Round(time.Millisecond))
	c.requirePinned(t, next.pod, next.sb, np.cluster, "active")
	c.requireOneHolderPerAddress(t, next)

	// 3. the node plugin deleted outright while in use
	cl = startClient(t, next.sb.netnsPath)
	require.Equal(t, next.sb.netns, cl.netns)
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", next.pod.Metadata.Name, "--force", "--grace-period=0", "--wait=false")
	third := np.waitPlugin(t, old.pod.Metadata.UID, next.pod.Metadata.UID)
	if c.thick() {
		np.requireRefused(t, next)
	}
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := c.readRecord(t, next.sb)
		return rec != nil && rec.State == "draining"
	}), "the deleted node plugin's record did not turn draining")
	gone, ok := c.podNamed(t, next.pod)
	require.True(t, ok, "the force-deleted node plugin's object must stay while its pin does")
	assert.NotNil(t, gone.Metadata.DeletionTimestamp)
	assert.True(t, c.whereaboutsHas(t, next.pod), "whereabouts keeps the deleted node plugin's lease")
	assert.NotEqual(t, next.ip, third.ip)
	c.requireOneHolderPerAddress(t, next, third)
	cl.stop(t)
	took = c.requireReleased(t, np.selector, next.pod, next.sb, 250*time.Millisecond,
		"the force-deleted node plugin, its pin or its lease is still there after its client left")
	t.Logf("force-deleted node plugin released and gone %s after its client left", took.Round(time.Millisecond))
	c.requirePinned(t, third.pod, third.sb, np.cluster, "active")
	assert.False(t, slices.ContainsFunc(c.pods(t, pinNamespace, np.selector), func(p pod) bool {
		return p.Metadata.UID == next.pod.Metadata.UID || p.Metadata.UID == old.pod.Metadata.UID
	}))
}

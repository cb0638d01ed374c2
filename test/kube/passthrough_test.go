package kube

// Pods that are no holders on the storage network: netns-pin is not there
// for them.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// appPod is a busybox pod on the storage network, with no claim.
func (c *cluster) appPod(ns, name, nadRef string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels":      map[string]any{"app": name},
			"annotations": map[string]any{"k8s.v1.cni.cncf.io/networks": nadRef},
		},
		"spec": map[string]any{
			"automountServiceAccountToken":  false,
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name": "app", "image": c.env["KUBE_BUSYBOX_IMAGE"], "imagePullPolicy": "Never",
				"command": []any{"sleep", "3600"},
			}},
		},
	}
}

// Scenario 6: pods that are no holders, in the holders' namespace and in
// another one, on the same NetworkAttachmentDefinition as a running holder:
// they start with their storage address, leave no pin, no record and no
// link, and stop (address released) as fast as without netns-pin.
func TestNonHolderPodsPassThrough(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	ho := h.waitHolder(t)
	records, err := os.ReadDir(filepath.Join(c.stateDir, "records"))
	require.NoError(t, err)

	const otherNS = "apps"
	c.ensureNamespace(t, otherNS)
	for _, ns := range []string{pinNamespace, otherNS} {
		name := "app-" + host.RandHex(5)
		c.apply(t, c.appPod(ns, name, `[{"name":"`+h.nad.name+`","namespace":"`+pinNamespace+`"}]`))
		p := c.waitRunning(t, ns, "app="+name)
		ip := p.storageIP()
		require.NotEmpty(t, ip, "%s has no %s address", p, storageIf)
		sb := c.sandboxOf(t, p)
		assert.Equal(t, []string{ip}, hosttest.AddrsIn(t, sb.netnsPath, storageIf))
		assert.Nil(t, c.readRecord(t, sb), "no record for %s", p)
		assert.True(t, c.unpinned(sb), "no pin for %s", p)
		after, err := os.ReadDir(filepath.Join(c.stateDir, "records"))
		require.NoError(t, err)
		assert.Len(t, after, len(records), "records: only the holder's")
		h.requireLinkTo(t, ho)

		start := time.Now()
		c.mustKubectl(t, "-n", ns, "delete", "pod", name, "--wait=true", "--timeout=60s")
		t.Logf("%s deleted in %s", p, time.Since(start).Round(time.Millisecond))
		assert.Empty(t, c.eventsOf(t, p, "FailedKillPod"))
		assert.True(t, host.Poll(30*time.Second, 250*time.Millisecond, func() bool { return !c.whereaboutsHas(t, p) }),
			"whereabouts released %s of %s", ip, p)
	}
	h.requireLinkTo(t, ho)
	c.requirePinned(t, ho.pod, ho.sb, h.cluster, "active")
}

package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/deploy"
)

// nodePluginComponent is deploy/nodeplugin/kustomization.yaml, decoded.
type nodePluginComponent struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
	Patches    []struct {
		Path   string `yaml:"path"`
		Target struct {
			Group, Version, Kind, Name string
		} `yaml:"target"`
	} `yaml:"patches"`
}

// The node plugin as its own holder: the Component patches exactly ceph-csi's
// node plugin DaemonSets onto the storage network, surge-first, with the
// finalizer, and without host network or hostPID; its NAD pins their pods
// with no link.
func TestNodePluginComponent(t *testing.T) {
	dir := "nodeplugin"
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k nodePluginComponent
	require.NoError(t, yaml.Unmarshal(raw, &k))
	assert.Equal(t, "kustomize.config.k8s.io/v1alpha1", k.APIVersion)
	assert.Equal(t, "Component", k.Kind)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	used := map[string]bool{"kustomization.yaml": true}
	for _, r := range k.Resources {
		used[r] = true
	}
	require.Len(t, k.Patches, 1)
	p := k.Patches[0]
	used[p.Path] = true
	for _, f := range files {
		assert.True(t, used[filepath.Base(f)], "%s is not used by %s/kustomization.yaml", f, dir)
	}

	// kustomize anchors a target's name (types.SelectorRegex).
	target := regexp.MustCompile("^(?:" + p.Target.Name + ")$")
	assert.Equal(t, "apps/v1 DaemonSet", p.Target.Group+"/"+p.Target.Version+" "+p.Target.Kind)
	for _, name := range []string{"csi-rbdplugin", "csi-cephfsplugin"} {
		assert.True(t, target.MatchString(name), "the patch targets %s", name)
	}
	for _, name := range []string{"csi-rbdplugin-provisioner", "csi-nfsplugin", "csi-holder-my-cluster"} {
		assert.False(t, target.MatchString(name), "the patch leaves %s alone", name)
	}

	patch, err := deploy.Objects(filepath.Join(dir, p.Path))
	require.NoError(t, err)
	require.Len(t, patch, 1)
	ds := object{file: p.Path, raw: patch[0]}
	assert.Equal(t, "DaemonSet", ds.kind())
	assert.Equal(t, "RollingUpdate", str(ds.raw, "spec", "updateStrategy", "type"))
	assert.Equal(t, 1, get(ds.raw, "spec", "updateStrategy", "rollingUpdate", "maxSurge"))
	assert.Equal(t, 0, get(ds.raw, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"))
	assert.Equal(t, []any{"netns-pin.io/pin"}, get(ds.raw, "spec", "template", "metadata", "finalizers"))
	spec := podSpec(ds)
	assert.Equal(t, false, spec["hostNetwork"], "set false: ceph-csi's own manifests set it true")
	assert.Equal(t, false, spec["hostPID"], "set false: ceph-csi's own manifests set it true")
	assert.Equal(t, "ClusterFirst", spec["dnsPolicy"], "ceph-csi's ClusterFirstWithHostNet is for the host network")

	nadFile := k.Resources[0]
	nads, err := deploy.Objects(filepath.Join(dir, nadFile))
	require.NoError(t, err)
	require.Len(t, nads, 1)
	nad := object{file: nadFile, raw: nads[0]}
	assert.Equal(t, "NetworkAttachmentDefinition", nad.kind())
	assert.Equal(t, str(ds.raw, "spec", "template", "metadata", "annotations", "k8s.v1.cni.cncf.io/networks"), nad.name(),
		"the pods select the Component's NAD, in their own namespace")
	c := nadConfig(t, nad, nil)
	assert.Empty(t, c.Links, `"links": [] is no link`)
	ns := nad.namespace()
	for _, tc := range []struct {
		pod     string
		cluster string // "" when no holder
	}{
		{"csi-rbdplugin-x7k2p", ns + "/rbd"},
		{"csi-cephfsplugin-9qz4m", ns + "/cephfs"},
		{"csi-rbdplugin-provisioner-5d8f9c7b6-x7k2p", ""},
		{"csi-cephfsplugin-provisioner-7c9f8b5d4-9qz4m", ""},
		{"csi-rbdplugin", ""},
	} {
		cl, ok, err := c.Holder(conf.Pod{Namespace: ns, Name: tc.pod, UID: "0b7c6f0e-1b1e-4c55-9b53-5f7d2f1a9c01"})
		require.NoError(t, err)
		assert.Equal(t, tc.cluster != "", ok, "%s a holder", tc.pod)
		if ok {
			assert.Equal(t, tc.cluster, cl.String())
			links, err := c.LinkPaths(cl)
			require.NoError(t, err)
			assert.Empty(t, links, "%s: no link", tc.pod)
		}
	}
	_, ok, err := c.Holder(conf.Pod{Namespace: "default", Name: "csi-rbdplugin-x7k2p"})
	require.NoError(t, err)
	assert.False(t, ok, "a pod of that name in another namespace is no holder")
}

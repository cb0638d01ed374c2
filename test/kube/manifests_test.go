package kube

// The manifests of deploy/, as a user applies them, with only names,
// addresses and node paths patched to this cluster.

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/deploy"
)

// manifest returns the single object of deploy/<file>.
func (c *cluster) manifest(t *testing.T, file string) map[string]any {
	t.Helper()
	objs, err := deploy.Objects(filepath.Join(c.repo, "deploy", file))
	require.NoError(t, err)
	require.Len(t, objs, 1, "deploy/%s: one object", file)
	return objs[0]
}

// storageNet is a NetworkAttachmentDefinition made from one of deploy/'s.
type storageNet struct {
	name   string
	object map[string]any
	config map[string]any // spec.config, decoded
}

// nad returns deploy/<file> as NetworkAttachmentDefinition name: the
// macvlan master is this node's storage link, the whereabouts range this
// cluster's storage subnet (its datastore is named in the node's
// whereabouts.conf), and netns-pin's folders are the node's (pinDir under the
// kubelet's plugins folder, as the default is under /var/lib/kubelet).
// edit, when not nil, changes the main plugin's and netns-pin's entries
// further.
func (c *cluster) nad(t *testing.T, file, name string, edit func(main, pin map[string]any)) *storageNet {
	t.Helper()
	obj := c.manifest(t, file)
	meta := obj["metadata"].(map[string]any)
	meta["name"] = name
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(str(obj, "spec", "config")), &cfg))
	cfg["name"] = name
	plugins := cfg["plugins"].([]any)
	main := plugins[0].(map[string]any)
	main["master"] = c.env["KUBE_STORAGE_MASTER"]
	ipam := main["ipam"].(map[string]any)
	subnet := c.env["KUBE_STORAGE_SUBNET"]
	ipam["range"] = subnet
	if _, ok := ipam["exclude"]; ok {
		// the first /28, as deploy/ excludes the first /28 of its range
		ipam["exclude"] = []any{strings.TrimSuffix(subnet, "/24") + "/28"}
	}
	ipam["configuration_path"] = c.env["KUBE_WHEREABOUTS_CONF"]
	pin := plugins[len(plugins)-1].(map[string]any)
	require.Equal(t, "netns-pin", pin["type"], "deploy/%s: netns-pin last", file)
	pin["pinDir"] = c.pinDir
	pin["stateDir"] = c.stateDir
	if _, ok := pin["logFile"]; ok {
		pin["logFile"] = filepath.Join(c.env["KUBE_DIR"], "logs", "netns-pin.log")
	}
	if links, ok := pin["links"].([]any); ok {
		for i, l := range links {
			// Rook's paths under /var/lib/kubelet: this node's kubelet folder
			links[i] = strings.Replace(l.(string), "/var/lib/kubelet/", c.env["KUBELET_DIR"]+"/", 1)
		}
	}
	if edit != nil {
		edit(main, pin)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	obj["spec"].(map[string]any)["config"] = string(b)
	return &storageNet{name: name, object: obj, config: cfg}
}

// holderDaemonSet returns deploy/holder-daemonset.yaml as DaemonSet name of
// cluster (namespace/name) on NetworkAttachmentDefinition nadName.
func (c *cluster) holderDaemonSet(t *testing.T, name, nadName, clusterName string) map[string]any {
	t.Helper()
	ds := c.manifest(t, "holder-daemonset.yaml")
	ds["metadata"].(map[string]any)["name"] = name
	instance := strings.ReplaceAll(name, "/", "-")
	setLabel := func(labels any) {
		labels.(map[string]any)["app.kubernetes.io/instance"] = instance
	}
	setLabel(get(ds, "metadata", "labels"))
	setLabel(get(ds, "spec", "selector", "matchLabels"))
	setLabel(get(ds, "spec", "template", "metadata", "labels"))
	annots := get(ds, "spec", "template", "metadata", "annotations").(map[string]any)
	var elems []map[string]any
	require.NoError(t, json.Unmarshal([]byte(annots["k8s.v1.cni.cncf.io/networks"].(string)), &elems))
	require.Len(t, elems, 1)
	elems[0]["name"] = nadName
	elems[0]["cni-args"] = map[string]any{"pinCluster": clusterName}
	b, err := json.Marshal(elems)
	require.NoError(t, err)
	annots["k8s.v1.cni.cncf.io/networks"] = string(b)
	return ds
}

// linkOf is the cluster's link under pinDir (the NAD's default links).
func (c *cluster) linkOf(clusterName string) string {
	return filepath.Join(c.pinDir, clusterName+".net")
}

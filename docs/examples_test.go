package docs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/deploy"
)

// block is a fenced code block of a markdown file.
type block struct {
	lang, text string
	line       int
}

var fenceOpenRE = regexp.MustCompile("^```([a-z]*)\\s*$")

// fencedBlocks returns the top-level ``` blocks of a markdown text.
func fencedBlocks(text string) []block {
	var out []block
	var cur *block
	for i, ln := range lines(text) {
		switch {
		case cur == nil:
			if m := fenceOpenRE.FindStringSubmatch(ln); m != nil {
				cur = &block{lang: m[1], line: i + 1}
			}
		case strings.TrimSpace(ln) == "```":
			out = append(out, *cur)
			cur = nil
		default:
			cur.text += ln + "\n"
		}
	}
	return out
}

// readmeExamples sorts the README's json and yaml examples by what they
// are.
type readmeExamples struct {
	conflists   []block          // {"plugins": [...]}
	nads        []map[string]any // NetworkAttachmentDefinitions
	annotations []string         // k8s.v1.cni.cncf.io/networks values
	cephCSI     []block          // ceph-csi config.json
}

func loadReadmeExamples(t *testing.T) readmeExamples {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	var ex readmeExamples
	for _, b := range fencedBlocks(string(data)) {
		switch b.lang {
		case "json":
			var v any
			require.NoError(t, json.Unmarshal([]byte(b.text), &v), "README.md:%d: not JSON", b.line)
			switch v.(type) {
			case map[string]any:
				ex.conflists = append(ex.conflists, b)
			case []any:
				ex.cephCSI = append(ex.cephCSI, b)
			}
		case "yaml":
			var doc map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(b.text), &doc), "README.md:%d: not YAML", b.line)
			if deploy.String(doc, "kind") == "NetworkAttachmentDefinition" {
				ex.nads = append(ex.nads, doc)
				continue
			}
			a := deploy.String(doc, "metadata", "annotations", "k8s.v1.cni.cncf.io/networks")
			require.NotEmpty(t, a, "README.md:%d: a YAML example that is neither a NetworkAttachmentDefinition nor a pod template's network annotation", b.line)
			ex.annotations = append(ex.annotations, a)
		}
	}
	return ex
}

// deployObject is the one object of a manifest of deploy/.
func deployObject(t *testing.T, file string) map[string]any {
	t.Helper()
	objs, err := deploy.Objects(filepath.Join("..", "deploy", file))
	require.NoError(t, err)
	require.Len(t, objs, 1, "%s", file)
	return objs[0]
}

// asJSON is a JSON text decoded, for comparisons that ignore layout.
func asJSON(t *testing.T, text string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(text), &v), "%s", text)
	return v
}

// The README shows deploy/'s NetworkAttachmentDefinition, the holder
// DaemonSet's annotation and ceph-csi's config.json as they are in
// deploy/ (layout aside), so what a user copies from the README is what
// deploy/'s own tests check.
func TestReadmeExamplesAreDeploysManifests(t *testing.T) {
	ex := loadReadmeExamples(t)

	require.Len(t, ex.nads, 1, "README: one NetworkAttachmentDefinition")
	want := deployObject(t, "network-attachment-definition.yaml")
	got := ex.nads[0]
	assert.Equal(t, want["apiVersion"], got["apiVersion"])
	assert.Equal(t, want["metadata"], got["metadata"])
	assert.Equal(t, asJSON(t, deploy.String(want, "spec", "config")), asJSON(t, deploy.String(got, "spec", "config")),
		"README's NetworkAttachmentDefinition is deploy/network-attachment-definition.yaml's")

	require.Len(t, ex.annotations, 1, "README: one holder annotation")
	holder := deployObject(t, "holder-daemonset.yaml")
	assert.Equal(t, deploy.String(holder, "spec", "template", "metadata", "annotations", "k8s.v1.cni.cncf.io/networks"),
		ex.annotations[0], "README's holder annotation is deploy/holder-daemonset.yaml's")

	require.Len(t, ex.cephCSI, 1, "README: one ceph-csi config.json")
	cm := deployObject(t, "ceph-csi-config.yaml")
	assert.Equal(t, asJSON(t, deploy.String(cm, "data", "config.json")), asJSON(t, ex.cephCSI[0].text),
		"README's config.json is deploy/ceph-csi-config.yaml's")
}

// Every configuration example of the README passes netns-pin's own
// validation, with netns-pin last in the chain; the holders they make
// (by rule or by the annotation's claim) are of the clusters whose links
// config.json names.
func TestReadmeExamplesValidate(t *testing.T) {
	ex := loadReadmeExamples(t)
	require.NotEmpty(t, ex.conflists, "README: a conflist example")

	type example struct {
		name   string
		config []byte // a conflist
		ns     string // namespace of the pods it serves ("" for a conflist)
	}
	var examples []example
	for _, b := range ex.conflists {
		examples = append(examples, example{name: "conflist at README.md:" + itoa(b.line), config: []byte(b.text)})
	}
	for _, nad := range ex.nads {
		examples = append(examples, example{
			name:   "NetworkAttachmentDefinition " + deploy.String(nad, "metadata", "name"),
			config: []byte(deploy.String(nad, "spec", "config")),
			ns:     deploy.String(nad, "metadata", "namespace"),
		})
	}

	// The paths config.json points ceph-csi at.
	var clusters []struct {
		RBD    struct{ NetNamespaceFilePath string } `json:"rbd"`
		CephFS struct{ NetNamespaceFilePath string } `json:"cephFS"`
	}
	require.Len(t, ex.cephCSI, 1)
	require.NoError(t, json.Unmarshal([]byte(ex.cephCSI[0].text), &clusters))
	require.NotEmpty(t, clusters)

	// The claims of the annotation: network name -> claimed cluster.
	claims := map[string]string{}
	for _, a := range ex.annotations {
		var elems []struct {
			Name    string            `json:"name"`
			CNIArgs map[string]string `json:"cni-args"`
		}
		require.NoError(t, json.Unmarshal([]byte(a), &elems), "annotation %s", a)
		for _, e := range elems {
			claims[e.Name] = e.CNIArgs["pinCluster"]
		}
	}

	for _, e := range examples {
		t.Run(e.name, func(t *testing.T) {
			var list struct {
				Name    string           `json:"name"`
				Plugins []map[string]any `json:"plugins"`
			}
			require.NoError(t, json.Unmarshal(e.config, &list))
			require.NotEmpty(t, list.Plugins)
			assert.Equal(t, "netns-pin", list.Plugins[len(list.Plugins)-1]["type"], "netns-pin must be the last plugin")
			entry, err := conf.PluginEntry(e.config)
			require.NoError(t, err)
			c, err := conf.Parse(entry)
			require.NoError(t, err, "netns-pin rejects the example")

			// The clusters of this example's holders.
			var holders []conf.Cluster
			for _, r := range c.Holders {
				cl, err := conf.ParseCluster(r.Cluster)
				require.NoError(t, err, "the README's rules name their cluster")
				pod := conf.Pod{Namespace: r.PodNamespace, Name: strings.ReplaceAll(r.PodName, "*", "x7k2p")}
				got, ok, err := c.Holder(pod)
				require.NoError(t, err)
				require.True(t, ok, "pod %s matches the rule %+v", pod, r)
				assert.Equal(t, cl, got)
				holders = append(holders, got)
			}
			// Multus hands a claim to the networks of a
			// NetworkAttachmentDefinition, not to a conflist.
			if claim := claims[list.Name]; claim != "" && e.ns != "" {
				claimed := withClaim(t, entry, claim)
				got, ok, err := claimed.Holder(conf.Pod{Namespace: e.ns, Name: "csi-holder-my-cluster-x7k2p"})
				require.NoError(t, err, "the annotation's claim is refused by %s", e.name)
				require.True(t, ok)
				holders = append(holders, got)
			}
			require.NotEmpty(t, holders, "the example makes no holder")

			var links []string
			for _, cl := range holders {
				ls, err := c.LinkPaths(cl)
				require.NoError(t, err)
				links = append(links, ls...)
			}
			for _, cl := range clusters {
				assert.Contains(t, links, cl.RBD.NetNamespaceFilePath, "config.json's rbd path is a link of %s", e.name)
				assert.Contains(t, links, cl.CephFS.NetNamespaceFilePath, "config.json's cephFS path is a link of %s", e.name)
			}
		})
	}
}

// withClaim parses entry with args.cni.pinCluster set to claim, as Multus
// hands a network selection element's cni-args to the plugin.
func withClaim(t *testing.T, entry []byte, claim string) *conf.Config {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(entry, &m))
	m["args"] = map[string]any{"cni": map[string]any{"pinCluster": claim}}
	js, err := json.Marshal(m)
	require.NoError(t, err)
	c, err := conf.Parse(js)
	require.NoError(t, err)
	return c
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

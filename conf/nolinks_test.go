package conf

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A missing links is the default link, an empty one no link at all (a node
// plugin as its own holder), and a given one exactly what it lists.
func TestLinksMissingEmptyGiven(t *testing.T) {
	cl := Cluster{"rook-ceph", "my-cluster"}
	rule := `"holders":[{"podNamespace":"rook-ceph","podName":"csi-rbdplugin-*","cluster":"rook-ceph/my-cluster"}]`
	for _, tc := range []struct {
		name, links string
		want        []string
	}{
		{"missing", ``, []string{DefaultPinDir + "/rook-ceph/my-cluster.net"}},
		{"null", `"links":null,`, []string{DefaultPinDir + "/rook-ceph/my-cluster.net"}},
		{"empty", `"links":[],`, []string{}},
		{"given", `"links":["/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/{{.Namespace}}.net.ns"],`,
			[]string{"/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/rook-ceph.net.ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"ceph-public","type":"netns-pin",` + tc.links + rule + `}`))
			require.NoError(t, err)
			links, err := c.LinkPaths(cl)
			require.NoError(t, err)
			assert.Equal(t, tc.want, links)
			got, ok, err := c.Holder(Pod{Namespace: "rook-ceph", Name: "csi-rbdplugin-x7k2p"})
			require.NoError(t, err)
			assert.True(t, ok, "the rule matches the node plugin's pods with or without links")
			assert.Equal(t, cl, got)
		})
	}
}

// The same through a NetworkAttachmentDefinition, as an operator's
// --conf reads it: the empty list survives PluginEntry's re-encoding.
func TestLinksEmptyThroughNAD(t *testing.T) {
	nad := `{"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"name\":\"ceph-public\",\"plugins\":[{\"type\":\"macvlan\"},{\"type\":\"netns-pin\",\"links\":[]}]}"}}`
	entry, err := PluginEntry([]byte(nad))
	require.NoError(t, err)
	c, err := Parse(entry)
	require.NoError(t, err)
	assert.Empty(t, c.Links)
	links, err := c.LinkPaths(Cluster{"a", "b"})
	require.NoError(t, err)
	assert.Empty(t, links)
}

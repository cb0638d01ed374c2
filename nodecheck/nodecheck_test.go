package nodecheck

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		levels []Level
		code   int
		result string
	}{
		{nil, ExitOK, "ok"},
		{[]Level{OK, Info, Warning}, ExitOK, "ok"},
		{[]Level{OK, Unknown}, ExitUnknown, "incomplete"},
		{[]Level{Unknown, Error, OK}, ExitProblems, "problems"},
	} {
		r := &Report{}
		for _, l := range tc.levels {
			r.add(Finding{Check: "x", Level: l, What: string(l)})
		}
		r.finish()
		assert.Equal(t, tc.code, r.ExitCode(), "%v", tc.levels)
		assert.Equal(t, tc.result, r.Result, "%v", tc.levels)
	}
}

// The table keeps its columns aligned across fixes, and carries every
// finding and fix the JSON does.
func TestReportRendering(t *testing.T) {
	r := &Report{}
	r.add(Finding{Check: "pinDir", Level: Error, Where: "/var/lib/kubelet/plugins/netns-pin", What: "not shared", Fix: "mount --make-rshared /"})
	r.add(Finding{Check: "sweeper", Level: OK, Where: "/s", What: "running"})
	r.finish()
	var table bytes.Buffer
	require.NoError(t, r.WriteTable(&table))
	lines := strings.Split(table.String(), "\n")
	col := strings.Index(lines[0], "FINDING")
	require.Positive(t, col)
	assert.Equal(t, col, strings.Index(lines[1], "not shared"))
	assert.Equal(t, col, strings.Index(lines[2], "-> mount --make-rshared /"))
	assert.Equal(t, col, strings.Index(lines[3], "running"))
	assert.Contains(t, table.String(), "NOT set up right: 1 error(s)")
	var js bytes.Buffer
	require.NoError(t, r.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Equal(t, *r, back)
}

func TestRookOldLink(t *testing.T) {
	assert.True(t, rookOldLink("/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/rook-ceph.net.ns"))
	assert.True(t, rookOldLink("/var/lib/kubelet/plugins/openshift-storage.cephfs.csi.ceph.com/openshift-storage.net.ns"))
	assert.False(t, rookOldLink("/var/lib/kubelet/plugins/netns-pin/rook-ceph/my-cluster.net"))
	assert.False(t, rookOldLink("/var/lib/kubelet/plugins/other/rook-ceph.net.ns"))
}

// config.json, or its ConfigMap as `kubectl get -o json` prints it.
func TestReadCephCSIConfig(t *testing.T) {
	dir := t.TempDir()
	list := `[{"clusterID":"a","rbd":{"netNamespaceFilePath":"/x"},"cephFS":{"netNamespaceFilePath":"/y"},"nfs":{"netNamespaceFilePath":"/z"}}]`
	cm, err := json.Marshal(map[string]any{"kind": "ConfigMap", "data": map[string]string{"config.json": list}})
	require.NoError(t, err)
	for name, data := range map[string]string{"config.json": list, "cm.json": string(cm)} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
		es, err := readCephCSIConfig(p)
		require.NoError(t, err, name)
		require.Len(t, es, 1)
		assert.Equal(t, "/x", es[0].RBD.NetNamespaceFilePath)
		assert.Equal(t, "/y", es[0].CephFS.NetNamespaceFilePath)
		assert.Equal(t, "/z", es[0].NFS.NetNamespaceFilePath)
	}
	p := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"clusterID":"a"}`), 0o644))
	_, err = readCephCSIConfig(p)
	assert.ErrorContains(t, err, "not ceph-csi's config.json")
}

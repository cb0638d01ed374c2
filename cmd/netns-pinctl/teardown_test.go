package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// The chain DEL of an abandoned attachment is libcni's DelNetworkList: each
// plugin before netns-pin gets its own configuration with
// the list's name and version, the cached result as prevResult, the
// capability arguments it declares, and the cached CNI_ARGS; in reverse
// order, stopping at the first failure. The plugins here record what they
// got (the real bridge and host-local run in test/abandoned_test.go).
func TestChainDelPassesWhatLibcniWould(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	for _, name := range []string{"first", "second"} {
		script := "#!/bin/sh\ncat > " + filepath.Join(dir, name+".stdin") + "\nenv > " + filepath.Join(dir, name+".env") + "\n" +
			`[ -e ` + filepath.Join(dir, "fail-"+name) + ` ] && { echo '{"cniVersion":"1.0.0","code":11,"msg":"busy"}'; exit 1; }` + "\nexit 0\n"
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755))
	}
	list := `{"cniVersion":"1.0.0","name":"ceph-public","plugins":[` +
		`{"type":"first","capabilities":{"portMappings":true,"ips":false}},{"type":"second","mode":"x"},{"type":"netns-pin"}]}`
	entry, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": "c1", "config": []byte(list), "ifName": "net1", "networkName": "ceph-public",
		"cniArgs":        [][2]string{{"K8S_POD_NAMESPACE", "rook-ceph"}, {"K8S_POD_NAME", "h"}},
		"capabilityArgs": map[string]any{"portMappings": []any{"p"}, "ips": []any{"10.0.0.9"}},
		"result":         map[string]any{"cniVersion": "1.0.0", "ips": []any{map[string]any{"address": "10.0.0.2/24"}}},
	})
	require.NoError(t, err)
	r := &netnsstore.Record{Network: "ceph-public", ContainerID: "c1", IfName: "net1", PinPath: filepath.Join(dir, "no-pin"),
		Teardown: &netnsstore.Teardown{CNIPath: bin, Cache: entry}}
	require.NoError(t, runChainDel(r))

	var first, second map[string]any
	for name, into := range map[string]*map[string]any{"first": &first, "second": &second} {
		data, err := os.ReadFile(filepath.Join(dir, name+".stdin"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, into))
		assert.Equal(t, "ceph-public", (*into)["name"])
		assert.Equal(t, "1.0.0", (*into)["cniVersion"])
		assert.Contains(t, (*into)["prevResult"], "ips")
		env, err := os.ReadFile(filepath.Join(dir, name+".env"))
		require.NoError(t, err)
		for _, want := range []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=c1", "CNI_IFNAME=net1", "CNI_NETNS=\n",
			"CNI_ARGS=K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=h", "CNI_PATH=" + bin} {
			assert.Contains(t, string(env), want, name)
		}
	}
	assert.Equal(t, map[string]any{"portMappings": []any{"p"}}, first["runtimeConfig"], "only the capabilities it declares")
	assert.NotContains(t, second, "runtimeConfig")
	assert.Equal(t, "x", second["mode"], "the plugin's own fields pass through")

	// The chain runs in reverse and stops at the first failure.
	require.NoError(t, os.Remove(filepath.Join(dir, "first.stdin")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fail-second"), nil, 0o644))
	err = runChainDel(r)
	var cniErr *types.Error
	require.ErrorAs(t, err, &cniErr)
	assert.Equal(t, uint(11), cniErr.Code)
	assert.NoFileExists(t, filepath.Join(dir, "first.stdin"), "first is not run after second failed")

	r.Teardown.Cache = nil
	assert.ErrorIs(t, runChainDel(r), errNoCache)
}

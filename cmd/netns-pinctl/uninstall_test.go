package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/netnsstore"
	"golang.org/x/sys/unix"
)

// uninstallNode is a node's netns-pin files in a temporary folder: a CNI
// bin folder with netns-pin beside another plugin, a stateDir with its
// lock, a pinDir bind-mounted onto itself as the store shares it, a log,
// and two CNI cache folders (the runtime's and Multus').
type uninstallNode struct {
	bin, state, pins, log, runtimeCache, multusCache string
}

func newUninstallNode(t *testing.T) *uninstallNode {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "needs root: pinDir is bind-mounted onto itself as on a node")
	root := t.TempDir()
	n := &uninstallNode{
		bin: filepath.Join(root, "opt/cni/bin"), state: filepath.Join(root, "var/lib/cni/netns-pin"),
		pins: filepath.Join(root, "var/lib/kubelet/plugins/netns-pin"), log: filepath.Join(root, "var/log/netns-pin.log"),
		runtimeCache: filepath.Join(root, "var/lib/cni"), multusCache: filepath.Join(root, "var/lib/cni/multus"),
	}
	for _, d := range []string{n.bin, filepath.Join(n.state, "records"), filepath.Join(n.pins, "pins"),
		filepath.Dir(n.log), filepath.Join(n.runtimeCache, "results"), filepath.Join(n.multusCache, "results")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	for name, content := range map[string]string{
		filepath.Join(n.bin, "netns-pin"): "netns-pin", filepath.Join(n.bin, "bridge"): "bridge",
		filepath.Join(n.state, "lock"): "", filepath.Join(n.log): "{}\n",
	} {
		require.NoError(t, os.WriteFile(name, []byte(content), 0o600))
	}
	// the node agent's default status folder is this node's, not the host's
	def := defaultAgentStatusDir
	defaultAgentStatusDir = filepath.Join(root, "var/lib/cni/netns-pin-default-agent")
	t.Cleanup(func() { defaultAgentStatusDir = def })
	require.NoError(t, unix.Mount(n.pins, n.pins, "", unix.MS_BIND, ""))
	t.Cleanup(func() {
		for unix.Unmount(n.pins, unix.MNT_DETACH) == nil {
		}
	})
	// the runtime's cache of the pod network (Multus itself): no netns-pin
	n.cache(t, filepath.Join(n.runtimeCache, "results", "multus-cni-network-c0-eth0"), "c0", "kube-system", "dns",
		`{"cniVersion":"1.0.0","name":"multus-cni-network","type":"multus","delegates":[{"plugins":[{"type":"bridge"}]}]}`)
	return n
}

// cache writes a libcni result cache entry of container cid with config.
func (n *uninstallNode) cache(t *testing.T, path, cid, ns, pod, config string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": cid, "ifName": "net1", "networkName": "ceph-public",
		"config":  base64.StdEncoding.EncodeToString([]byte(config)),
		"cniArgs": [][]string{{"K8S_POD_NAMESPACE", ns}, {"K8S_POD_NAME", pod}, {"K8S_POD_UID", "u1"}},
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

func (n *uninstallNode) run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	base := []string{"--pin-dir", n.pins, "--state-dir", n.state, "uninstall", "--cni-bin-dir", n.bin,
		"--cache-dir", n.runtimeCache, "--cache-dir", n.multusCache}
	rc := runCLI(append(base, args...), &out, &errOut)
	return rc, out.String(), errOut.String()
}

const pinChain = `{"cniVersion":"1.0.0","name":"ceph-public","plugins":[{"type":"macvlan"},{"type":"netns-pin","cniArgsNamespaces":["rook-ceph"]}]}`

// netns-pinctl uninstall on real files: while a record, a pin or a cached
// attachment through netns-pin remains (a holder, a pod attached before
// the NetworkAttachmentDefinition dropped netns-pin, whose DEL still runs
// it), it removes nothing and names each; --dry-run says the same; once
// none remains it removes the binary, stateDir, pinDir (unmounting its
// bind mount) and the log, and nothing else; a second run has nothing to do.
func TestUninstall(t *testing.T) {
	n := newUninstallNode(t)
	att := "c1.net1"
	require.NoError(t, os.WriteFile(filepath.Join(n.state, "records", att+".json"),
		[]byte(`{"format":2,"attachment":"c1.net1","podNamespace":"rook-ceph","podName":"csi-holder-x","state":"draining"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(n.pins, "pins", att), nil, 0o600))
	// a teardown the plugin handed over after a reboot
	handedOver := filepath.Join(n.state, netnsstore.TeardownsSubdir, "c0.net1.json")
	require.NoError(t, os.Mkdir(filepath.Dir(handedOver), 0o700))
	require.NoError(t, os.WriteFile(handedOver,
		[]byte(`{"format":2,"attachment":"c0.net1","podNamespace":"rook-ceph","podName":"csi-holder-w","state":"draining","abandoned":true}`), 0o600))
	libcni := filepath.Join(n.multusCache, "results", "ceph-public-c2-net1")
	n.cache(t, libcni, "c2", "apps", "app-1", pinChain)
	delegates, err := json.Marshal([]map[string]any{{
		"ConfList": map[string]any{"name": "ceph-public", "plugins": []any{map[string]any{"type": "macvlan"}, map[string]any{"type": "netns-pin"}}},
		"Bytes":    base64.StdEncoding.EncodeToString([]byte(pinChain)),
	}})
	require.NoError(t, err)
	multus := filepath.Join(n.multusCache, "c2")
	require.NoError(t, os.WriteFile(multus, delegates, 0o600))

	for _, args := range [][]string{nil, {"--dry-run"}} {
		rc, out, errOut := n.run(args...)
		assert.Equal(t, 1, rc, "uninstall %v with remains: %s%s", args, out, errOut)
		assert.Contains(t, out, "remains: record c1.net1 pod rook-ceph/csi-holder-x ("+filepath.Join(n.state, "records", att+".json")+")")
		assert.Contains(t, out, "remains: teardown c0.net1 pod rook-ceph/csi-holder-w ("+handedOver+")")
		assert.Contains(t, errOut, "still owes the chain's DEL")
		assert.Contains(t, out, "remains: pin c1.net1 ("+filepath.Join(n.pins, "pins", att)+")")
		assert.Contains(t, out, "remains: attachment ceph-public-c2-net1 pod apps/app-1 ("+libcni+")")
		assert.Contains(t, out, "remains: attachment container c2 (Multus delegates) ("+multus+")")
		assert.NotContains(t, out, "multus-cni-network-c0", "a chain without netns-pin is no reference")
		assert.Contains(t, out, "kept "+filepath.Join(n.bin, "netns-pin"))
		assert.Contains(t, errOut, "refused: 5 thing(s) on this node still need netns-pin")
		for _, p := range []string{filepath.Join(n.bin, "netns-pin"), n.log, filepath.Join(n.state, "records", att+".json"), handedOver, filepath.Join(n.pins, "pins", att)} {
			assert.FileExists(t, p, "nothing is removed while something remains")
		}
	}

	// The pods leave: their DELs remove the record, the pin and the caches.
	for _, p := range []string{filepath.Join(n.state, "records", att+".json"), filepath.Join(n.pins, "pins", att), libcni, multus, handedOver} {
		require.NoError(t, os.Remove(p))
	}
	rc, out, errOut := n.run("--dry-run", "--json")
	require.Equal(t, 0, rc, "%s%s", out, errOut)
	var rep uninstallReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.True(t, rep.DryRun)
	assert.Empty(t, rep.Remains)
	assert.Equal(t, []string{filepath.Join(n.bin, "netns-pin"), n.state, n.pins}, rep.Removed, "the log is the configuration's logFile, none here")
	assert.FileExists(t, filepath.Join(n.bin, "netns-pin"), "--dry-run removes nothing")

	rc, out, errOut = n.run()
	require.Equal(t, 0, rc, "%s%s", out, errOut)
	assert.Contains(t, out, "removed "+filepath.Join(n.bin, "netns-pin")+"\n")
	assert.Contains(t, out, "removed "+n.pins+"\n")
	for _, p := range []string{filepath.Join(n.bin, "netns-pin"), n.state, n.pins} {
		assert.NoFileExists(t, p)
		assert.NoDirExists(t, p)
	}
	assert.FileExists(t, filepath.Join(n.bin, "bridge"), "other plugins stay")
	assert.DirExists(t, filepath.Dir(n.pins), "pinDir's parent stays")
	assert.FileExists(t, n.log, "no logFile configured: the log is not netns-pin's to remove")

	rc, out, errOut = n.run()
	assert.Equal(t, 0, rc, "%s%s", out, errOut)
	assert.Equal(t, "removed nothing: netns-pin is not installed here\n", out)
}

// With --conf, uninstall removes the configuration's logFile too, and a
// missing --cni-bin-dir is a usage error.
func TestUninstallLogFileAndUsage(t *testing.T) {
	n := newUninstallNode(t)
	confFile := filepath.Join(t.TempDir(), "netns-pin.json")
	entry, err := json.Marshal(map[string]any{"type": "netns-pin", "pinDir": n.pins, "stateDir": n.state, "logFile": n.log,
		"cacheDirs": []string{n.runtimeCache, n.multusCache}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(confFile, entry, 0o600))
	var out, errOut bytes.Buffer
	rc := runCLI([]string{"--conf", confFile, "uninstall", "--cni-bin-dir", n.bin}, &out, &errOut)
	require.Equal(t, 0, rc, "%s%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "removed "+n.log+"\n")
	assert.NoFileExists(t, n.log)

	out.Reset()
	errOut.Reset()
	assert.Equal(t, 2, runCLI([]string{"uninstall"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "usage: netns-pinctl uninstall --cni-bin-dir DIR")
}

// The node agent's status names pods of the node that carry the finalizer
// (in its own folder beside stateDir, or in its default one): uninstall
// refuses, naming each pod and saying what to do, and removes nothing; an
// empty list, a missing status or one the agent rewrote without them lets
// it go on. A status that cannot be read refuses too.
func TestUninstallRefusesWhilePodsCarryTheFinalizer(t *testing.T) {
	n := newUninstallNode(t)
	status := func(dir string, pods ...string) {
		t.Helper()
		fin := []map[string]any{}
		for _, p := range pods {
			ns, name, _ := strings.Cut(p, "/")
			fin = append(fin, map[string]any{"namespace": ns, "name": name, "uid": "u-" + name})
		}
		b, err := json.Marshal(map[string]any{"node": "n1", "pid": 7, "finalizers": fin})
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "status.json"), b, 0o644))
	}
	beside := n.state + "-agent"
	for _, dir := range []string{beside, defaultAgentStatusDir} {
		status(dir, "rook-ceph/csi-holder-a", "ceph-csi/csi-rbdplugin-b")
		rc, out, errOut := n.run()
		assert.Equal(t, 1, rc, "uninstall while pods carry the finalizer (status in %s)", dir)
		for _, p := range []string{"rook-ceph/csi-holder-a", "ceph-csi/csi-rbdplugin-b"} {
			assert.Contains(t, out, "remains: finalizer netns-pin.io/pin pod "+p+" ("+filepath.Join(dir, "status.json")+")")
		}
		assert.Contains(t, errOut, "carried the finalizer netns-pin.io/pin at the node agent's last pass")
		assert.Contains(t, errOut, "take it out of their template")
		assert.FileExists(t, filepath.Join(n.bin, "netns-pin"), "nothing removed")
		assert.DirExists(t, n.state)
		status(dir) // the agent's next pass: none left
	}
	require.NoError(t, os.WriteFile(filepath.Join(beside, "status.json"), []byte("{"), 0o644))
	rc, _, errOut := n.run()
	assert.Equal(t, 1, rc, "a status that cannot be read")
	assert.Contains(t, errOut, "is not JSON")
	assert.FileExists(t, filepath.Join(n.bin, "netns-pin"))

	require.NoError(t, os.Remove(filepath.Join(beside, "status.json")))
	rc, out, errOut := n.run()
	require.Equal(t, 0, rc, "no pod carries the finalizer: %s%s", out, errOut)
	assert.NoFileExists(t, filepath.Join(n.bin, "netns-pin"))
}

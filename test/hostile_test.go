package e2e

// Every hostile input of docs/design.md §4 and §13, run through the real binary: the
// exit code, the CNI error code and message, and that nothing on disk or in
// the mount table changed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

type hostileCase struct {
	name  string
	env   map[string]string    // CNI_* overrides
	conf  func(map[string]any) // edits of the plugin entry
	stdin []byte               // raw stdin instead of the entry
	code  uint
	msg   []string
}

// snapshot is everything a refused call must leave as it was: the files
// and the mount points under the work folder, which holds pinDir, stateDir
// and every decoy (other suites may mount elsewhere meanwhile).
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	out := treeEntries(t, dir)
	for _, mp := range hosttest.MountsUnder(t, dir) {
		out = append(out, "mount "+mp)
	}
	slices.Sort(out)
	return out
}

func runPlugin(t *testing.T, bin string, env []string, stdin []byte) (stdout []byte, exitCode int) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.Bytes(), ee.ExitCode()
	}
	require.NoError(t, err, "stderr: %s", errOut.String())
	return out.Bytes(), 0
}

func TestHostileInputsAreRefusedAndChangeNothing(t *testing.T) {
	c := newChain(t, chainSpec{cniArgsNamespaces: []string{"storage"}})
	ns := hosttest.NewNetns(t, "npe2e")
	// A holder already pinned: the refused calls must not disturb it.
	existing := c.newAttachment(t, ns, holderArgs(), false)
	existing.mustAdd(t)
	other := hosttest.NewNetns(t, "npe2e")

	regular := filepath.Join(c.work, "regular")
	require.NoError(t, os.WriteFile(regular, []byte("x"), 0o600))
	symToRegular := filepath.Join(c.work, "sym-to-regular")
	require.NoError(t, os.Symlink(regular, symToRegular))
	realDir := filepath.Join(c.work, "real-dir")
	require.NoError(t, os.Mkdir(realDir, 0o755))
	symDir := filepath.Join(c.work, "sym-dir")
	require.NoError(t, os.Symlink(realDir, symDir))
	openDir := filepath.Join(c.work, "open-dir")
	require.NoError(t, os.Mkdir(openDir, 0o777))
	require.NoError(t, os.Chmod(openDir, 0o777))
	groupDir := filepath.Join(c.work, "group-dir")
	require.NoError(t, os.Mkdir(groupDir, 0o770))
	require.NoError(t, os.Chmod(groupDir, 0o770))
	userDir := filepath.Join(c.work, "user-dir")
	require.NoError(t, os.Mkdir(userDir, 0o755))
	require.NoError(t, os.Chown(userDir, 1000, 1000))

	claim := func(v string) func(map[string]any) {
		return func(m map[string]any) { m["args"] = map[string]any{"cni": map[string]any{"pinCluster": v}} }
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	storagePod := "IgnoreUnknown=1;K8S_POD_NAMESPACE=storage;K8S_POD_NAME=h-1"
	cases := []hostileCase{
		// Claims and names.
		{name: "claim from a namespace not allowed", conf: claim("rook-ceph/my-cluster"),
			env:  map[string]string{"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=evil"},
			code: types.ErrInvalidNetworkConfig, msg: []string{"default/evil", "not in cniArgsNamespaces"}},
		{name: "claim without a pod namespace", conf: claim("rook-ceph/my-cluster"), env: map[string]string{"CNI_ARGS": ""},
			code: types.ErrInvalidNetworkConfig, msg: []string{"not in cniArgsNamespaces"}},
		{name: "holder rule with a malformed cluster", conf: set("holders", []map[string]any{{"podNamespace": clusterNS, "podName": "csi-holder-*", "cluster": "Rook/../x"}}),
			code: types.ErrInvalidNetworkConfig, msg: []string{"holders[0]", "Rook/../x"}},
	}
	for _, bad := range []string{"a/b/c", "../x", "a/..", "rook/x\x00", "Rook/x", "rook/X", "/x", "x/", "a b/c",
		strings.Repeat("n", 64) + "/x", "x/" + strings.Repeat("n", 254), "x/-y", "x/y..z"} {
		cases = append(cases, hostileCase{name: "claimed cluster " + strings.ReplaceAll(bad, "\x00", `\0`)[:min(len(bad), 24)],
			conf: claim(bad), env: map[string]string{"CNI_ARGS": storagePod},
			code: types.ErrInvalidNetworkConfig, msg: []string{"pinCluster"}})
	}
	cases = append(cases,
		// CNI_NETNS.
		hostileCase{name: "netns is a regular file", env: map[string]string{"CNI_NETNS": regular}, code: types.ErrInvalidNetNS, msg: []string{regular, "not a network namespace"}},
		hostileCase{name: "netns is a directory", env: map[string]string{"CNI_NETNS": realDir}, code: types.ErrInvalidNetNS, msg: []string{"not a network namespace"}},
		hostileCase{name: "netns is a symlink to a file", env: map[string]string{"CNI_NETNS": symToRegular}, code: types.ErrInvalidNetNS, msg: []string{"not a network namespace"}},
		hostileCase{name: "netns is a mount namespace", env: map[string]string{"CNI_NETNS": "/proc/self/ns/mnt"}, code: types.ErrInvalidNetNS, msg: []string{"it is a mount namespace"}},
		hostileCase{name: "netns is a pid namespace", env: map[string]string{"CNI_NETNS": "/proc/self/ns/pid"}, code: types.ErrInvalidNetNS, msg: []string{"it is a pid namespace"}},
		hostileCase{name: "netns is a user namespace", env: map[string]string{"CNI_NETNS": "/proc/self/ns/user"}, code: types.ErrInvalidNetNS, msg: []string{"it is a user namespace"}},
		hostileCase{name: "netns is missing", env: map[string]string{"CNI_NETNS": filepath.Join(c.work, "gone")}, code: types.ErrInvalidNetNS, msg: []string{"no such file"}},
		hostileCase{name: "netns is the host's", env: map[string]string{"CNI_NETNS": fmt.Sprintf("/proc/%d/ns/net", os.Getpid())}, code: types.ErrInvalidNetNS, msg: []string{"host"}},
		hostileCase{name: "netns is the plugin's own", env: map[string]string{"CNI_NETNS": "/proc/self/ns/net"}, code: types.ErrInvalidNetNS, msg: []string{"own"}},
		// CNI_CONTAINERID and CNI_IFNAME.
		hostileCase{name: "container id with a slash", env: map[string]string{"CNI_CONTAINERID": "../../etc/x"}, code: types.ErrInvalidEnvironmentVariables, msg: []string{"containerID"}},
		hostileCase{name: "container id too long", env: map[string]string{"CNI_CONTAINERID": strings.Repeat("a", 250)}, code: types.ErrInvalidEnvironmentVariables, msg: []string{"over"}},
		hostileCase{name: "ifname with a slash", env: map[string]string{"CNI_IFNAME": "a/b"}, code: types.ErrInvalidEnvironmentVariables, msg: []string{"interface name"}},
		hostileCase{name: "ifname too long", env: map[string]string{"CNI_IFNAME": strings.Repeat("e", 16)}, code: types.ErrInvalidEnvironmentVariables, msg: []string{"too long"}},
		hostileCase{name: "ifname dot-dot", env: map[string]string{"CNI_IFNAME": ".."}, code: types.ErrInvalidEnvironmentVariables, msg: []string{"interface name"}},
		// stdin.
		hostileCase{name: "config over 1 MiB", stdin: append([]byte(`{"cniVersion":"1.0.0","name":"x","type":"netns-pin","pad":"`), append(bytes.Repeat([]byte("a"), 1<<20), []byte(`"}`)...)...),
			code: types.ErrInvalidNetworkConfig, msg: []string{"limit"}},
		hostileCase{name: "invalid json", stdin: []byte(`{"cniVersion":"1.0.0","name":`), code: types.ErrDecodingFailure},
		hostileCase{name: "wrong type", conf: set("pinDir", 5), code: types.ErrInvalidNetworkConfig, msg: []string{"pinDir"}},
		hostileCase{name: "unknown cniVersion", conf: set("cniVersion", "9.9.9"), code: types.ErrIncompatibleCNIVersion},
		hostileCase{name: "relative pinDir", conf: set("pinDir", "pins"), code: types.ErrInvalidNetworkConfig, msg: []string{"pinDir", "absolute"}},
		hostileCase{name: "pinDir in the wrong case", conf: set("pindir", "/elsewhere"), code: types.ErrInvalidNetworkConfig, msg: []string{"pindir", `did you mean "pinDir"`}},
		hostileCase{name: "key given twice", stdin: []byte(`{"cniVersion":"1.0.0","name":"x","type":"netns-pin","logLevel":"info","logLevel":"debug","prevResult":{"cniVersion":"1.0.0"}}`),
			code: types.ErrInvalidNetworkConfig, msg: []string{"logLevel: given twice"}},
		// Directories.
		hostileCase{name: "pinDir is a symlink", conf: set("pinDir", symDir), code: types.ErrPluginNotAvailable, msg: []string{symDir, "symlink"}},
		hostileCase{name: "stateDir is a symlink", conf: set("stateDir", symDir), code: types.ErrPluginNotAvailable, msg: []string{symDir, "symlink"}},
		hostileCase{name: "pinDir world-writable", conf: set("pinDir", openDir), code: types.ErrPluginNotAvailable, msg: []string{openDir, "group or others"}},
		hostileCase{name: "stateDir group-writable", conf: set("stateDir", groupDir), code: types.ErrPluginNotAvailable, msg: []string{groupDir, "group or others"}},
		hostileCase{name: "pinDir not root's", conf: set("pinDir", userDir), code: types.ErrPluginNotAvailable, msg: []string{userDir, "uid 1000"}},
	)

	bin := filepath.Join(c.env.cniPath, "netns-pin")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "hostile-" + host.RandHex(6), "CNI_NETNS": other.Path,
				"CNI_IFNAME": ifName, "CNI_PATH": c.env.cniPath, "CNI_ARGS": cniArgsString(holderArgs()),
			}
			for k, v := range tc.env {
				env[k] = v
			}
			stdin := tc.stdin
			if stdin == nil {
				entry := map[string]any{"name": c.name, "cniVersion": "1.0.0", "prevResult": fakePrevResult(t, env["CNI_NETNS"])}
				for k, v := range c.pinEntry {
					entry[k] = v
				}
				if tc.conf != nil {
					tc.conf(entry)
				}
				var err error
				stdin, err = json.Marshal(entry)
				require.NoError(t, err)
			}
			var environ []string
			for k, v := range env {
				environ = append(environ, k+"="+v)
			}
			before := snapshot(t, c.work)
			out, exit := runPlugin(t, bin, environ, stdin)
			assert.Equal(t, before, snapshot(t, c.work), "a refused call changed files or mounts")
			assert.NotZero(t, exit, "exit code; stdout %s", out)
			var cniErr types.Error
			require.NoError(t, json.Unmarshal(out, &cniErr), "stdout must be one CNI error: %s", out)
			assert.Equal(t, tc.code, cniErr.Code, "CNI error code: %s", out)
			for _, m := range tc.msg {
				assert.Contains(t, cniErr.Msg+" "+cniErr.Details, m)
			}
			t.Logf("refused: %d %s", cniErr.Code, cniErr.Msg)
		})
	}
	// The holder pinned before is whole.
	require.NoError(t, existing.check())
}

// Symlinks planted where a pin, a link's folder or a record will be
// written are never followed: the victim files stay as they were.
func TestPlantedSymlinksAreNotFollowed(t *testing.T) {
	c := newChain(t, chainSpec{})
	victimDir := filepath.Join(c.work, "victim")
	require.NoError(t, os.Mkdir(victimDir, 0o755))
	victim := filepath.Join(victimDir, "file")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o644))

	for _, plant := range []struct {
		name  string
		place func(a *attachment) string
	}{
		{"pin", func(a *attachment) string { return a.pinPath() }},
		{"link folder", func(a *attachment) string { return filepath.Join(c.pinDir, clusterNS) }},
		{"record", func(a *attachment) string { return a.recordPath() }},
	} {
		t.Run(plant.name, func(t *testing.T) {
			ns := hosttest.NewNetns(t, "npe2e")
			a := c.newAttachment(t, ns, holderArgs(), false)
			// Make the folders exist as the plugin would, then plant.
			require.NoError(t, os.MkdirAll(filepath.Join(c.pinDir, "pins"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(c.stateDir, "records"), 0o700))
			target := victim
			if plant.name == "link folder" {
				target = victimDir
			}
			p := plant.place(a)
			require.NoError(t, os.RemoveAll(p)) // an empty folder left by an earlier subtest
			require.NoError(t, os.Symlink(target, p))
			_, err := a.add(t)
			data, rerr := os.ReadFile(victim)
			require.NoError(t, rerr)
			assert.Equal(t, "precious", string(data))
			entries, rerr := os.ReadDir(victimDir)
			require.NoError(t, rerr)
			assert.Len(t, entries, 1, "nothing written into the victim folder")
			assert.Empty(t, hosttest.MountsUnder(t, victimDir), "nothing mounted on the victim")
			if plant.name == "pin" {
				// A file in pins/ without a record is an orphan: repair
				// removes it (without following it) and ADD goes on.
				require.NoError(t, err)
				assertPinned(t, a, pinExpect{netns: ns.ID, cluster: cluster, link: c.defaultLink()})
				require.NoError(t, a.del())
				return
			}
			require.Error(t, err, "ADD through a planted symlink at the %s", plant.name)
			t.Logf("refused: %v", err)
			assert.NotContains(t, strings.Join(hosttest.MountsUnder(t, c.work), " "), a.containerID, "no pin left mounted")
			if rerr := os.Remove(p); rerr != nil && !os.IsNotExist(rerr) {
				t.Errorf("cleanup: %v", rerr)
			}
		})
	}
}

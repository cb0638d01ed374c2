package main

// The CNI verbs driven in-process, as the reference plugins test theirs
// (containernetworking/plugins pkg/testutils), for every CNI version the
// plugin advertises, against a temporary store, a real network namespace
// and fixture kernel trees. Needs root (namespaces, bind mounts).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

type verbEnv struct {
	t                        *testing.T
	pinDir, stateDir, sysfs  string
	netns                    ns.NetNS
	version                  string
	prev                     types.Result
	holderArgs, plainArgs    string
	containerID, nonHolderID string
}

func newVerbEnv(t *testing.T, version string) *verbEnv {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "this test makes network namespaces and bind mounts: run it as root")
	root := t.TempDir()
	t.Cleanup(func() {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(root))
		require.NoError(t, err)
		for i := len(ms) - 1; i >= 0; i-- {
			_ = unix.Unmount(ms[i].Mountpoint, unix.MNT_DETACH)
		}
	})
	e := &verbEnv{t: t, version: version, pinDir: filepath.Join(root, "pin"), stateDir: filepath.Join(root, "state"),
		sysfs:       filepath.Join(root, "sys"),
		holderArgs:  "IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=csi-holder-x;K8S_POD_UID=1b9f4e0c-7d2a-4c11-8e6f-000000000001",
		plainArgs:   "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
		containerID: "verbs-holder", nonHolderID: "verbs-plain"}
	require.NoError(t, os.MkdirAll(filepath.Join(e.sysfs, "bus/rbd/devices"), 0o755))
	var err error
	e.netns, err = testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() { e.netns.Close(); _ = testutils.UnmountNS(e.netns) })

	idx := 0
	r := &types100.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: "eth0", Mac: "0a:58:0a:f4:01:11", Sandbox: e.netns.Path()}},
		IPs:        []*types100.IPConfig{{Interface: &idx, Address: net.IPNet{IP: net.ParseIP("10.244.1.17"), Mask: net.CIDRMask(24, 32)}}},
	}
	e.prev, err = r.GetAsVersion(version)
	require.NoError(t, err)
	return e
}

func (e *verbEnv) stdin(extra map[string]any) []byte {
	conf := map[string]any{
		"cniVersion": e.version, "name": "ceph-public", "type": "netns-pin",
		"pinDir": e.pinDir, "stateDir": e.stateDir, "inUse": map[string]any{"sysfs": e.sysfs, "debugfs": filepath.Join(e.sysfs, "no-debugfs")},
		"holders": []map[string]any{{"podNamespace": "rook-ceph", "podName": "csi-holder-*", "cluster": "rook-ceph/my-cluster"}},
	}
	if e.prev != nil {
		conf["prevResult"] = e.prev
	}
	for k, v := range extra {
		conf[k] = v
	}
	data, err := json.Marshal(conf)
	require.NoError(e.t, err)
	return data
}

func (e *verbEnv) args(id, cniArgs string, stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: id, Netns: e.netns.Path(), IfName: "eth0", Args: cniArgs, Path: "/opt/cni/bin", StdinData: stdin}
}

func (e *verbEnv) pin() string  { return filepath.Join(e.pinDir, "pins", e.containerID+".eth0") }
func (e *verbEnv) link() string { return filepath.Join(e.pinDir, "rook-ceph", "my-cluster.net") }

// cniCode returns the CNI error code of err (0 when it is no CNI error).
func cniCode(t *testing.T, err error) uint {
	t.Helper()
	var e *types.Error
	require.True(t, errors.As(err, &e), "want a CNI error, got %v", err)
	return e.Code
}

func TestVerbsInProcessForEveryVersion(t *testing.T) {
	for _, version := range supportedVersions.SupportedVersions() {
		t.Run(version, func(t *testing.T) {
			e := newVerbEnv(t, version)
			prevJSON, err := json.Marshal(e.prev)
			require.NoError(t, err)

			// ADD of a pod that is no holder: prevResult out, nothing on disk.
			plain := e.args(e.nonHolderID, e.plainArgs, e.stdin(nil))
			res, out, err := testutils.CmdAddWithArgs(plain, func() error { return cmdAdd(plain) })
			require.NoError(t, err)
			assert.JSONEq(t, string(prevJSON), string(out), "passthrough prints prevResult unchanged")
			assert.Equal(t, version, res.Version())
			assert.NoDirExists(t, e.stateDir)

			// ADD of the holder: pinned and linked, prevResult out.
			holder := e.args(e.containerID, e.holderArgs, e.stdin(nil))
			_, out, err = testutils.CmdAddWithArgs(holder, func() error { return cmdAdd(holder) })
			require.NoError(t, err)
			assert.JSONEq(t, string(prevJSON), string(out))
			var pin, want unix.Stat_t
			require.NoError(t, unix.Stat(e.pin(), &pin))
			require.NoError(t, unix.Stat(e.netns.Path(), &want))
			assert.Equal(t, want.Ino, pin.Ino, "the pin is the holder's netns")
			require.NoError(t, unix.Stat(e.link(), &pin))
			assert.Equal(t, want.Ino, pin.Ino, "the link leads into it")

			if version != "0.3.0" && version != "0.3.1" {
				require.NoError(t, testutils.CmdCheckWithArgs(holder, func() error { return cmdCheck(holder) }))
			}

			// DEL while a process uses the netns: code 11, nothing released.
			client := exec.Command("nsenter", "--net="+e.link(), "--", "sleep", "600")
			require.NoError(t, client.Start())
			t.Cleanup(func() { _ = client.Process.Kill(); _ = client.Wait() })
			require.Eventually(t, func() bool {
				var st unix.Stat_t
				return unix.Stat(fmt.Sprintf("/proc/%d/ns/net", client.Process.Pid), &st) == nil && st.Ino == want.Ino
			}, 10e9, 5e6)
			del := e.args(e.containerID, e.holderArgs, e.stdin(nil))
			err = testutils.CmdDelWithArgs(del, func() error { return cmdDel(del) })
			assert.Equal(t, types.ErrTryAgainLater, cniCode(t, err), "%v", err)
			assert.FileExists(t, e.pin())

			require.NoError(t, client.Process.Kill())
			_ = client.Wait()
			require.NoError(t, testutils.CmdDelWithArgs(del, func() error { return cmdDel(del) }))
			assert.NoFileExists(t, e.pin())
			assert.NoFileExists(t, e.link())
			require.NoError(t, testutils.CmdDelWithArgs(del, func() error { return cmdDel(del) }), "DEL is idempotent")
			plainDel := e.args(e.nonHolderID, e.plainArgs, e.stdin(nil))
			require.NoError(t, testutils.CmdDelWithArgs(plainDel, func() error { return cmdDel(plainDel) }))

			if version == "1.1.0" {
				// GC releases pins whose attachments the runtime no longer
				// lists; STATUS answers that pins can be made.
				_, _, err = testutils.CmdAddWithArgs(holder, func() error { return cmdAdd(holder) })
				require.NoError(t, err)
				e.prev = nil
				gc := e.args("", "", e.stdin(map[string]any{"cni.dev/valid-attachments": []map[string]string{}}))
				require.NoError(t, cmdGC(gc))
				assert.NoFileExists(t, e.pin(), "GC released the stale attachment")
				status := e.args("", "", e.stdin(nil))
				require.NoError(t, testutils.CmdStatus(func() error { return cmdStatus(status) }))
			}
		})
	}
}

// Errors carry the CNI spec's codes.
func TestVerbErrorCodes(t *testing.T) {
	e := newVerbEnv(t, "1.0.0")
	for _, tc := range []struct {
		name string
		args *skel.CmdArgs
		code uint
	}{
		{"no prevResult", func() *skel.CmdArgs {
			prev := e.prev
			e.prev = nil
			defer func() { e.prev = prev }()
			return e.args(e.containerID, e.holderArgs, e.stdin(nil))
		}(), types.ErrInvalidNetworkConfig},
		{"malformed configuration", e.args(e.containerID, e.holderArgs, []byte(`{"cniVersion":"1.0.0","name":"x","pinDir":7}`)), types.ErrInvalidNetworkConfig},
		{"relative stateDir", e.args(e.containerID, e.holderArgs, e.stdin(map[string]any{"stateDir": "state"})), types.ErrInvalidNetworkConfig},
		{"claim of another namespace's cluster", e.args(e.containerID, "IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant;K8S_POD_NAME=p",
			e.stdin(map[string]any{"cniArgsNamespaces": []string{"tenant"}, "args": map[string]any{"cni": map[string]any{"pinCluster": "rook-ceph/my-cluster"}}})), types.ErrInvalidNetworkConfig},
		{"CNI_NETNS is no netns", func() *skel.CmdArgs {
			a := e.args(e.containerID, e.holderArgs, e.stdin(nil))
			a.Netns = e.sysfs
			return a
		}(), types.ErrInvalidNetNS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := testutils.CmdAddWithArgs(tc.args, func() error { return cmdAdd(tc.args) })
			assert.Equal(t, tc.code, cniCode(t, err), "%v", err)
			assert.NoFileExists(t, e.pin())
		})
	}
}

// ADD hands prevResult on as it came when it is in the configuration's
// cniVersion, byte for byte, so that what this CNI library does not know
// (a newer result's fields) survives; a result of another version is
// converted to the configuration's by the library, and one the library
// cannot convert fails the ADD, as before.
func TestAddHandsPrevResultOn(t *testing.T) {
	e := newVerbEnv(t, "1.0.0")
	add := func(stdin []byte) ([]byte, error) {
		a := e.args(e.nonHolderID, e.plainArgs, stdin)
		_, out, err := testutils.CmdAddWithArgs(a, func() error { return cmdAdd(a) })
		return out, err
	}
	given := `{"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x", "futureField": {"a": [1, 2]}}],` +
		` "ips": [{"interface": 0, "address": "10.244.1.17/24"}], "vendorExtension": true}`
	out, err := add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"netns-pin","prevResult":` + given + `}`))
	require.NoError(t, err)
	assert.Equal(t, given, string(out), "the same bytes")

	// 1.0.0 inside a 1.1.0 configuration: converted.
	out, err = add([]byte(`{"cniVersion":"1.1.0","name":"n","type":"netns-pin","prevResult":` + given + `}`))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, "1.1.0", got["cniVersion"])
	assert.NotContains(t, got, "vendorExtension", "decoded by the library, which keeps what it knows")

	// Given twice, or in another spelling: the library reads it, as before.
	for _, stdin := range []string{
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","ips":[]},"prevResult":` + given + `}`,
		`{"cniVersion":"1.0.0","name":"n","PrevResult":` + given + `}`,
	} {
		out, err = add([]byte(stdin))
		require.NoError(t, err, stdin)
		assert.NotContains(t, string(out), "vendorExtension", "%s: decoded by the library, which keeps what it knows", stdin)
	}

	// A result the library cannot read, in another version: the ADD fails,
	// a holder's before anything is pinned.
	_, err = add([]byte(`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"0.4.0","ips":[]}}`))
	assert.Equal(t, uint(types.ErrInvalidNetworkConfig), cniCode(t, err), "%v", err)
	holder := e.args(e.containerID, e.holderArgs, e.stdin(map[string]any{"prevResult": map[string]any{"cniVersion": "0.4.0", "ips": []any{}}}))
	_, _, err = testutils.CmdAddWithArgs(holder, func() error { return cmdAdd(holder) })
	assert.Equal(t, uint(types.ErrInvalidNetworkConfig), cniCode(t, err), "%v", err)
	assert.NoFileExists(t, e.pin())
	assert.NoDirExists(t, e.stateDir)
}

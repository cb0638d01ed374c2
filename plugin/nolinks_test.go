package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A CSI node plugin as its own holder: a rule matches its pods and
// "links": [] asks for no link. ADD pins with nothing else under pinDir;
// DEL is refused while a client lives in the netns and releases after;
// list and inuse find it by its cluster key.
func TestNodePluginAsItsOwnHolder(t *testing.T) {
	e := newVerbEnv(t, "1.0.0")
	nodePlugin := "IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=csi-rbdplugin-x7k2p;K8S_POD_UID=1b9f4e0c-7d2a-4c11-8e6f-000000000037"
	stdin := e.stdin(map[string]any{
		"links":   []string{},
		"holders": []map[string]any{{"podNamespace": "rook-ceph", "podName": "csi-rbdplugin-*", "cluster": "rook-ceph/my-cluster"}},
	})
	add := e.args(e.containerID, nodePlugin, stdin)
	_, _, err := testutils.CmdAddWithArgs(add, func() error { return cmdAdd(add) })
	require.NoError(t, err)
	var pin, want unix.Stat_t
	require.NoError(t, unix.Stat(e.pin(), &pin))
	require.NoError(t, unix.Stat(e.netns.Path(), &want))
	assert.Equal(t, want.Ino, pin.Ino, "the node plugin's netns is pinned")
	assert.NoFileExists(t, e.link(), "no default link")
	require.NoError(t, filepath.WalkDir(e.pinDir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		assert.Zero(t, d.Type()&fs.ModeSymlink, "no link anywhere under pinDir: %s", p)
		return nil
	}))

	flags := []string{"--pin-dir", e.pinDir, "--state-dir", e.stateDir, "--sysfs", e.sysfs, "--debugfs", filepath.Join(e.sysfs, "no-debugfs")}
	out, _, code := runCtl(t, append(flags, "list")...)
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^rook-ceph/my-cluster\s+verbs-holder\.eth0\s+rook-ceph/csi-rbdplugin-x7k2p\s+active`, out)

	// A client the node plugin made in its own netns: a process there
	// stands for it (a kernel client holds the netns as well, and the
	// in-use check finds either).
	client := exec.Command("nsenter", "--net="+e.pin(), "--", "sleep", "600")
	require.NoError(t, client.Start())
	t.Cleanup(func() { _ = client.Process.Kill(); _ = client.Wait() })
	require.Eventually(t, func() bool {
		var st unix.Stat_t
		return unix.Stat("/proc/"+strconv.Itoa(client.Process.Pid)+"/ns/net", &st) == nil && st.Ino == want.Ino
	}, 10e9, 5e6)

	out, _, code = runCtl(t, append(flags, "inuse", "rook-ceph/my-cluster")...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "pod rook-ceph/csi-rbdplugin-x7k2p")
	assert.Contains(t, out, "process "+strconv.Itoa(client.Process.Pid))

	del := e.args(e.containerID, nodePlugin, stdin)
	err = testutils.CmdDelWithArgs(del, func() error { return cmdDel(del) })
	assert.Equal(t, types.ErrTryAgainLater, cniCode(t, err), "%v", err)
	assert.FileExists(t, e.pin(), "the pod's DEL is refused while its client lives")
	assert.NoFileExists(t, e.link())

	require.NoError(t, client.Process.Kill())
	_ = client.Wait()
	require.NoError(t, testutils.CmdDelWithArgs(del, func() error { return cmdDel(del) }))
	assert.NoFileExists(t, e.pin(), "released once the client left")
	_, errOut, code := runCtl(t, append(flags, "inuse", "rook-ceph/my-cluster")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no pinned attachment or cluster")
}

// runCtl runs netns-pinctl, built from this checkout once per test binary.
func runCtl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "netns-pinctl-")
		require.NoError(t, err)
		ctl = filepath.Join(dir, "netns-pinctl")
		out, err := exec.Command("go", "build", "-buildvcs=false", "-o", ctl, "../cmd/netns-pinctl").CombinedOutput()
		require.NoError(t, err, "go build: %s", out)
	})
	var out, errOut bytes.Buffer
	cmd := exec.Command(ctl, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

var (
	ctlOnce sync.Once
	ctl     string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if ctl != "" {
		os.RemoveAll(filepath.Dir(ctl))
	}
	os.Exit(code)
}

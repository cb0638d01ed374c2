package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// buildBinaries builds this program into a fresh folder as netns-pin, with
// files beside it that install must not copy.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the test builds both binaries with the go tool")
	for name, pkg := range map[string]string{"netns-pinctl": ".", "netns-pin": "../../plugin"} {
		cmd := exec.Command(goBin, "build", "-buildvcs=false", "-o", filepath.Join(dir, name), pkg)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other-plugin"), []byte("not ours"), 0o755))
	return filepath.Join(dir, "netns-pinctl")
}

// The installer's copy on real files: an old binary is replaced whole,
// mode 0755, nothing else is touched, no temporary file stays, and the
// result names the version; a target that is no folder, or a read-only
// one, fails with the reason and leaves the old binary.
func TestInstall(t *testing.T) {
	bin := buildBinaries(t)
	want, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "netns-pin"))
	require.NoError(t, err)

	target := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(target, "netns-pin"), []byte("old binary"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(target, "bridge"), []byte("bridge"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(target, "netns-pin-agent"), []byte("the first image's agent copy"), 0o755))
	r := host.RunCmd(time.Minute, nil, nil, bin, "install", "--cni-bin-dir", target, "--json")
	require.NoError(t, r.Err, "%s", r)
	var rep installReport
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &rep), "one JSON line: %q", r.Stdout)
	assert.Equal(t, "dev", rep.Version, "a go build outside the stamped build is dev")
	assert.Equal(t, target, rep.Dir)
	require.Len(t, rep.Installed, 1)
	assert.Equal(t, "netns-pin", rep.Installed[0].Name)
	assert.Equal(t, int64(len(want)), rep.Installed[0].Size)

	got, err := os.ReadFile(filepath.Join(target, "netns-pin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the installed netns-pin is the plugin beside netns-pinctl")
	fi, err := os.Stat(filepath.Join(target, "netns-pin"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	entries, err := os.ReadDir(target)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"bridge", "netns-pin"}, names, "no temporary file, nothing else copied (netns-pinctl stays in the image), the old netns-pin-agent removed")

	// The human line names the version and what was installed.
	r = host.RunCmd(time.Minute, nil, nil, bin, "install", "--cni-bin-dir", target)
	require.NoError(t, r.Err, "%s", r)
	assert.Equal(t, "installed dev into "+target+": netns-pin\n", r.Stdout)

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	r = host.RunCmd(time.Minute, nil, nil, bin, "install", "--cni-bin-dir", file)
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "--cni-bin-dir "+file+": not a directory")
	r = host.RunCmd(time.Minute, nil, nil, bin, "install", "--cni-bin-dir", filepath.Join(target, "missing"))
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "no such file or directory")

	ro := readOnlyDir(t)
	r = host.RunCmd(time.Minute, nil, nil, bin, "install", "--cni-bin-dir", ro)
	assert.Error(t, r.Err)
	assert.Regexp(t, `install `+ro+`/netns-pin: open `+ro+`/\.netns-pin\.\d+\.tmp: (read-only file system|permission denied)`, r.Stderr)
	old, err := os.ReadFile(filepath.Join(ro, "netns-pin"))
	require.NoError(t, err)
	assert.Equal(t, "old binary", string(old), "a failed install leaves the old binary")

	r = host.RunCmd(time.Minute, nil, nil, bin, "install")
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "usage: netns-pinctl install --cni-bin-dir DIR")
	r = host.RunCmd(time.Minute, nil, nil, bin, "--state-dir", "/x", "install", "--cni-bin-dir", target)
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "reads no network configuration", "no flag is ignored")
}

// readOnlyDir is a folder holding an old netns-pin that cannot be written:
// a read-only mount as root (a root process ignores mode bits, and a
// read-only hostPath is how a node refuses it), else mode 0555.
func readOnlyDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "netns-pin"), []byte("old binary"), 0o755))
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return dir
	}
	require.NoError(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	require.NoError(t, unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""))
	return dir
}

// host-exec runs a netns-pinctl command in the host's mount namespace,
// also from a process in a mount namespace of its own, as the sweep
// container is (root: unshare --mount). There a tmpfs hides the store's
// records: list run directly sees none, list through host-exec sees the
// host's.
func TestHostExec(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "needs root: a mount namespace of its own")
	_, same, err := nsinfo.HostMountNS()
	require.NoError(t, err)
	require.True(t, same, "this test runs in the host's mount namespace")
	s, flags := cliStore(t)
	bin := buildBinaries(t)
	list := strings.Join(append(flags, "list"), " ")
	hidden := func(cmd string) host.CmdResult {
		return host.RunCmd(time.Minute, nil, nil, "unshare", "--mount", "--propagation", "private", "sh", "-c",
			"mount -t tmpfs none "+s.StateDir+" && exec "+cmd)
	}

	r := hidden(bin + " " + list)
	assert.NotContains(t, r.Stdout+r.Stderr, "c1.net1", "the tmpfs hides the records from a direct run")
	r = hidden(bin + " host-exec -- " + list)
	require.NoError(t, r.Err, "%s", r)
	assert.Contains(t, r.Stdout, "c1.net1", "host-exec sees the host's store")
	r = host.RunCmd(time.Minute, nil, nil, bin, append([]string{"host-exec", "--"}, append(flags, "list")...)...)
	require.NoError(t, r.Err, "%s", r)
	assert.Contains(t, r.Stdout, "c1.net1", "already there: exec'd as it is")

	r = hidden(bin + " host-exec -- bogus")
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "usage: netns-pinctl")
	r = host.RunCmd(time.Minute, nil, nil, bin, "host-exec")
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "usage: netns-pinctl host-exec")
	r = host.RunCmd(time.Minute, nil, nil, bin, "host-exec", "host-exec", "list")
	assert.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "usage: netns-pinctl host-exec", "no host-exec of host-exec")
}

package netnsstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// mountFlags of a descriptor: a shared bind mount is shared and its own
// mount point; a private one is neither shared nor, below its root, a
// mount point; a folder renamed after its open is still found.
func TestMountFlags(t *testing.T) {
	dir := t.TempDir()
	shared, private, below := filepath.Join(dir, "shared"), filepath.Join(dir, "private"), filepath.Join(dir, "private", "below")
	for _, d := range []string{shared, private} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, unix.Mount(d, d, "", unix.MS_BIND, ""))
		t.Cleanup(func() { assert.NoError(t, unix.Unmount(d, unix.MNT_DETACH)) })
	}
	require.NoError(t, unix.Mount("", shared, "", unix.MS_SHARED, ""))
	require.NoError(t, unix.Mount("", private, "", unix.MS_PRIVATE, ""))
	require.NoError(t, os.Mkdir(below, 0o755))

	s, root, err := mountFlagsOf(t, shared)
	require.NoError(t, err)
	assert.True(t, s && root, "the shared bind mount is shared and its own mount point")
	s, root, err = mountFlagsOf(t, private)
	require.NoError(t, err)
	assert.True(t, !s && root, "the private bind mount is its own mount point, not shared")
	s, root, err = mountFlagsOf(t, below)
	require.NoError(t, err)
	assert.False(t, s || root, "a folder below a private mount is neither")

	fd, err := unix.Open(below, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, os.Mkdir(filepath.Join(private, "elsewhere"), 0o755))
	require.NoError(t, os.Rename(below, filepath.Join(private, "elsewhere", "below")))
	s, root, err = mountFlags(fd)
	require.NoError(t, err)
	assert.False(t, s || root, "found by the path it has now")
}

func mountFlagsOf(t *testing.T, path string) (shared, isRoot bool, err error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err, path)
	defer unix.Close(fd)
	return mountFlags(fd)
}

// FindPin finds a pin of an attachment under any pinDir, of the DEL's
// netns when that can be opened and of any netns otherwise; a pin of
// another netns under the same name (a stale one of another test run, a
// reused short container ID) is none of its business.
func TestFindPin(t *testing.T) {
	requireRoot(t)
	a, b := testNetns(t, ""), testNetns(t, "")
	dir := filepath.Join(hosttest.NewWorkDir(t, "findpin-"), "elsewhere", PinsSubdir)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	pin := filepath.Join(dir, "x.net1")
	require.NoError(t, os.WriteFile(pin, nil, 0o444))
	require.NoError(t, unix.Mount(a.Path, pin, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pin, unix.MNT_DETACH) })

	for _, tc := range []struct {
		name, netns, want string
	}{
		{"x.net1", a.Path, pin},
		{"x.net1", filepath.Join(t.TempDir(), "gone"), pin},
		{"x.net1", b.Path, ""},
		{"y.net1", a.Path, ""},
	} {
		got, err := FindPin(tc.name, tc.netns)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%s with CNI_NETNS %s", tc.name, tc.netns)
	}
}

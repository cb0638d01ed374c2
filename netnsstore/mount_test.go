package netnsstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// mountFlags answers from statx and statmount what mountinfo says, for
// mount points and folders below them, shared and private mounts alike.
func TestMountFlagsAgreeWithMountinfo(t *testing.T) {
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

	for _, p := range []string{"/", "/proc", "/sys", dir, shared, private, below} {
		m, err := containingMount(p)
		require.NoError(t, err, p)
		gotShared, gotRoot, err := mountFlags(p)
		require.NoError(t, err, p)
		assert.Equal(t, isShared(m), gotShared, "%s: shared", p)
		assert.Equal(t, m.Mountpoint == p, gotRoot, "%s: mount point", p)
	}
	s, root, err := mountFlags(shared)
	require.NoError(t, err)
	assert.True(t, s && root, "the shared bind mount is shared and its own mount point")
	s, root, err = mountFlags(below)
	require.NoError(t, err)
	assert.False(t, s || root, "a folder below a private mount is neither")
}

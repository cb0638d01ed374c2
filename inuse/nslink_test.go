package inuse

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The inode a procfs ns link names is the one its stat finds; a link that
// does not read "<kind>:[<inode>]" (a fixture's symlink to a plain file, a
// plain file) is not taken for one, and the caller stats.
func TestNsLinkIno(t *testing.T) {
	for _, kind := range []string{"net", "mnt"} {
		var st unix.Stat_t
		require.NoError(t, unix.Stat("/proc/self/ns/"+kind, &st))
		ino, ok, err := nsLinkIno("/proc/self/ns/"+kind, kind)
		require.NoError(t, err)
		assert.True(t, ok, kind)
		assert.Equal(t, st.Ino, ino, kind)
	}
	_, ok, err := nsLinkIno("/proc/self/ns/net", "mnt")
	require.NoError(t, err)
	assert.False(t, ok, "a net link is no mnt link")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644))
	for name, target := range map[string]string{"to-file": "plain", "lookalike": "net:[12x]", "short": "net:[]"} {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, name)))
		_, ok, err := nsLinkIno(filepath.Join(dir, name), "net")
		require.NoError(t, err, name)
		assert.False(t, ok, name)
	}
	_, ok, err = nsLinkIno(filepath.Join(dir, "plain"), "net")
	require.NoError(t, err)
	assert.False(t, ok, "a plain file")
	_, _, err = nsLinkIno(filepath.Join(dir, "missing"), "net")
	assert.True(t, isGone(err))
}

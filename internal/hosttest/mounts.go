package hosttest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// MountEntry is one line of a /proc/<pid>/mountinfo file, the escapes of
// its paths undone.
type MountEntry struct {
	Dev                      string // "major:minor"
	Root, Mountpoint, FSType string
	Source                   string
	Optional                 []string // optional fields: shared:N, master:N ...
}

// ReadMountinfo parses this mount namespace's mountinfo.
func ReadMountinfo(t *testing.T) []MountEntry {
	t.Helper()
	return ReadMountinfoFile(t, host.SelfMountinfo)
}

// ReadMountinfoFile parses the mountinfo file at path (another process's,
// to see its mount namespace).
func ReadMountinfoFile(t *testing.T, path string) []MountEntry {
	t.Helper()
	ms, err := host.ReadMountinfo(path, nil)
	require.NoError(t, err)
	out := make([]MountEntry, 0, len(ms))
	for _, m := range ms {
		out = append(out, MountEntry{
			Dev:  fmt.Sprintf("%d:%d", m.Major, m.Minor),
			Root: m.Root, Mountpoint: m.Mountpoint, FSType: m.FSType, Source: m.Source,
			Optional: strings.Fields(m.Optional),
		})
	}
	return out
}

// NsfsMountsOf returns the mount points of nsfs mounts (pins) of the given
// netns inode (root "net:[<ino>]") anywhere in this mount namespace.
func NsfsMountsOf(t *testing.T, ino uint64) []string {
	t.Helper()
	return NsfsMountsOfIn(t, host.SelfMountinfo, ino)
}

// NsfsMountsOfIn is NsfsMountsOf for the mount namespace of a mountinfo file.
func NsfsMountsOfIn(t *testing.T, mountinfo string, ino uint64) []string {
	t.Helper()
	out, err := host.NsfsMountsOf(mountinfo, ino)
	require.NoError(t, err)
	return out
}

// NewWorkDir makes a temporary folder (os.MkdirTemp pattern) for pin and
// state folders, caches and FUSE mounts. At cleanup it lazily unmounts what
// is left under it (deepest first: FUSE mounts and pins, then pinDir, which
// the plugin makes a shared bind mount) and removes it. It never runs
// RemoveAll across a mount: that would remove a pinned folder's content, and
// a dead FUSE mount would hang it.
func NewWorkDir(t *testing.T, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := unmountUnder(t, dir); err != nil {
			t.Errorf("cleanup: %v (left %s in place)", err, dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

// MountsUnder returns the mount points at dir or below it.
func MountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	out, err := host.MountsUnder(dir)
	require.NoError(t, err)
	return out
}

// unmountUnder lazily unmounts everything at dir or below it, deepest first,
// until nothing is left (mounts may be stacked or propagate back), logging
// each unmount.
func unmountUnder(t *testing.T, dir string) error {
	t.Helper()
	_, err := host.UnmountUnder(dir, t.Logf)
	return err
}

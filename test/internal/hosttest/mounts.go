package hosttest

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// SelfMountinfo is the mountinfo of this process's mount namespace.
const SelfMountinfo = "/proc/self/mountinfo"

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
	return ReadMountinfoFile(t, SelfMountinfo)
}

// ReadMountinfoFile parses the mountinfo file at path (another process's,
// to see its mount namespace).
func ReadMountinfoFile(t *testing.T, path string) []MountEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []MountEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		require.True(t, sep > 0 && sep+2 < len(f), "bad mountinfo line %q", line)
		out = append(out, MountEntry{
			Dev:        f[2],
			Root:       UnescapeMountinfo(f[3]),
			Mountpoint: UnescapeMountinfo(f[4]),
			Optional:   f[6:sep],
			FSType:     f[sep+1],
			Source:     UnescapeMountinfo(f[sep+2]),
		})
	}
	return out
}

// UnescapeMountinfo undoes the kernel's octal escapes (\040 for space ...).
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// NsfsMountsOf returns the mount points of nsfs mounts (pins) of the given
// netns inode (root "net:[<ino>]") anywhere in this mount namespace.
func NsfsMountsOf(t *testing.T, ino uint64) []string {
	t.Helper()
	return NsfsMountsOfIn(t, SelfMountinfo, ino)
}

// NsfsMountsOfIn is NsfsMountsOf for the mount namespace of a mountinfo file.
func NsfsMountsOfIn(t *testing.T, mountinfo string, ino uint64) []string {
	t.Helper()
	want := fmt.Sprintf("net:[%d]", ino)
	var out []string
	for _, m := range ReadMountinfoFile(t, mountinfo) {
		if m.Root == want {
			out = append(out, m.Mountpoint)
		}
	}
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
		if err := UnmountUnder(t, dir); err != nil {
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
	var out []string
	for _, m := range ReadMountinfo(t) {
		if m.Mountpoint == dir || strings.HasPrefix(m.Mountpoint, dir+"/") {
			out = append(out, m.Mountpoint)
		}
	}
	return out
}

// UnmountUnder lazily unmounts everything at dir or below it, deepest first,
// until nothing is left (mounts may be stacked or propagate back).
func UnmountUnder(t *testing.T, dir string) error {
	t.Helper()
	for range 20 {
		mps := MountsUnder(t, dir)
		if len(mps) == 0 {
			return nil
		}
		// deepest first: pins before pinDir
		sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
		for _, mp := range mps {
			t.Logf("cleanup: umount -l %s", mp)
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("umount -l %s: %w", mp, err)
			}
		}
	}
	return fmt.Errorf("mounts remain under %s: %v", dir, MountsUnder(t, dir))
}

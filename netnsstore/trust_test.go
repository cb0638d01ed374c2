package netnsstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/hosttest"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// Every directory on the way to pinDir and stateDir must be root-owned and
// not writable by group or others (a sticky root-owned ancestor such as
// /tmp excepted), and none may be a symlink: whoever could write one could
// rename the directory away and put another in its place. Open and
// CheckTrustedDir (what `check` runs) apply the one rule, name the
// offending directory, and Open creates nothing below it.
func TestEveryAncestorOfTheDirectoriesIsTrusted(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		// setup makes the tree below root and returns the parent that
		// pinDir and stateDir go in and the directory the error must name
		// ("" when the tree is acceptable).
		setup func(t *testing.T, root string) (parent, offender string)
		why   string
	}{
		{"a 0777 parent", func(t *testing.T, root string) (string, string) {
			p := mkdirMode(t, filepath.Join(root, "open"), 0o777)
			return p, p
		}, "has mode -rwxrwxrwx: group or others may write"},
		{"a group-writable ancestor", func(t *testing.T, root string) (string, string) {
			a := mkdirMode(t, filepath.Join(root, "group"), 0o775)
			return mkdirMode(t, filepath.Join(a, "below"), 0o755), a
		}, "has mode -rwxrwxr-x: group or others may write"},
		{"a symlinked parent", func(t *testing.T, root string) (string, string) {
			real := mkdirMode(t, filepath.Join(root, "real"), 0o755)
			link := filepath.Join(root, "link")
			require.NoError(t, os.Symlink(real, link))
			return link, link
		}, "is a symlink"},
		{"an ancestor owned by another user", func(t *testing.T, root string) (string, string) {
			u := mkdirMode(t, filepath.Join(root, "user"), 0o755)
			require.NoError(t, os.Chown(u, 1000, 1000))
			return mkdirMode(t, filepath.Join(u, "below"), 0o755), u
		}, "is owned by uid 1000"},
		{"a sticky root-owned ancestor", func(t *testing.T, root string) (string, string) {
			return mkdirMode(t, filepath.Join(root, "sticky"), 0o1777|os.ModeSticky), ""
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hosttest.NewWorkDir(t, "trust-")
			parent, offender := tc.setup(t, root)
			pinDir, stateDir := filepath.Join(parent, "pins-root"), filepath.Join(parent, "state")
			s, err := Open(pinDir, stateDir, Options{InUse: notInUse})
			if offender == "" {
				require.NoError(t, err)
				s.Close()
				require.NoError(t, CheckTrustedDir(pinDir))
				require.NoError(t, CheckTrustedDir(stateDir))
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), offender+" (on the way to "+filepath.Dir(offender))
			assert.Contains(t, err.Error(), ") "+tc.why)
			_, serr := os.Lstat(filepath.Join(offender, "state"))
			assert.ErrorIs(t, serr, os.ErrNotExist, "nothing is created below %s", offender)

			// check sees what Open sees: the directories themselves are
			// fine (made here, 0700), their ancestor is not.
			require.NoError(t, os.MkdirAll(stateDir, 0o700))
			err = CheckTrustedDir(stateDir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), offender+" (on the way to "+filepath.Dir(offender))
			assert.Contains(t, err.Error(), ") "+tc.why)
		})
	}
}

// pinDir or stateDir itself may not be writable by others even when
// sticky: the rule's exception is for ancestors.
func TestStickyDirectoryItselfIsRefused(t *testing.T) {
	requireRoot(t)
	root := hosttest.NewWorkDir(t, "trust-")
	state := mkdirMode(t, filepath.Join(root, "state"), 0o1777|os.ModeSticky)
	err := CheckTrustedDir(state)
	require.Error(t, err)
	assert.Contains(t, err.Error(), state+" has mode")
	_, err = Open(filepath.Join(root, "pins-root"), state, Options{InUse: notInUse})
	require.Error(t, err)
	assert.Contains(t, err.Error(), state+" has mode")
}

// pinDir swapped for another directory after it was opened and checked:
// the bind mount ensureShared makes lands on the directory that was
// checked, not on the one now at its path.
func TestEnsureSharedMountsTheCheckedDirectory(t *testing.T) {
	requireRoot(t)
	root := hosttest.NewWorkDir(t, "trust-")
	// A private mount, so that pinDir is on no shared one and gets bound.
	require.NoError(t, unix.Mount(root, root, "", unix.MS_BIND, ""))
	require.NoError(t, unix.Mount("", root, "", unix.MS_PRIVATE, ""))
	pinDir := mkdirMode(t, filepath.Join(root, "pins-root"), 0o755)
	fd, err := openTrustedDir(pinDir, false, 0)
	require.NoError(t, err)
	defer unix.Close(fd)

	orig := filepath.Join(root, "orig")
	require.NoError(t, os.Rename(pinDir, orig))
	mkdirMode(t, pinDir, 0o755) // the decoy

	changed, err := ensureShared(pinDir, fd)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.True(t, mountedAt(t, orig), "the checked directory is bound onto itself")
	assert.False(t, mountedAt(t, pinDir), "the directory swapped in is not mounted")
	m, err := containingMount(orig)
	require.NoError(t, err)
	assert.Equal(t, orig, m.Mountpoint)
	assert.NotZero(t, nsinfo.PeerGroup(m), "and made shared")
}

// pinDir swapped after the store opened it, with a pin of another netns
// at the same name in the directory swapped in: unpin unmounts the
// store's pin, never the one its path now names.
func TestUnpinUnmountsThePinItOpened(t *testing.T) {
	s := testStore(t)
	require.NoError(t, s.openPinDir())
	a, b := testNetns(t, ""), testNetns(t, "")
	src, id, err := openNetns(a.Path)
	require.NoError(t, err)
	defer src.Close()
	require.NoError(t, s.mountPin(src, id, "x.net1"))

	orig := s.PinDir + ".orig"
	require.NoError(t, os.Rename(s.PinDir, orig))
	decoy := filepath.Join(mkdirMode(t, filepath.Join(mkdirMode(t, s.PinDir, 0o755), PinsSubdir), 0o755), "x.net1")
	require.NoError(t, os.WriteFile(decoy, nil, 0o444))
	require.NoError(t, unix.Mount(b.Path, decoy, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(decoy, unix.MNT_DETACH) })

	require.NoError(t, s.unpin("x.net1"))
	assert.False(t, mountedAt(t, filepath.Join(orig, PinsSubdir, "x.net1")), "the store's pin is released")
	assert.True(t, mountedAt(t, decoy), "the pin at the swapped-in path is untouched")
}

func mkdirMode(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, mode))
	return dir
}

package hosttest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// NsfsMagic is NSFS_MAGIC from linux/magic.h: the statfs type of namespace
// files, which tells a pin (an nsfs bind mount) from a plain file.
const NsfsMagic = 0x6e736673

// NSID is the identity of a namespace file: the nsfs device and inode. Two
// paths lead to the same namespace exactly when their NSIDs are equal.
type NSID struct{ Dev, Ino uint64 }

func (n NSID) String() string { return fmt.Sprintf("net:[%d] (dev %d)", n.Ino, n.Dev) }

// NSIDOf stats a namespace path (following symlinks) and requires nsfs.
func NSIDOf(path string) (NSID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return NSID{}, err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return NSID{}, err
	}
	if fs.Type != NsfsMagic {
		return NSID{}, fmt.Errorf("%s is not an nsfs file (statfs type %#x)", path, fs.Type)
	}
	return NSID{Dev: st.Dev, Ino: st.Ino}, nil
}

// StatNS is NSIDOf that fails the test on error.
func StatNS(t *testing.T, path string) NSID {
	t.Helper()
	id, err := NSIDOf(path)
	require.NoError(t, err, "stat %s", path)
	return id
}

// NetnsHandle is a named network namespace made with `ip netns add`, as a
// container runtime makes a pod's.
type NetnsHandle struct {
	Name string
	Path string // /run/netns/<Name>
	ID   NSID
}

// Exists reports whether the namespace's name is still there.
func (n *NetnsHandle) Exists() bool {
	_, err := os.Lstat(n.Path)
	return err == nil
}

// NewNetns makes a network namespace named <prefix>-<random>, with lo up,
// deleted at cleanup unless the test deleted it already.
func NewNetns(t *testing.T, prefix string) *NetnsHandle {
	t.Helper()
	n := &NetnsHandle{Name: prefix + "-" + RandHex(8)}
	n.Path = filepath.Join("/run/netns", n.Name)
	MustRun(t, "ip", "netns", "add", n.Name)
	t.Cleanup(func() {
		if n.Exists() {
			if r := RunCmd(CmdTimeout, nil, nil, "ip", "netns", "del", n.Name); r.Err != nil {
				t.Errorf("cleanup: ip netns del %s: %s", n.Name, r)
			}
		}
	})
	MustRun(t, "ip", "-n", n.Name, "link", "set", "lo", "up")
	n.ID = StatNS(t, n.Path)
	return n
}

// Delete removes the namespace's name, as a runtime does when it removes a
// sandbox (the namespace lives on while anything pins or holds it).
func (n *NetnsHandle) Delete(t *testing.T) {
	t.Helper()
	MustRun(t, "ip", "netns", "del", n.Name)
	_, err := os.Lstat(n.Path)
	require.True(t, os.IsNotExist(err), "%s still exists after ip netns del", n.Path)
}

// LinkExists reports whether a link of that name is in this (the host's)
// network namespace.
func LinkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

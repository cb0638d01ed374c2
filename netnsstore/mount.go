package netnsstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// ensureShared makes the mount that holds pinDir a shared one, so that pins
// made later propagate into mount namespaces that received pinDir (csi node
// plugins mount the kubelet plugins folder with Bidirectional propagation)
// and their release propagates too. Like iproute2 does for /run/netns:
// bind pinDir onto itself if it is no mount point, then make it shared.
// It reports whether it mounted anything: descriptors opened before then
// refer to the covered directory and must be opened again.
//
// dirfd is pinDir opened by openTrustedDir. Every mount goes through that
// descriptor (open_tree and move_mount, then /proc/self/fd of the new
// mount's), never through a path resolved earlier, so a directory swapped
// in after the check is never the one mounted.
func ensureShared(pinDir string, dirfd int) (changed bool, err error) {
	shared, isRoot, err := mountFlags(dirfd)
	if err != nil {
		return false, err
	}
	if shared {
		return false, nil
	}
	top := dirfd
	if !isRoot {
		// A copy of the tree at dirfd (open_tree), attached onto dirfd
		// itself (move_mount): both ends are the descriptor, and the
		// copy's descriptor is then the new mount's root, which is what
		// is made shared; no path is looked up again.
		tree, err := unix.OpenTree(dirfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		if err != nil {
			return false, fmt.Errorf("bind %s onto itself: open_tree: %w", pinDir, err)
		}
		defer unix.Close(tree)
		if err := unix.MoveMount(tree, "", dirfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return false, fmt.Errorf("bind %s onto itself: move_mount: %w", pinDir, err)
		}
		changed, top = true, tree
	}
	if err := unix.Mount("", fdPath(top), "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return true, fmt.Errorf("make %s shared: %w", pinDir, err)
	}
	return true, nil
}

// fdPath is the /proc/self/fd path of fd: a mount or unmount by it acts
// on what fd was opened on, whatever its path names now.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// mountFlags tells whether the mount that holds fd's path is shared and
// whether that path is its mount point, from mountinfo. mountinfo names
// mounts by path: the path fd has now, read only to find its mount
// (nothing is mounted by it).
func mountFlags(fd int) (shared, isRoot bool, err error) {
	path, err := os.Readlink(fdPath(fd))
	if err != nil {
		return false, false, err
	}
	m, err := containingMount(path)
	if err != nil {
		return false, false, err
	}
	return nsinfo.PeerGroup(m) != 0, m.Mountpoint == path, nil
}

// containingMount returns the mount that holds path.
func containingMount(path string) (*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	if m := nsinfo.HoldingMount(path, mounts); m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("no mount holds %s", path)
}

// FindPin looks for a pin of attachment under any pinDir: a netns mount
// whose mount point is <dir>/pins/<attachment>, of the netns at netnsPath
// when that can be opened (else of any netns: the DEL's CNI_NETNS may be
// gone). It is for a DEL that finds no record: the network's pinDir and
// stateDir may have changed since the ADD that pinned it, and such a pin is
// no less in use. "" when none.
func FindPin(attachment, netnsPath string) (string, error) {
	root := ""
	if f, id, err := openNetns(netnsPath); err == nil {
		f.Close()
		root = fmt.Sprintf("net:[%d]", id.Ino)
	}
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != "nsfs" || filepath.Base(m.Mountpoint) != attachment ||
			filepath.Base(filepath.Dir(m.Mountpoint)) != PinsSubdir || (root != "" && m.Root != root), false
	})
	if err != nil {
		return "", fmt.Errorf("look for a pin of %s: %w", attachment, err)
	}
	if len(ms) == 0 {
		return "", nil
	}
	return ms[0].Mountpoint, nil
}

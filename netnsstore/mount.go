package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

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

// mountFlags tells whether the mount that holds path is shared and
// whether path is its mount point: from statx and statmount where the
// kernel has them (Linux 6.8), else from mountinfo, which the kernel
// renders whole for every read (about 0.4 ms of each holder ADD).
func mountFlags(fd int) (shared, isRoot bool, err error) {
	shared, isRoot, err = statmountFlags(fd)
	if err == nil || !errors.Is(err, errNoStatmount) {
		return shared, isRoot, err
	}
	// mountinfo names mounts by path: the path fd has now, read only to
	// find its mount (nothing is mounted by it).
	path, err := os.Readlink(fdPath(fd))
	if err != nil {
		return false, false, err
	}
	m, err := containingMount(path)
	if err != nil {
		return false, false, err
	}
	return isShared(m), m.Mountpoint == path, nil
}

// errNoStatmount: the kernel has no statmount or no unique mount IDs.
var errNoStatmount = errors.New("statmount not available")

// statmountFlags is mountFlags by statx (the unique ID of the mount that
// holds path, and whether path is that mount's root) and statmount (its
// propagation).
func statmountFlags(fd int) (shared, isRoot bool, err error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
			return false, false, errNoStatmount
		}
		return false, false, fmt.Errorf("statx %s: %w", fdPath(fd), err)
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 || stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, false, errNoStatmount
	}
	prop, err := mountPropagation(stx.Mnt_id)
	if err != nil {
		return false, false, err
	}
	return prop&unix.MS_SHARED != 0, stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// statmount(2)'s request and the head of its answer (linux/mount.h),
// up to mnt_propagation.
type mntIDReq struct {
	size  uint32
	spare uint32
	mntID uint64
	param uint64
	nsID  uint64
}

type statmountHead struct {
	size           uint32
	mntOpts        uint32
	mask           uint64
	sbDevMajor     uint32
	sbDevMinor     uint32
	sbMagic        uint64
	sbFlags        uint32
	fsType         uint32
	mntID          uint64
	mntParentID    uint64
	mntIDOld       uint32
	mntParentIDOld uint32
	mntAttr        uint64
	mntPropagation uint64
	mntPeerGroup   uint64
	mntMaster      uint64
	propagateFrom  uint64
	mntRoot        uint32
	mntPoint       uint32
	mntNsID        uint64
	spare          [64]uint64 // room for fields of newer kernels
}

const statmountMntBasic = 0x2 // STATMOUNT_MNT_BASIC

// mountPropagation is the propagation (MS_SHARED, MS_SLAVE, ...) of the
// mount with unique ID id, in this mount namespace.
func mountPropagation(id uint64) (uint64, error) {
	req := mntIDReq{size: 24, mntID: id, param: statmountMntBasic}
	var sm statmountHead
	_, _, e := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)), uintptr(unsafe.Pointer(&sm)),
		unsafe.Sizeof(sm), 0, 0, 0)
	switch {
	case e == unix.ENOSYS:
		return 0, errNoStatmount
	case e != 0:
		return 0, fmt.Errorf("statmount of mount %d: %w", id, e)
	case sm.mask&statmountMntBasic == 0:
		return 0, errNoStatmount
	}
	return sm.mntPropagation, nil
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

func isShared(m *mountinfo.Info) bool { return nsinfo.PeerGroup(m) != 0 }

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

package netnsstore

import (
	"fmt"
	"path/filepath"

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
func ensureShared(pinDir string) (changed bool, err error) {
	real, err := filepath.EvalSymlinks(pinDir)
	if err != nil {
		return false, err
	}
	shared, isRoot, err := mountFlags(real)
	if err != nil {
		return false, err
	}
	if shared {
		return false, nil
	}
	if !isRoot {
		if err := unix.Mount(real, real, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return false, fmt.Errorf("bind %s onto itself: %w", real, err)
		}
	}
	if err := unix.Mount("", real, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return true, fmt.Errorf("make %s shared: %w", real, err)
	}
	return true, nil
}

// mountFlags tells whether the mount that holds path is shared and
// whether path is its mount point, from mountinfo. (statx and statmount,
// Linux 6.8, tell the same without the kernel rendering mountinfo whole:
// 0.4 ms of a holder ADD, which stays within its target without them;
// docs/performance.md.)
func mountFlags(path string) (shared, isRoot bool, err error) {
	m, err := containingMount(path)
	if err != nil {
		return false, false, err
	}
	return isShared(m), m.Mountpoint == path, nil
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

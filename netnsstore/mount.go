package netnsstore

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
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
	m, err := containingMount(real)
	if err != nil {
		return false, err
	}
	if isShared(m) {
		return false, nil
	}
	if m.Mountpoint != real {
		if err := unix.Mount(real, real, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return false, fmt.Errorf("bind %s onto itself: %w", real, err)
		}
	}
	if err := unix.Mount("", real, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return true, fmt.Errorf("make %s shared: %w", real, err)
	}
	return true, nil
}

// containingMount returns the mount whose mount point is the longest
// prefix of path.
func containingMount(path string) (*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var best *mountinfo.Info
	for _, m := range mounts {
		// Later entries are mounted over earlier ones at the same point.
		if best == nil || len(m.Mountpoint) >= len(best.Mountpoint) {
			best = m
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no mount holds %s", path)
	}
	return best, nil
}

func isShared(m *mountinfo.Info) bool {
	for _, f := range strings.Fields(m.Optional) {
		if strings.HasPrefix(f, "shared:") {
			return true
		}
	}
	return false
}

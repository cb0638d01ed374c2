package host

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// SelfMountinfo is the mountinfo of this process's mount namespace.
const SelfMountinfo = "/proc/self/mountinfo"

// ReadMountinfo parses the mountinfo file at path (SelfMountinfo, or another
// process's to see its mount namespace), keeping the entries filter keeps
// (nil: all).
func ReadMountinfo(path string, filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, filter)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ms, nil
}

// MountsUnder returns the mount points at dir or below it, in this mount
// namespace; a path mounted several times appears several times.
func MountsUnder(dir string) ([]string, error) {
	return mountpoints(SelfMountinfo, mountinfo.PrefixFilter(dir))
}

// NsfsMountsOf returns the mount points of nsfs mounts (pins) of the
// network namespace with inode ino (root "net:[<ino>]") in the mount
// namespace of a mountinfo file.
func NsfsMountsOf(mountinfoPath string, ino uint64) ([]string, error) {
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	return mountpoints(mountinfoPath, func(m *mountinfo.Info) (skip, stop bool) { return m.Root != want, false })
}

// mountpoints lists the mount points of the entries filter keeps.
func mountpoints(mountinfoPath string, filter mountinfo.FilterFunc) ([]string, error) {
	ms, err := ReadMountinfo(mountinfoPath, filter)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// UnmountUnder lazily unmounts everything at dir or below it, deepest first
// (pins before pinDir, which the plugin makes a bind mount onto itself),
// until nothing is left (mounts may be stacked or propagate back). It
// returns how many unmounts it made; logf, when not nil, hears of each.
func UnmountUnder(dir string, logf func(format string, args ...any)) (int, error) {
	n := 0
	for range 20 {
		mps, err := MountsUnder(dir)
		if err != nil {
			return n, err
		}
		if len(mps) == 0 {
			return n, nil
		}
		slices.SortStableFunc(mps, func(a, b string) int { return len(b) - len(a) })
		for _, mp := range mps {
			if logf != nil {
				logf("cleanup: umount -l %s", mp)
			}
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return n, fmt.Errorf("umount -l %s: %w", mp, err)
			}
			n++
		}
	}
	mps, err := MountsUnder(dir)
	if err != nil {
		return n, err
	}
	return n, fmt.Errorf("mounts remain under %s: %v", dir, mps)
}

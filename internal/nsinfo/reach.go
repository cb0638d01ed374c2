package nsinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// PinsReachHost returns nil when a mount made under dir by this process
// appears in the host's mount namespace, where ceph-csi looks for it:
//
//   - this process runs in the host's mount namespace (the runtime or
//     Multus thin mode exec'd it), or
//   - the mount that holds dir here is shared, in a peer group that a mount
//     of the host belongs to, so that mounts and unmounts under it
//     propagate both ways (Multus thick mode runs delegates in its daemon
//     container, which needs dir as a volume with Bidirectional
//     propagation).
//
// Otherwise the error says which volume is missing. Only the second case
// reads mountinfo; the first compares mount namespace identities.
func PinsReachHost(dir string) error {
	ref, same, err := HostMountNS()
	if err != nil {
		return err
	}
	if same {
		return nil
	}
	here, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	// mountinfo names mount points by their real paths.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	host, err := readMounts(ref + "/mountinfo")
	if err != nil {
		return fmt.Errorf("this process runs in another mount namespace than the host's (%s) and the host's mounts cannot be read to check that pins reach it: %w", ref, err)
	}
	return reach(dir, here, host)
}

// HostMountNS returns the /proc folder of a host process (/proc/1, else
// /proc/2) and whether this process shares its mount namespace.
func HostMountNS() (ref string, same bool, err error) {
	self, err := os.Stat("/proc/self/ns/mnt")
	if err != nil {
		return "", false, fmt.Errorf("stat /proc/self/ns/mnt: %w", err)
	}
	// The host's mount namespace is PID 1's; where /proc/1/ns is unreadable
	// (some VMs and sandboxes) it is PID 2's, kthreadd, which the kernel
	// starts in the initial namespaces.
	var errs []error
	for _, ref := range []string{"/proc/1", "/proc/2"} {
		if ref == "/proc/2" {
			if comm, _ := os.ReadFile("/proc/2/comm"); strings.TrimSpace(string(comm)) != "kthreadd" {
				errs = append(errs, errors.New("PID 2 is not kthreadd"))
				continue
			}
		}
		fi, err := os.Stat(ref + "/ns/mnt")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return ref, os.SameFile(self, fi), nil
	}
	return "", false, fmt.Errorf("cannot find the host mount namespace: %w", errors.Join(errs...))
}

func readMounts(path string) ([]*mountinfo.Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return m, nil
}

// errNoPropagation: pins made in pinDir here would stay in this mount
// namespace.
var errNoPropagation = errors.New("pins made here would not reach the host")

// reach decides, from this mount namespace's mounts and the host's,
// whether a mount under dir here propagates to the host.
func reach(dir string, here, host []*mountinfo.Info) error {
	dir = filepath.Clean(dir)
	m := HoldingMount(dir, here)
	if m == nil {
		return fmt.Errorf("no mount holds %s in this mount namespace", dir)
	}
	fix := fmt.Sprintf("this process runs in another mount namespace than the host's (Multus thick mode runs delegates in its daemon container): "+
		"mount the host folder %s into that container at the same path under its chrootDir (/hostroot%s in Multus' DaemonSet) with mountPropagation: Bidirectional", dir, dir)
	group := PeerGroup(m)
	if group == 0 {
		propagation := "private" // as findmnt names it
		if strings.Contains(m.Optional, "master:") {
			propagation = "a slave (" + m.Optional + "): mounts from the host reach it, not the other way"
		}
		return fmt.Errorf("%w: %s is on the mount at %s, which is %s; %s", errNoPropagation, dir, m.Mountpoint, propagation, fix)
	}
	for _, h := range host {
		if PeerGroup(h) == group && within(m.Root, h.Root) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is on the mount at %s, shared in peer group %d, which no mount of the host belongs to; %s", errNoPropagation, dir, m.Mountpoint, group, fix)
}

// HoldingMount returns the mount of mounts whose mount point is the
// longest prefix of dir (nil when none is); of several at that point, the
// last one listed, which is on top.
func HoldingMount(dir string, mounts []*mountinfo.Info) *mountinfo.Info {
	var best *mountinfo.Info
	for _, m := range mounts {
		if within(dir, m.Mountpoint) && (best == nil || len(m.Mountpoint) >= len(best.Mountpoint)) {
			best = m
		}
	}
	return best
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// PeerGroup returns N of the mount's "shared:N" tag, or 0 when the mount
// is not shared.
func PeerGroup(m *mountinfo.Info) int {
	for _, f := range strings.Fields(m.Optional) {
		if v, ok := strings.CutPrefix(f, "shared:"); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return 0
}

// Package nsinfo answers questions about namespaces that netns-pin does not
// own: the addresses of a network namespace, and whether this process runs
// in the host's mount namespace.
package nsinfo

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// GlobalAddrs lists every global-scope address on every interface of the
// network namespace open at fd. These are the addresses a Ceph monitor sees
// a kernel client connect from, which is how rbd devices and CephFS
// clients are matched to a pin.
func GlobalAddrs(fd int) ([]netip.Addr, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(fd))
	if err != nil {
		return nil, fmt.Errorf("netlink in netns: %w", err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.Scope != unix.RT_SCOPE_UNIVERSE || a.IP.IsLinkLocalUnicast() {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// HostMountNS tells whether this process runs in the host's mount
// namespace, and which reference it compared with. Pins made in any other
// mount namespace (Multus thick mode runs delegates in its own container)
// are invisible to ceph-csi and vanish with that namespace.
// The reference is PID 1; where /proc/1/ns is unreadable (some VMs and
// sandboxes) PID 2, kthreadd, which the kernel starts in the initial
// namespaces.
func HostMountNS() (same bool, reference string, err error) {
	self, err := os.Stat("/proc/self/ns/mnt")
	if err != nil {
		return false, "", fmt.Errorf("stat /proc/self/ns/mnt: %w", err)
	}
	var errs []error
	for _, ref := range []string{"/proc/1/ns/mnt", "/proc/2/ns/mnt"} {
		if ref == "/proc/2/ns/mnt" && !isKthreadd() {
			errs = append(errs, errors.New("PID 2 is not kthreadd"))
			continue
		}
		fi, err := os.Stat(ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return os.SameFile(self, fi), ref, nil
	}
	return false, "", fmt.Errorf("cannot find the host mount namespace: %w", errors.Join(errs...))
}

func isKthreadd() bool {
	b, err := os.ReadFile("/proc/2/comm")
	return err == nil && strings.TrimSpace(string(b)) == "kthreadd"
}

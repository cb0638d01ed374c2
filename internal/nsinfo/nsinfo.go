// Package nsinfo answers questions about namespaces that netns-pin does not
// own: the addresses of a network namespace, and whether this process runs
// in the host's mount namespace.
package nsinfo

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/ns"
)

// GlobalAddrs lists every global-scope address on every interface of the
// network namespace open at fd. These are the addresses a Ceph monitor sees
// a kernel client connect from, which is how rbd devices and CephFS
// clients are matched to a pin.
//
// One RTM_GETADDR dump from a thread that entered the netns, with the
// standard library's netlink helpers: a netlink library would add a
// quarter to the binary that every pod's ADD and DEL execs, for one dump.
func GlobalAddrs(fd int) ([]netip.Addr, error) {
	target, err := ns.GetNS("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("netlink in netns: %w", err)
	}
	defer target.Close()
	var out []netip.Addr
	err = target.Do(func(ns.NetNS) error {
		rib, err := syscall.NetlinkRIB(syscall.RTM_GETADDR, syscall.AF_UNSPEC)
		if err != nil {
			return fmt.Errorf("list addresses: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rib)
		if err != nil {
			return fmt.Errorf("list addresses: %w", err)
		}
		for _, m := range msgs {
			if ip, ok := globalAddr(m); ok {
				out = append(out, ip)
			}
		}
		return nil
	})
	return out, err
}

// globalAddr returns the address of one RTM_NEWADDR message when its
// scope is global and it is not link-local. IFA_LOCAL is the interface's
// own address (IFA_ADDRESS is the peer's on point-to-point links).
func globalAddr(m syscall.NetlinkMessage) (netip.Addr, bool) {
	if m.Header.Type != syscall.RTM_NEWADDR || len(m.Data) < syscall.SizeofIfAddrmsg {
		return netip.Addr{}, false
	}
	ifa := (*syscall.IfAddrmsg)(unsafe.Pointer(&m.Data[0]))
	if ifa.Scope != syscall.RT_SCOPE_UNIVERSE {
		return netip.Addr{}, false
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return netip.Addr{}, false
	}
	var addr netip.Addr
	for _, a := range attrs {
		ip, ok := netip.AddrFromSlice(a.Value)
		switch {
		case !ok:
		case a.Attr.Type == syscall.IFA_LOCAL:
			addr = ip
		case a.Attr.Type == syscall.IFA_ADDRESS && !addr.IsValid():
			addr = ip
		}
	}
	addr = addr.Unmap()
	return addr, addr.IsValid() && !addr.IsLinkLocalUnicast()
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

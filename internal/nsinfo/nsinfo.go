// Package nsinfo answers questions about namespaces that netns-pin does not
// own: the addresses of a network namespace, and whether a mount made by
// this process reaches the host's mount namespace.
package nsinfo

import (
	"fmt"
	"net/netip"
	"strconv"
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

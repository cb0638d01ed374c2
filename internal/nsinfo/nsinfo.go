// Package nsinfo answers questions about namespaces that netns-pin does not
// own: the addresses of a network namespace, and whether a mount made by
// this process reaches the host's mount namespace.
package nsinfo

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// GlobalAddrs lists every global-scope address on every interface of the
// network namespace open at fd. These are the addresses a Ceph monitor sees
// a kernel client connect from, which is how rbd devices and CephFS
// clients are matched to a pin.
//
// A dump that addresses changed under is interrupted and may have skipped
// some that stayed (a client's among them): it is read again, for up to
// dumpPatience, and then it is an error.
func GlobalAddrs(fd int) ([]netip.Addr, error) {
	var out []netip.Addr
	err := Do(fd, func() error {
		// A netlink socket stays in the netns it was made in.
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink in netns: %w", err)
		}
		defer h.Close()
		deadline := time.Now().Add(dumpPatience)
		for dumps := 1; ; dumps++ {
			addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
			switch {
			case err == nil:
				// The global-scope addresses that are not link-local: the
				// interface's own (netlink puts IFA_LOCAL there, the peer's
				// IFA_ADDRESS of a point-to-point link in Peer).
				for _, a := range addrs {
					if a.Scope != unix.RT_SCOPE_UNIVERSE || a.IPNet == nil {
						continue
					}
					if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.Unmap().IsLinkLocalUnicast() {
						out = append(out, ip.Unmap())
					}
				}
				return nil
			case !errors.Is(err, netlink.ErrDumpInterrupted):
				return fmt.Errorf("list addresses: %w", err)
			case time.Now().After(deadline):
				return fmt.Errorf("list addresses: they kept changing during %d dumps in %s", dumps, dumpPatience)
			}
		}
	})
	return out, err
}

// Do runs fn on an OS thread that has entered the network namespace open
// at fd (ns.Do: should the thread fail to return to this process's
// netns, it ends rather than serve another goroutine there).
func Do(fd int, fn func() error) error {
	target, err := ns.GetNS(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	defer target.Close()
	return target.Do(func(ns.NetNS) error { return fn() })
}

// dumpPatience bounds the dumps of a netns whose addresses keep changing.
const dumpPatience = 2 * time.Second

// Package nsinfo answers questions about namespaces that netns-pin does not
// own: the addresses of a network namespace, and whether a mount made by
// this process reaches the host's mount namespace.
package nsinfo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GlobalAddrs lists every global-scope address on every interface of the
// network namespace open at fd. These are the addresses a Ceph monitor sees
// a kernel client connect from, which is how rbd devices and CephFS
// clients are matched to a pin.
//
// One RTM_GETADDR dump on a netlink socket made inside the netns, with the
// standard library's netlink helpers: a netlink library would add a
// quarter to the binary that every pod's ADD and DEL execs, for one dump.
// A dump that addresses changed under is marked NLM_F_DUMP_INTR and may
// have skipped some that stayed (a client's among them): it is read again,
// for up to dumpPatience, and then it is an error.
func GlobalAddrs(fd int) ([]netip.Addr, error) {
	sock, err := routeSocketIn(fd)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns: %w", err)
	}
	defer unix.Close(sock)
	buf := make([]byte, 32<<10) // a dump's messages are at most a page or two
	deadline := time.Now().Add(dumpPatience)
	for seq := uint32(1); ; seq++ {
		out, whole, err := dumpAddrs(sock, seq, buf)
		if err != nil || whole {
			return out, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("list addresses: they kept changing during %d dumps in %s", seq, dumpPatience)
		}
	}
}

// dumpPatience bounds the dumps of a netns whose addresses keep changing.
const dumpPatience = 2 * time.Second

// dumpAddrs runs one dump; whole is false when the kernel marked it
// interrupted.
func dumpAddrs(sock int, seq uint32, buf []byte) (out []netip.Addr, whole bool, err error) {
	req := make([]byte, syscall.NLMSG_HDRLEN+syscall.SizeofRtGenmsg)
	*(*syscall.NlMsghdr)(unsafe.Pointer(&req[0])) = syscall.NlMsghdr{
		Len: uint32(len(req)), Type: syscall.RTM_GETADDR, Flags: syscall.NLM_F_DUMP | syscall.NLM_F_REQUEST, Seq: seq,
	}
	req[syscall.NLMSG_HDRLEN] = syscall.AF_UNSPEC
	if err := unix.Sendto(sock, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, false, fmt.Errorf("list addresses: %w", err)
	}
	whole = true
	for {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		if err != nil {
			return nil, false, fmt.Errorf("list addresses: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, false, fmt.Errorf("list addresses: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // the rest of an earlier dump
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				whole = false
			}
			switch m.Header.Type {
			case syscall.NLMSG_DONE:
				return out, whole, nil
			case syscall.NLMSG_ERROR:
				return nil, false, fmt.Errorf("list addresses: %w", netlinkError(m))
			}
			if ip, ok := globalAddr(m); ok {
				out = append(out, ip)
			}
		}
	}
}

// routeSocketIn makes a NETLINK_ROUTE socket inside the netns open at fd;
// a socket stays in the netns it was made in.
func routeSocketIn(fd int) (int, error) {
	sock := -1
	err := InNetns(fd, func() error {
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlink socket: %w", err)
		}
		sock = s
		return nil
	})
	if err != nil && sock >= 0 {
		unix.Close(sock)
		sock = -1
	}
	return sock, err
}

// InNetns runs fn on an OS thread that has entered the netns open at fd.
// The thread is a goroutine's own, locked to it: should it fail to return
// to this process's netns, the goroutine ends locked and the runtime ends
// the thread with it, so no other goroutine ever runs in the wrong netns
// (the guarantee of plugins/pkg/ns's Do, without its opens and stats of
// the netns files, which cost a holder's ADD and DEL about 50 µs each).
func InNetns(fd int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open this thread's netns: %w", err)
			return
		}
		defer unix.Close(back)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(back, unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("setns back: %w", err)) // the thread ends with this goroutine
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// netlinkError is the error an NLMSG_ERROR message carries.
func netlinkError(m syscall.NetlinkMessage) error {
	if len(m.Data) < 4 {
		return errors.New("malformed netlink error")
	}
	if errno := -int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
		return syscall.Errno(errno)
	}
	return errors.New("netlink acknowledged a dump")
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

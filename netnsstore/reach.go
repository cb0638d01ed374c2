package netnsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// pinnedAs reports whether r's pin is a mount of r's netns. A pin that
// cannot be inspected is not known to be pinned.
func (s *Store) pinnedAs(r *Record) bool {
	id, mounted, err := s.pinState(r.Attachment)
	return err == nil && mounted && id == r.NetnsID()
}

// reach opens r's netns (named by the path it was opened by) by the first
// of these that still is that netns:
// its pin, the DEL's CNI_NETNS (hint), the runtime's path recorded at ADD,
// the CNI_NETNS of its first refused DEL. nil when none is: the pin was
// lost and the runtime's handles are gone (no such file, or no longer a
// netns); a path that cannot be looked at for another reason is an error.
// A runtime's netns path is a mount that holds its netns alive, so a path
// with r's identity is r's netns, not a later one that reuses its inode.
// An error when the pin cannot be inspected, or is a mount of r's netns
// that cannot be opened: the netns may well be in use, and a check that
// cannot look at it must not find it unused.
func (s *Store) reach(r *Record, hint string) (*os.File, error) {
	id, mounted, err := s.pinState(r.Attachment)
	if err != nil {
		return nil, err
	}
	if mounted && id == r.NetnsID() {
		p := s.pinPath(r.Attachment)
		f, fid, err := openNetns(p)
		if err != nil {
			return nil, fmt.Errorf("open pin: %w", err)
		}
		if fid != id {
			f.Close()
			return nil, fmt.Errorf("pin %s changed while it was opened", p)
		}
		return f, nil
	}
	var errs []error
	paths := []string{hint, r.NetnsPath}
	if r.Teardown != nil {
		paths = append(paths, r.Teardown.Netns) // the CNI_NETNS of a refused DEL
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		f, id, err := openNetns(p)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR), errors.Is(err, nsinfo.ErrNotNetns):
			continue // a runtime's path may be gone, or be something else now
		case err != nil:
			errs = append(errs, err) // it may lead to the netns: no proof that nothing does
			continue
		}
		if id == r.NetnsID() {
			return f, nil
		}
		f.Close()
	}
	return nil, errors.Join(errs...)
}

// UsesNow runs the in-use check on what a release of r would check,
// with the same settings, changing nothing: r's recorded addresses
// together with those its netns has now, and a file that is r's netns now
// (none when nothing reaches it). An error when r's netns cannot be
// looked at.
func (s *Store) UsesNow(r *Record) ([]Use, error) {
	h, err := s.reach(r, "")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	t := *r
	return s.checkNow(&t, h)
}

// checkNow is the in-use check of r as its netns is now: the addresses it
// has now join the recorded ones (a client keeps the address it came
// from), then every signal is read. h is the handle that reaches the
// netns; nil when nothing does (its pin and the runtime's path are gone).
// A held netns always lists its addresses; when it cannot, a client on an
// address added since ADD would go unseen: the check fails.
func (s *Store) checkNow(r *Record, h *os.File) ([]Use, error) {
	path := ""
	if h != nil {
		ips, err := addrsOf(int(h.Fd()))
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", h.Name(), err)
		}
		r.IPs, path = unionAddrs(r.IPs, ips), h.Name()
		s.steps.mark("addresses")
	}
	return s.uses(r, path)
}

// addrsOf lists a netns's addresses; tests make it fail.
var addrsOf = nsinfo.GlobalAddrs

// reachByProcess opens r's netns through a process the in-use check found
// inside it. A netns's identity is reused once it dies, so it is accepted
// only while it still has one of r's recorded addresses (or r recorded
// none).
func (s *Store) reachByProcess(r *Record, uses []Use) *os.File {
	for _, u := range uses {
		if u.PID <= 0 {
			continue
		}
		p := "/proc/" + strconv.Itoa(u.PID) + "/ns/net"
		f, id, err := openNetns(p)
		if err != nil {
			continue
		}
		ok := id == r.NetnsID() && len(r.IPs) == 0
		if id == r.NetnsID() && !ok {
			ips, err := nsinfo.GlobalAddrs(int(f.Fd()))
			ok = err == nil && slices.ContainsFunc(ips, func(ip netip.Addr) bool { return slices.Contains(r.IPs, ip.String()) })
		}
		if ok {
			return f
		}
		f.Close()
	}
	return nil
}

package netnsstore

import (
	"net/netip"
	"os"
	"slices"
	"strconv"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// handleFile is an open network namespace and the path it was opened by.
type handleFile struct {
	*os.File
	path string
}

// Close closes the namespace; a nil handle is fine.
func (h *handleFile) Close() {
	if h != nil && h.File != nil {
		h.File.Close()
	}
}

// pinnedAs reports whether r's pin is a mount of r's netns. A pin that
// cannot be inspected is not known to be pinned.
func (s *Store) pinnedAs(r *Record) bool {
	id, mounted, err := s.pinState(r.Attachment)
	return err == nil && mounted && id == r.NetnsID()
}

// reach opens r's netns by the first of these that still is that netns:
// its pin, the DEL's CNI_NETNS (hint), the runtime's path recorded at ADD.
// nil when none is: the pin was lost and the runtime's handle is gone.
// A runtime's netns path is a mount that holds its netns alive, so a path
// with r's identity is r's netns, not a later one that reuses its inode.
func (s *Store) reach(r *Record, hint string) *handleFile {
	paths := []string{hint, r.NetnsPath}
	if s.pinnedAs(r) {
		paths = append([]string{s.pinPath(r.Attachment)}, paths...)
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		f, id, err := OpenNetns(p)
		if err != nil {
			continue
		}
		if id == r.NetnsID() {
			return &handleFile{f, p}
		}
		f.Close()
	}
	return nil
}

// CheckTarget says what the in-use check of r looks at, as a release
// would: a file that is r's netns now ("" when nothing reaches it), and the
// addresses recorded together with those the netns has now. For commands
// that report without changing anything.
func (s *Store) CheckTarget(r *Record) (netnsPath string, ips []string) {
	h := s.reach(r, "")
	defer h.Close()
	if h == nil {
		return "", r.IPs
	}
	return h.path, s.addrsNow(h, r)
}

// usesNow runs the in-use check on what a release of r would check
// (CheckTarget), changing nothing.
func (s *Store) usesNow(r *Record) ([]Use, error) {
	path, ips := s.CheckTarget(r)
	t := *r
	t.IPs = ips
	return s.inUse(&t, path)
}

// addrsNow is the union of r's recorded addresses and those its netns,
// open at h, has now. A netns that is held always lists its addresses;
// should it fail, the recorded ones still count.
func (s *Store) addrsNow(h *handleFile, r *Record) []string {
	ips, err := nsinfo.GlobalAddrs(int(h.Fd()))
	if err != nil {
		return r.IPs
	}
	return unionAddrs(r.IPs, ips)
}

// reachByProcess opens r's netns through a process the in-use check found
// inside it. A netns's identity is reused once it dies, so it is accepted
// only while it still has one of r's recorded addresses (or r recorded
// none).
func (s *Store) reachByProcess(r *Record, uses []Use) *handleFile {
	for _, u := range uses {
		if u.PID <= 0 {
			continue
		}
		p := "/proc/" + strconv.Itoa(u.PID) + "/ns/net"
		f, id, err := OpenNetns(p)
		if err != nil {
			continue
		}
		if id == r.NetnsID() && (len(r.IPs) == 0 || hasRecordedAddr(f, r.IPs)) {
			return &handleFile{f, p}
		}
		f.Close()
	}
	return nil
}

func hasRecordedAddr(f *os.File, recorded []string) bool {
	ips, err := nsinfo.GlobalAddrs(int(f.Fd()))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(ips, func(ip netip.Addr) bool { return slices.Contains(recorded, ip.String()) })
}

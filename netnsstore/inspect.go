package netnsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// What `netns-pinctl check` (package nodecheck) reads of a store: the same
// tests the operations make, exported read-only, so that the check says
// what ADD, DEL and the link rule would see rather than a second opinion.

// CheckTrustedDir fails unless dir is what Open requires of pinDir and
// stateDir: a real directory reached from "/" through no symlink, it and
// every ancestor owned by root and not writable by group or others (see
// openTrustedDir, the one rule). Unlike Open it creates nothing.
func CheckTrustedDir(dir string) error {
	fd, err := openTrustedDir(dir, false, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// OpenTrustedDir opens dir by the rule of CheckTrustedDir (walked from
// "/" without following a symlink, every directory on the way checked)
// and returns its descriptor: a mount or unmount through /proc/self/fd of
// it acts on the directory that was checked. It creates nothing.
func OpenTrustedDir(dir string) (int, error) { return openTrustedDir(dir, false, 0) }

// PinDirShared reports whether the mount that holds pinDir is a shared
// one, the propagation ADD gives it before the first pin (ensureShared),
// and the mount point of that mount.
func PinDirShared(pinDir string) (shared bool, mountpoint string, err error) {
	real, err := filepath.EvalSymlinks(pinDir)
	if err != nil {
		return false, "", err
	}
	m, err := containingMount(real)
	if err != nil {
		return false, "", err
	}
	return nsinfo.PeerGroup(m) != 0, m.Mountpoint, nil
}

// PinStatus is one file in <pinDir>/pins.
type PinStatus struct {
	Attachment string
	Mounted    bool    // a mount of a network namespace (not the plain file)
	Netns      NetnsID // which one, when Mounted
	HasRecord  bool    // a record of this store (readable or not) owns it
}

// LinkStatus is one well-known link: every link a record asks for, and
// every symlink into pins/ found under pinDir.
type LinkStatus struct {
	Path    string // absolute
	Cluster string // the cluster whose records ask for it; "" for a stray link
	// Want is the attachment the link rule picks for it ("" none: the
	// link should not exist); Have the attachment it points at ("" when
	// missing or not pointing into pins/).
	Want, Have string
	Exists     bool   // something is at Path
	Symlink    bool   // and it is a symlink
	Target     string // its target as written
}

// Snapshot is the store as one hold of the lock saw it.
type Snapshot struct {
	Records    []*Record        // readable records, oldest first
	Unreadable map[string]error // attachment -> why its record cannot be used
	// Dropped are the records that a power loss in an earlier boot left
	// empty or torn: the first operation that may write drops them, so
	// they block no release and are not Unreadable.
	Dropped []Finding
	Pins    []PinStatus
	Links   []LinkStatus
	// OwnerErr is set when pinDir names another stateDir as the owner of
	// its pins (ErrOtherStateDir).
	OwnerErr error
	BootID   string
}

// Inspect reads records, pins and links under the lock, changing nothing,
// for a check of the node.
func (s *Store) Inspect() (*Snapshot, error) {
	snap := &Snapshot{BootID: s.bootID}
	take := func(v *view) error {
		snap.Records, snap.Unreadable, snap.Dropped = v.recs, v.bad, v.repaired
		return nil
	}
	err := s.locked(true, take)
	if errors.Is(err, ErrOtherStateDir) {
		snap.OwnerErr = err
		// locked stops at the owner: read the rest without the lock's
		// view, as a refused operation would have seen it.
		var v *view
		if v, err = s.load(true); err == nil {
			err = errors.Join(take(v), s.openPinDir())
		}
	}
	if err != nil {
		return nil, err
	}
	names, err := readDirNames(s.pinsFd)
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", s.PinDir, PinsSubdir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, tmpPrefix) {
			continue
		}
		id, mounted, err := s.pinState(n)
		if err != nil {
			return nil, err
		}
		_, bad := snap.Unreadable[n]
		has := bad || slices.ContainsFunc(snap.Records, func(r *Record) bool { return r.Attachment == n })
		snap.Pins = append(snap.Pins, PinStatus{Attachment: n, Mounted: mounted, Netns: id, HasRecord: has})
	}
	seen := map[string]bool{}
	add := func(links []string, cluster, want string) {
		for _, l := range links {
			if !seen[l] {
				seen[l] = true
				snap.Links = append(snap.Links, s.linkStatus(l, cluster, want))
			}
		}
	}
	for i, r := range snap.Records {
		cl := r.Cluster
		if slices.ContainsFunc(snap.Records[:i], func(o *Record) bool { return o.Cluster == cl }) {
			continue // listed with its cluster's first record
		}
		want := linkTargetOf(cl, snap.Records)
		links := clusterLinks(cl, snap.Records)
		if want == "" {
			// No pin may be a target: every link any record asked for
			// must be gone.
			for _, o := range snap.Records {
				if o.Cluster == cl {
					links = append(links, o.Links...)
				}
			}
		}
		add(links, cl, want)
	}
	stray, err := s.linksUnderPinDir()
	if err != nil {
		return nil, err
	}
	add(stray, "", "")
	return snap, nil
}

func (s *Store) linkStatus(link, cluster, want string) LinkStatus {
	st := LinkStatus{Path: link, Cluster: cluster, Want: want}
	dfd, err := s.openLinkDir(link, false)
	if err != nil {
		return st
	}
	defer unix.Close(dfd)
	cur, kind, err := readLinkAt(dfd, filepath.Base(link))
	if err != nil {
		st.Exists = true
		return st
	}
	st.Exists, st.Symlink, st.Target = kind != linkMissing, kind == linkIsSymlink, cur
	if st.Symlink && s.pointsIntoPins(link, cur) {
		st.Have = filepath.Base(cur)
	}
	return st
}

// linksUnderPinDir lists every symlink below pinDir (outside pins/) that
// points into pins/: the links netns-pin made there, including those whose
// record is gone.
func (s *Store) linksUnderPinDir() ([]string, error) {
	var out []string
	pins := filepath.Join(s.PinDir, PinsSubdir)
	err := filepath.WalkDir(s.PinDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p == pins {
			return filepath.SkipDir
		}
		if d.Type()&fs.ModeSymlink == 0 || strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		if t, err := os.Readlink(p); err == nil && s.pointsIntoPins(p, t) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look for links under %s: %w", s.PinDir, err)
	}
	return out, nil
}

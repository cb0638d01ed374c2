package netnsstore

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// The states of a record: where an attachment is in its life
// (docs/design.md §7, Record.State). An active or draining record whose
// pin is whole needs nothing; any other is settled by the next operation
// that takes the lock (see Store.settle): what it becomes depends on the
// in-use check, never on the state alone.
const (
	// StateActive: pinned and linked; the cluster's links prefer it. ADD
	// writes it first, before the pin and the links exist: a crash in
	// between leaves an active record without a pin, pinned again by the
	// next operation from the runtime's netns.
	StateActive = "active"
	// StateDraining: a DEL (or GC, or repair) found it in use; it stays
	// pinned and is linked only while its cluster has no active pin.
	StateDraining = "draining"
	// StateUnpinned: in use, but its pin was unmounted from outside and
	// the netns could not be reached to pin it again (the kernel clients
	// hold it). Never a link target; DEL refuses until nothing uses it.
	StateUnpinned = "unpinned"
)

// recordFormat is the format this program writes, the only one it reads.
// A record of a newer format is never guessed at: nothing is released
// while one exists, and DEL answers "try again later". Nor is one of an
// older format or in a state no release writes: a development build's,
// unreadable like a torn record.
const recordFormat = 2

// errNewerFormat is wrapped when a record was written by a newer netns-pin.
var errNewerFormat = errors.New("record of a newer format")

// errTornRecord is wrapped when a record's content cannot be decoded: empty
// or cut short, as a power loss leaves a record written without fsync.
var errTornRecord = errors.New("record empty or torn")

// Record is what the store remembers of one pinned attachment.
type Record struct {
	Format      int    `json:"format"`
	Writer      string `json:"writer,omitempty"` // netns-pin release that wrote it
	Attachment  string `json:"attachment"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Network     string `json:"network"`
	Cluster     string `json:"cluster"`
	PodNS       string `json:"podNamespace,omitempty"`
	PodName     string `json:"podName,omitempty"`
	PodUID      string `json:"podUID,omitempty"`
	NetnsPath   string `json:"netnsPath"`
	PinDir      string `json:"pinDir"`
	PinPath     string `json:"pinPath"`
	NetnsDev    uint64 `json:"netnsDev,omitempty"`
	NetnsIno    uint64 `json:"netnsIno,omitempty"`
	// IPs is every global address the netns had at ADD and at each later
	// check: a client keeps the address it connected from, so an address
	// once seen is never forgotten.
	IPs []string `json:"ips"`
	// InUse is the in-use settings of the configuration that pinned it
	// (Options.InUseSettings); every release checks with them as well.
	InUse   map[string]string `json:"inUse,omitempty"`
	Links   []string          `json:"links"`
	BootID  string            `json:"bootID"`
	State   string            `json:"state"` // StateActive, StateDraining, ...
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
	// References found by the last check that kept the pin.
	References []string `json:"references,omitempty"`
	// DrainingSince is when a check first kept the pin.
	DrainingSince time.Time `json:"drainingSince,omitzero"`
	// Teardown is what the runtime's DEL said at the first refusal, kept so
	// that the teardown can be finished without the runtime.
	Teardown *Teardown `json:"teardown,omitempty"`
	// Abandoned is set once the runtime's handle on the netns is gone while
	// the pin is kept: no runtime will retry DEL, and whoever releases the
	// pin first runs the DEL of the chain's earlier plugins.
	Abandoned bool `json:"abandoned,omitempty"`
}

// Teardown is what a DEL of the attachment needs, as the runtime gave it.
type Teardown struct {
	Netns   string `json:"netns,omitempty"`   // CNI_NETNS
	CNIPath string `json:"cniPath,omitempty"` // CNI_PATH
	// CacheFile is the libcni result cache entry of the attachment (the
	// chain's configuration, arguments, capability arguments and result),
	// and Cache its content; empty when none was found.
	CacheFile string          `json:"cacheFile,omitempty"`
	Cache     json.RawMessage `json:"cache,omitempty"`
}

// NetnsID is the identity of the recorded netns.
func (r *Record) NetnsID() NetnsID { return NetnsID{Dev: r.NetnsDev, Ino: r.NetnsIno} }

const (
	recordsSubdir = "records"
	recordSuffix  = ".json"
	tmpPrefix     = ".tmp-"
)

// writeRecord replaces the record atomically: temp file, rename (design
// §10). A crash of the plugin leaves the old or the new record, whole: the
// page cache holds both. Only a record that carries a captured teardown is
// made durable (its file synced before the rename, its folder after):
// that teardown frees IPAM leases, which outlive the kernel. Everything
// else a record describes (the pin, the netns, the kernel clients) dies
// with the kernel, and a record that a power loss leaves empty or torn is
// recognised by the boot marker and dropped (see markBoot).
func (s *Store) writeRecord(r *Record) error {
	if !s.registered {
		// Before any record: a record implies a registered store.
		if err := s.register(); err != nil {
			return err
		}
		s.registered = true
	}
	r.Updated = time.Now().UTC()
	r.Format, r.Writer, r.PinDir = recordFormat, s.writer, s.PinDir
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode record %s: %w", r.Attachment, err)
	}
	name := r.Attachment + recordSuffix
	if err := s.replaceFile(s.recordsFd, name, data, r.Teardown != nil); err != nil {
		return fmt.Errorf("write record %s: %w", name, err)
	}
	return nil
}

// replaceFile writes data to name in dirfd through a temporary file and a
// rename, so that readers see the old content or the new, never a part;
// durable syncs the file before the rename and the folder after.
func (s *Store) replaceFile(dirfd int, name string, data []byte, durable bool) error {
	tmp := tmpPrefix + name
	f, err := regfile.OpenBeneath(dirfd, tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return errors.Join(err, unlinkIfExists(dirfd, tmp))
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fmt.Errorf("rename: %w", errors.Join(err, unlinkIfExists(dirfd, tmp)))
	}
	if durable {
		if err := unix.Fsync(dirfd); err != nil {
			return fmt.Errorf("sync its folder: %w", err)
		}
	}
	return nil
}

// HasRecord tells, with one lstat and without opening the store, whether
// stateDir holds a record of attachment: the cheap test that lets DEL of a
// pod that was never pinned touch nothing else. Only ENOENT means "no
// record"; any other failure is returned, and the caller must not take it
// for "nothing pinned".
func HasRecord(stateDir, attachment string) (bool, error) {
	_, err := os.Lstat(filepath.Join(stateDir, recordsSubdir, attachment+recordSuffix))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("look for the record of %s: %w", attachment, err)
}

// readRecord returns the record of an attachment, or nil when none exists.
// One of another pinDir is ErrOtherPinDir and one of a newer format
// errNewerFormat, both untouched.
func (s *Store) readRecord(attachment string) (*Record, error) {
	data, err := regfile.ReadBeneath(s.recordsFd, attachment+recordSuffix, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", attachment, err)
	}
	r, err := decodeRecord(data, attachment, cmp.Or(s.writer, "this build"))
	if err != nil {
		return nil, err
	}
	if r.PinDir != s.PinDir {
		return nil, fmt.Errorf("%w: record %s was made under pinDir %s, this store's pinDir is %s", ErrOtherPinDir, attachment, r.PinDir, s.PinDir)
	}
	if r.PinPath != s.pinPath(attachment) {
		// The pin's path follows from the attachment; one that does not
		// was written by someone else, and would become the chain's
		// CNI_NETNS and the unmount's target.
		return nil, fmt.Errorf("record %s names the pin %q, not its own %s", attachment, r.PinPath, s.pinPath(attachment))
	}
	return r, nil
}

// decodeRecord decodes the record file of attachment, for reader (the
// program version that reads it, named when the record is too new).
func decodeRecord(data []byte, attachment, reader string) (*Record, error) {
	r := &Record{}
	if err := json.Unmarshal(data, r); err != nil {
		// Empty or cut short: what a power loss leaves of a record written
		// without fsync (see markBoot); any other decoding failure too.
		return nil, fmt.Errorf("decode record %s (%d bytes): %w: %w", attachment, len(data), errTornRecord, err)
	}
	if r.Format > recordFormat {
		// It names the netns-pin release that wrote it, the one (or a later
		// one) the node needs back (CHANGELOG.md lists the formats each
		// release reads).
		need := "netns-pin " + r.Writer + " or later"
		if r.Writer == "" {
			need = fmt.Sprintf("a netns-pin that reads format %d", r.Format)
		}
		return nil, fmt.Errorf("record %s: %w %d, written by netns-pin %s; this netns-pin (%s) reads formats up to %d: it needs %s",
			attachment, errNewerFormat, r.Format, cmp.Or(r.Writer, "of an unknown version"), reader, recordFormat, need)
	}
	if r.Attachment != attachment {
		return nil, fmt.Errorf("record %s names attachment %q", attachment, r.Attachment)
	}
	if r.Format < recordFormat {
		return nil, fmt.Errorf("record %s: format %d, which no release of netns-pin writes", attachment, r.Format)
	}
	if !slices.Contains([]string{StateActive, StateDraining, StateUnpinned}, r.State) {
		return nil, fmt.Errorf("record %s: state %.32q, which no release of netns-pin writes", attachment, r.State)
	}
	return r, nil
}

func (s *Store) removeRecord(attachment string) error {
	if err := unlinkIfExists(s.recordsFd, attachment+recordSuffix); err != nil {
		return fmt.Errorf("remove record %s: %w", attachment, err)
	}
	return nil
}

// records lists every record, oldest first. A record that cannot be used
// (unreadable, undecodable, of a newer format) is returned in bad with the
// reason, so that one bad file cannot stop the others' operations, and so
// that nothing its pin may serve is taken away. A record of another pinDir
// fails the whole listing (ErrOtherPinDir).
func (s *Store) records(readOnly bool) (rs []*Record, bad map[string]error, err error) {
	names, err := readDirNames(s.recordsFd)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s/%s: %w", s.StateDir, recordsSubdir, err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, tmpPrefix) && !readOnly {
			// A crash between write and rename; the old record (if any)
			// is still whole, so the leftover is just removed. It is no
			// record: one that cannot be removed is left for the next
			// listing, and the error does not count.
			_ = unix.Unlinkat(s.recordsFd, n, 0)
		}
	}
	return readRecords(names, s.readRecord)
}

// readRecords reads the record of each name of a records folder, oldest
// first, with read, which returns nil for a record gone since the listing.
// A leftover of a crash between write and rename is no record. One that
// cannot be used is in bad with the reason; ErrOtherPinDir stops it.
func readRecords(names []string, read func(attachment string) (*Record, error)) (rs []*Record, bad map[string]error, err error) {
	bad = map[string]error{}
	for _, n := range names {
		att, ok := strings.CutSuffix(n, recordSuffix)
		if !ok || strings.HasPrefix(n, tmpPrefix) {
			continue
		}
		r, err := read(att)
		switch {
		case errors.Is(err, ErrOtherPinDir):
			return nil, nil, err
		case err != nil:
			bad[att] = err
		case r != nil:
			rs = append(rs, r)
		}
	}
	sortRecords(rs)
	return rs, bad, nil
}

func sortRecords(rs []*Record) {
	slices.SortFunc(rs, func(a, b *Record) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Attachment, b.Attachment))
	})
}

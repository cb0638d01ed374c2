package netnsstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// State is where an attachment is in its life. The order of the steps is
// what makes every crash recoverable: see Store.repair.
type State string

const (
	// StateIntent: ADD wrote the record and may have mounted the pin;
	// links are not trusted to point at it yet. Rolled back on repair.
	StateIntent State = "intent"
	// StateActive: pinned and linked; the cluster's links prefer it.
	StateActive State = "active"
	// StateDraining: a DEL found it still in use; it stays pinned and is
	// linked only while its cluster has no active pin.
	StateDraining State = "draining"
	// StateReleasing: a DEL found it unused; links, mount, pin file and
	// record are being removed. Rolled forward on repair.
	StateReleasing State = "releasing"
)

// Record is what the store remembers of one pinned attachment.
type Record struct {
	Attachment  string    `json:"attachment"`
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	Network     string    `json:"network"`
	Cluster     string    `json:"cluster"`
	PodNS       string    `json:"podNamespace,omitempty"`
	PodName     string    `json:"podName,omitempty"`
	PodUID      string    `json:"podUID,omitempty"`
	NetnsPath   string    `json:"netnsPath"`
	PinPath     string    `json:"pinPath"`
	NetnsDev    uint64    `json:"netnsDev,omitempty"`
	NetnsIno    uint64    `json:"netnsIno,omitempty"`
	IPs         []string  `json:"ips"`
	Links       []string  `json:"links"`
	BootID      string    `json:"bootID"`
	State       State     `json:"state"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	// References found by the last DEL that refused to release.
	References []string `json:"references,omitempty"`
}

const (
	recordsSubdir = "records"
	recordSuffix  = ".json"
	tmpPrefix     = ".tmp-"
)

// writeRecord replaces the record atomically: temp file, fsync, rename,
// fsync of the directory. A crash leaves either the old or the new record.
func (s *Store) writeRecord(r *Record) error {
	r.Updated = time.Now().UTC()
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := r.Attachment + recordSuffix
	tmp := tmpPrefix + name
	fd, err := openat2(s.recordsFd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write record %s: %w", name, err)
	}
	_, werr := unix.Write(fd, data)
	if werr == nil {
		werr = unix.Fsync(fd)
	}
	unix.Close(fd)
	if werr != nil {
		_ = unix.Unlinkat(s.recordsFd, tmp, 0)
		return fmt.Errorf("write record %s: %w", name, werr)
	}
	if err := unix.Renameat(s.recordsFd, tmp, s.recordsFd, name); err != nil {
		return fmt.Errorf("rename record %s: %w", name, err)
	}
	if err := unix.Fsync(s.recordsFd); err != nil {
		return fmt.Errorf("sync %s/%s: %w", s.StateDir, recordsSubdir, err)
	}
	return nil
}

// HasRecord tells, with one lstat and without opening the store, whether
// stateDir holds a record of attachment: the cheap test that lets DEL of a
// pod that was never pinned touch nothing else.
func HasRecord(stateDir, attachment string) bool {
	_, err := os.Lstat(filepath.Join(stateDir, recordsSubdir, attachment+recordSuffix))
	return err == nil
}

// readRecord returns the record of an attachment, or nil when none exists.
func (s *Store) readRecord(attachment string) (*Record, error) {
	fd, err := openat2(s.recordsFd, attachment+recordSuffix, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", attachment, err)
	}
	defer unix.Close(fd)
	data, err := readAllFd(fd, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", attachment, err)
	}
	r := &Record{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("decode record %s: %w", attachment, err)
	}
	if r.Attachment != attachment {
		return nil, fmt.Errorf("record %s names attachment %q", attachment, r.Attachment)
	}
	return r, nil
}

func (s *Store) removeRecord(attachment string) error {
	err := unix.Unlinkat(s.recordsFd, attachment+recordSuffix, 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove record %s: %w", attachment, err)
	}
	return unix.Fsync(s.recordsFd)
}

// records lists every record, oldest first. Unreadable records are
// returned as errors alongside the readable ones so one bad file cannot
// stop recovery of the rest.
func (s *Store) records() ([]*Record, []error) {
	names, err := readDirNames(s.recordsFd)
	if err != nil {
		return nil, []error{fmt.Errorf("list %s/%s: %w", s.StateDir, recordsSubdir, err)}
	}
	var out []*Record
	var errs []error
	for _, n := range names {
		if strings.HasPrefix(n, tmpPrefix) {
			// A crash between write and rename; the old record (if any)
			// is still whole, so the leftover is just removed.
			_ = unix.Unlinkat(s.recordsFd, n, 0)
			continue
		}
		att, ok := strings.CutSuffix(n, recordSuffix)
		if !ok {
			continue
		}
		r, err := s.readRecord(att)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r != nil {
			out = append(out, r)
		}
	}
	sortRecords(out)
	return out, errs
}

func sortRecords(rs []*Record) {
	sort.Slice(rs, func(i, j int) bool {
		if !rs[i].Created.Equal(rs[j].Created) {
			return rs[i].Created.Before(rs[j].Created)
		}
		return rs[i].Attachment < rs[j].Attachment
	})
}

// Package netnsstore keeps pinned network namespaces on disk: the pins
// (bind mounts under <pinDir>/pins), the well-known links that point at
// them, one record per pinned attachment under <stateDir>/records, the lock
// that serialises mutations and the recovery that makes every crash point
// safe.
package netnsstore

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/failpoint"
	"github.com/netns-pin/netns-pin/internal/regfile"
)

// PinsSubdir is the folder under pinDir that holds the pins.
const PinsSubdir = "pins"

// PodFinalizer is the finalizer a holder's pod object carries (its
// template's), so that the object and its IPAM lease stay while its pin
// does; the node agent lifts it once no record names the pod.
const PodFinalizer = "netns-pin.io/pin"

// bootIDPath identifies the running boot; records of another boot describe
// mounts that no longer exist.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// Store is an opened pin directory and state directory.
type Store struct {
	PinDir   string
	StateDir string

	log         *slog.Logger
	lockTimeout time.Duration
	inUse       inUseFunc
	inUseConfig map[string]string
	inUseFor    func(settings map[string]string) (inUseFunc, error)
	teardown    teardownFunc
	writer      string
	actor       string        // Options.Actor, for the events file
	registry    string        // the store registry folder (Options.RegistryDir)
	registered  bool          // its registration was found or written by this process
	lastCheck   time.Duration // of the last in-use check (the events file)

	bootID    string
	pinDirFd  int
	pinsFd    int
	pinsDev   uint64
	stateFd   int
	recordsFd int
	steps     steps // of the operation under way, for the debug log
}

// steps times the steps of one operation for the debug log, which shows
// what a slow ADD or DEL waited for: the lock, a disk's fsync, an address
// dump, the in-use check (docs/operating.md, "Slow ADD or DEL"). A step
// that runs again in the same operation (repair settles every record that
// needs it) adds to its first entry, so each step appears once.
type steps struct {
	last time.Time
	took []any // step name, µs, step name, µs, ... in the order first run
}

func (t *steps) start() { t.last, t.took = time.Now(), t.took[:0] }

func (t *steps) mark(step string) {
	now := time.Now()
	us := now.Sub(t.last).Microseconds()
	t.last = now
	if i := slices.Index(t.took, any(step)); i >= 0 { // names are the only strings
		t.took[i+1] = t.took[i+1].(int64) + us
		return
	}
	t.took = append(t.took, step, us)
}

// Options configures a Store. The zero value is usable but releases
// nothing: without InUse every pinned netns counts as in use.
type Options struct {
	// Log receives the store's structured log; nil discards it.
	Log *slog.Logger
	// LockTimeout bounds the wait for the store's lock; zero means
	// defaultLockTimeout.
	LockTimeout time.Duration
	// InUse is the in-use check run before any pin is released, by DEL,
	// GC and the repair of interrupted operations alike.
	InUse inUseFunc
	// InUseSettings describes what InUse looks at and how it decides
	// (opaque to the store). Each new record keeps them, and a record made
	// with other settings is checked with those too (InUseFor): a command
	// run with another sysfs, or a configuration with another policy, can
	// only add references, never hide one.
	InUseSettings map[string]string
	// InUseFor returns the in-use check of recorded settings, or nil when
	// InUse finds every reference it would.
	InUseFor func(settings map[string]string) (inUseFunc, error)
	// Teardown finishes the teardown of an abandoned attachment before its
	// pin is unmounted: the DEL of the chain's plugins before netns-pin,
	// with CNI_NETNS set to the pin. A store without it releases no
	// abandoned record of this boot (leavesAbandoned), and hands one of
	// an earlier boot over to a store with it (handsOver).
	Teardown teardownFunc
	// Writer names the program version recorded in the records it writes,
	// so that a record of a newer format can say who wrote it.
	Writer string
	// Actor is who the releases of this store are counted for in the
	// events file (ByDEL, ByGC, BySweeper, ByOperator; ByRepair when
	// empty).
	Actor string
	// RegistryDir is the store registry the store registers in before
	// its first record; "" is RegistryDir().
	RegistryDir string
}

// Open checks (creating them when missing) pinDir and stateDir: real
// directories, owned by root, not writable by group or others. It makes no
// mount; that happens with the first pin.
func Open(pinDir, stateDir string, o Options) (*Store, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.RegistryDir == "" {
		o.RegistryDir = RegistryDir()
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = defaultLockTimeout
	}
	if o.InUse == nil {
		o.InUse = func(*Record, string) ([]Use, error) { return nil, errors.New("no in-use check configured") }
	}
	s := &Store{PinDir: pinDir, StateDir: stateDir, log: o.Log, lockTimeout: o.LockTimeout, inUse: o.InUse, inUseConfig: o.InUseSettings, inUseFor: o.InUseFor, teardown: o.Teardown, writer: o.Writer, actor: o.Actor, registry: o.RegistryDir,
		pinDirFd: -1, pinsFd: -1, stateFd: -1, recordsFd: -1}
	if err := s.open(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open() error {
	boot, err := regfile.ReadFile(failpoint.BootIDPath(bootIDPath), 0, 4096)
	if err != nil {
		return fmt.Errorf("read boot id: %w", err)
	}
	s.bootID = strings.TrimSpace(string(boot))
	fd, err := openTrustedDir(s.PinDir, true, 0o755)
	if err != nil {
		return fmt.Errorf("pinDir: %w", err)
	}
	unix.Close(fd) // opened again (and checked again) by every operation
	if s.stateFd, err = openTrustedDir(s.StateDir, true, 0o700); err != nil {
		return fmt.Errorf("stateDir: %w", err)
	}
	if s.recordsFd, err = openDirBeneath(s.stateFd, recordsSubdir, true, 0o700); err != nil {
		return fmt.Errorf("records folder in %s: %w", s.StateDir, err)
	}
	return nil
}

// openPinDir (re)opens pinDir and its pins folder. It runs under the lock
// at the start of every operation: another process may have bind-mounted
// pinDir onto itself since, and a descriptor opened before that refers to
// the covered directory, where pins are neither made nor seen.
func (s *Store) openPinDir() (err error) {
	closeFds(&s.pinDirFd, &s.pinsFd)
	if s.pinDirFd, err = openTrustedDir(s.PinDir, false, 0); err != nil {
		return fmt.Errorf("pinDir: %w", err)
	}
	if s.pinsFd, err = openDirBeneath(s.pinDirFd, PinsSubdir, true, 0o755); err != nil {
		return fmt.Errorf("pins folder in %s: %w", s.PinDir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(s.pinsFd, &st); err != nil {
		return fmt.Errorf("stat %s/%s: %w", s.PinDir, PinsSubdir, err)
	}
	s.pinsDev = st.Dev
	return nil
}

// ensureShared makes pinDir's mount shared (see ensureShared) and reopens
// the pin directory when that mounted something over it. Under the lock,
// so concurrent first pins do not stack bind mounts.
func (s *Store) ensureShared() error {
	changed, err := ensureShared(s.PinDir, s.pinDirFd)
	if changed {
		err = errors.Join(err, s.openPinDir())
	}
	if err != nil {
		return fmt.Errorf("make pinDir %s a shared mount: %w", s.PinDir, err)
	}
	return nil
}

// Close releases the directory descriptors.
func (s *Store) Close() { closeFds(&s.pinDirFd, &s.pinsFd, &s.stateFd, &s.recordsFd) }

func closeFds(fds ...*int) {
	for _, fd := range fds {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// AttachmentName is the file name of an attachment's pin and record:
// "<containerID>.<ifname>". Both parts were checked against the CNI spec's
// character rules by the caller; the total length must leave room for the
// record's suffix and temporary prefix within NAME_MAX.
func AttachmentName(containerID, ifName string) (string, error) {
	name := containerID + "." + ifName
	if max := unix.NAME_MAX - len(tmpPrefix) - len(recordSuffix); len(name) > max {
		return "", fmt.Errorf("attachment %.40q...: container ID and interface name are %d bytes together, over %d", name, len(name), max)
	}
	if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return "", fmt.Errorf("attachment %q: not a valid file name", name)
	}
	return name, nil
}

// errInUse is what an *InUseError unwraps to: Release the in-use check found references.
var errInUse = errors.New("still in use")

// errCheckFailed is wrapped by Release when the in-use check could not
// tell that the netns is unused (it failed, timed out, or a record it
// depends on cannot be read): the pin stays, as if in use.
var errCheckFailed = errors.New("in-use check failed")

// ErrOtherPinDir is returned by every operation on a state directory whose
// records were made under another pinDir: pins and links would be looked
// for in the wrong place, and a pin that still serves clients would look
// lost.
var ErrOtherPinDir = errors.New("records were made under another pinDir")

// InUseError lists what keeps a pinned netns from being released.
type InUseError struct {
	Record     *Record
	References []string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("netns pin %s of cluster %s is %v: %s", e.Record.Attachment, e.Record.Cluster, errInUse, strings.Join(e.References, "; "))
}

func (e *InUseError) Unwrap() error { return errInUse }

// Use is one thing found using a pinned netns.
type Use struct {
	// What describes it for people (a device, a client, a process).
	What string
	// PID is set for a process that runs inside the netns: its
	// /proc/<pid>/ns/net reaches the netns when the pin was lost.
	PID int
	// Detail is the check's own account of it, for reports.
	Detail any
}

// teardownFunc runs the DEL that a runtime abandoned, for record r whose
// pin is still mounted at r.PinPath. It must be idempotent: a crash may
// make it run again.
type teardownFunc = func(r *Record) error

// inUseFunc returns every use of the netns recorded in r (none when it is
// unused). netnsPath, when not empty, is a file that is that netns (the pin,
// or the runtime's handle when the pin was lost); an error means the check
// could not tell, and the netns is kept as if in use.
type inUseFunc = func(r *Record, netnsPath string) ([]Use, error)

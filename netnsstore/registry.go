package netnsstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/failpoint"
	"github.com/netns-pin/netns-pin/internal/regfile"
)

// The store registry is how every reader of the node finds every store
// (docs/design.md, "The store registry"): each store writes one file into
// one fixed folder of the node, under its lock, before it writes its first
// record, so a record anywhere implies a registered store. The node agent
// and the sweeper read every registered store; nothing has to be told
// which pinDir and stateDir each network uses.
//
// One file per store, named by the sha256 (hex) of its cleaned stateDir:
// a hostile or long path is never a file name, two stores never share a
// file, and a reader can tell a file that names another stateDir than its
// name says.

// DefaultRegistryDir is the node's store registry.
const DefaultRegistryDir = "/var/lib/netns-pin/stores"

// registryDir is RegistryDir's folder; the package's tests point it at a
// folder of their own.
var registryDir = DefaultRegistryDir

// RegistryDir is the folder stores register in: DefaultRegistryDir, which
// only test builds can point elsewhere (failpoint.RegistryDir).
func RegistryDir() string { return failpoint.RegistryDir(registryDir) }

// Registration is a registered store.
type Registration struct {
	StateDir string `json:"stateDir"`
	PinDir   string `json:"pinDir"`
}

// registrationSuffix ends every registration's file name.
const registrationSuffix = ".json"

// RegistrationName is the file name of stateDir's registration.
func RegistrationName(stateDir string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return hex.EncodeToString(sum[:]) + registrationSuffix
}

// MakeRegistry makes the registry folder dir when missing (the sweeper
// does at its start, so that the folder exists on every node where
// netns-pin is installed and the agent can tell a wrong host root from a
// node without stores). It checks dir as pinDir and stateDir are checked.
func MakeRegistry(dir string) error {
	fd, err := openTrustedDir(dir, true, 0o755)
	if err != nil {
		return fmt.Errorf("store registry: %w", err)
	}
	unix.Close(fd)
	return nil
}

// register makes sure the registry in dir holds the store's registration,
// writing it only when missing or different: a read on every first record
// of a process, a durable write once per store. The caller holds the
// store's lock, so registrations of one store never race; different
// stores write different files.
func (s *Store) register() error {
	if !utf8.ValidString(s.StateDir) || !utf8.ValidString(s.PinDir) {
		// JSON would carry another path than the real one, and a reader
		// would read a store that is not this one.
		return fmt.Errorf("register the store in %s: stateDir %q and pinDir %q must be UTF-8", s.registry, s.StateDir, s.PinDir)
	}
	want, err := json.Marshal(Registration{StateDir: filepath.Clean(s.StateDir), PinDir: filepath.Clean(s.PinDir)})
	if err != nil {
		return fmt.Errorf("register the store in %s: %w", s.registry, err)
	}
	name := RegistrationName(s.StateDir)
	if have, err := regfile.ReadIn(s.registry, name, 1<<16); err == nil && bytes.Equal(have, want) {
		return nil
	}
	fd, err := openTrustedDir(s.registry, true, 0o755)
	if err != nil {
		return fmt.Errorf("register the store: %w", err)
	}
	defer unix.Close(fd)
	failpoint.Hit("register-before-write")
	if err := s.replaceFile(fd, name, want, true); err != nil {
		return fmt.Errorf("register the store in %s/%s: %w", s.registry, name, err)
	}
	return nil
}

// Unregister removes stateDir's registration from the registry in dir
// (uninstall, once the store is gone); a missing one is no error.
func Unregister(dir, stateDir string) error {
	fd, err := openTrustedDir(dir, false, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store registry: %w", err)
	}
	defer unix.Close(fd)
	name := RegistrationName(stateDir)
	if err := unlinkIfExists(fd, name); err != nil {
		return fmt.Errorf("unregister %s: remove %s/%s: %w", stateDir, dir, name, err)
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("unregister %s: sync %s: %w", stateDir, dir, err)
	}
	return nil
}

// RegisteredStore is one file of the registry as a reader found it.
type RegisteredStore struct {
	Registration
	// File is the registration's file name.
	File string
	// Err is why the file cannot be used: a reader must then take every
	// store for unknown (a read error means "in use").
	Err error
}

// Registered lists the stores registered in dir, in file name order.
// A missing dir is an error: on a node with netns-pin installed the
// sweeper made it, so a reader that does not find it looks in the wrong
// place (the agent's host root) and knows nothing.
func Registered(dir string) ([]RegisteredStore, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list the store registry: %w", err)
	}
	var out []RegisteredStore
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, registrationSuffix) || strings.HasPrefix(n, tmpPrefix) {
			continue // a leftover of a crash between write and rename
		}
		rs := RegisteredStore{File: n}
		data, err := regfile.ReadIn(dir, n, 1<<16)
		if err == nil {
			err = json.Unmarshal(data, &rs.Registration)
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue // unregistered between the listing and the read
		case err != nil:
			rs.Err = fmt.Errorf("registration %s/%s: %w", dir, n, err)
		case !filepath.IsAbs(rs.StateDir) || !filepath.IsAbs(rs.PinDir):
			rs.Err = fmt.Errorf("registration %s/%s: stateDir %q and pinDir %q must be absolute", dir, n, rs.StateDir, rs.PinDir)
		case RegistrationName(rs.StateDir) != n:
			rs.Err = fmt.Errorf("registration %s/%s names stateDir %q, whose registration is another file", dir, n, rs.StateDir)
		}
		out = append(out, rs)
	}
	return out, nil
}

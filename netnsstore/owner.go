package netnsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// ownerFile, in pinDir, names the stateDir whose records own the pins.
// Records name their pinDir (ErrOtherPinDir); this is the other half: a
// store with another stateDir (a second network configured with the same
// pinDir, an operator's --state-dir) would otherwise take every pin for a
// pin without a record, and release the unused-looking ones.
const ownerFile = ".netns-pin-state-dir"

// ErrOtherStateDir is returned by every operation on a pinDir whose pins
// belong to another stateDir.
var ErrOtherStateDir = errors.New("the pins were made under another stateDir")

// checkOwner reads pinDir's owner: true when it is this store's stateDir,
// false when pinDir has none yet (an empty pinDir, or one of an earlier
// version), ErrOtherStateDir when it is another.
func (s *Store) checkOwner() (bool, error) {
	data, err := regfile.ReadBeneath(s.pinDirFd, ownerFile, 4096)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s/%s: %w", s.PinDir, ownerFile, err)
	}
	switch owner := strings.TrimSuffix(string(data), "\n"); owner {
	case s.StateDir:
		return true, nil
	case "":
		return false, nil // written but never synced before a power loss
	default:
		return false, fmt.Errorf("%w: pinDir %s belongs to stateDir %s (%s/%s), this store's stateDir is %s",
			ErrOtherStateDir, s.PinDir, owner, s.PinDir, ownerFile, s.StateDir)
	}
}

// claimPinDir makes this store's stateDir pinDir's owner, when pinDir has
// none and every pin in it has a record here: pins without one may be
// another stateDir's, and whose they are cannot be known. ADD claims (Pin),
// before its pin: the network that pins first owns pinDir. The file is
// written whole and then linked into place, so a store with another
// stateDir that claims at the same time either wins or sees this one.
func (s *Store) claimPinDir(v *view) error {
	orphans, err := s.orphanPins(v)
	if err != nil || len(orphans) > 0 {
		return err
	}
	tmp := tmpPrefix + ownerFile + "." + strconv.Itoa(unix.Getpid())
	f, err := regfile.OpenBeneath(s.pinDirFd, tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("claim pinDir %s: %w", s.PinDir, err)
	}
	_, err = f.WriteString(s.StateDir + "\n")
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = unix.Linkat(s.pinDirFd, tmp, s.pinDirFd, ownerFile, 0)
		var st unix.Stat_t
		if errors.Is(err, unix.EEXIST) {
			// An owner file that a power loss left empty is replaced; one
			// that names a stateDir stays.
			if err = unix.Fstatat(s.pinDirFd, ownerFile, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Size == 0 {
				err = unix.Renameat(s.pinDirFd, tmp, s.pinDirFd, ownerFile)
			}
		}
	}
	_ = unix.Unlinkat(s.pinDirFd, tmp, 0)
	if err != nil {
		return fmt.Errorf("claim pinDir %s: %w", s.PinDir, err)
	}
	// Linked, or another store was first: read what stands.
	v.owned, err = s.checkOwner()
	return err
}

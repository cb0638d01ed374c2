package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// pinPath is where the pin of an attachment lives.
func (s *Store) pinPath(attachment string) string {
	return filepath.Join(s.PinDir, PinsSubdir, attachment)
}

// mountPin bind-mounts the open netns src onto <pinDir>/pins/<name>, the
// same thing `ip netns add` does under /run/netns. While the mount exists
// the namespace, its interfaces and its addresses live on, whatever
// happens to the pod that created it.
func (s *Store) mountPin(src *os.File, srcID NetnsID, name string) error {
	switch id, mounted, err := s.pinState(name); {
	case err != nil:
		return err
	case mounted && id == srcID:
		return nil // a repeated step after a crash
	case mounted:
		return fmt.Errorf("pin %s is already a mount of another namespace %v", s.pinPath(name), id)
	}
	f, err := regfile.OpenBeneath(s.pinsFd, name, os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create pin %s: %w", s.pinPath(name), err)
	}
	defer f.Close()
	// Both ends through /proc/self/fd: the source is the namespace that was
	// validated, the target the file just created beneath pins/, so nothing
	// renamed or planted in between can change what gets mounted where.
	if err := unix.Mount(fdPath(int(src.Fd())), fdPath(int(f.Fd())), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("pin %s: bind mount: %w", s.pinPath(name), err)
	}
	return nil
}

// pinState tells whether pins/<name> is a mount of a network namespace and
// which one. A missing file is "not mounted".
func (s *Store) pinState(name string) (NetnsID, bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(s.pinsFd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return NetnsID{}, false, nil
	}
	if err != nil {
		return NetnsID{}, false, fmt.Errorf("stat pin %s: %w", s.pinPath(name), err)
	}
	if st.Dev == s.pinsDev {
		return NetnsID{}, false, nil // the plain file on pinDir's filesystem
	}
	return NetnsID{Dev: st.Dev, Ino: st.Ino}, true, nil
}

// unpin detaches every mount stacked on the pin and removes the file.
// MNT_DETACH because a process may have the pin open (nsenter --net=...);
// the namespace itself dies when its last user goes.
func (s *Store) unpin(name string) error {
	p := s.pinPath(name)
	for i := 0; i < 16; i++ {
		_, mounted, err := s.pinState(name)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		if err := s.unmountPin(name); err != nil {
			return fmt.Errorf("unmount pin %s: %w", p, err)
		}
	}
	if err := unlinkIfExists(s.pinsFd, name); err != nil {
		return fmt.Errorf("remove pin %s: %w", p, err)
	}
	return nil
}

// unmountPin detaches the topmost mount on the pin name, through
// /proc/self/fd of the pin opened beneath pins/ (the descriptor of the
// trusted chain), never through its path: a pinDir swapped since the
// check cannot make it unmount anything else.
func (s *Store) unmountPin(name string) error {
	f, err := regfile.OpenBeneath(s.pinsFd, name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Unmount(fdPath(int(f.Fd())), unix.MNT_DETACH)
}

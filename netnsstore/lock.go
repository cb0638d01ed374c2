package netnsstore

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

const lockFile = "lock"

// lock takes the store's single exclusive flock. Every mutation of pins,
// links and records happens under it, so concurrent plugin processes (the
// runtime runs many pods at once) see each other's steps whole. The kernel
// drops the lock when a process dies, which is what makes crash recovery
// by the next process possible. Taking the lock also reopens pinDir (see
// openPinDir).
func (s *Store) lock() (unlock func(), err error) {
	fd, err := openat2(s.stateFd, lockFile, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s/%s: %w", s.StateDir, lockFile, err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s/%s: %w", s.StateDir, lockFile, err)
	}
	if err := s.openPinDir(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return func() { unix.Close(fd) }, nil
}

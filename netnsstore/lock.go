package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

const lockFile = "lock"

// defaultLockTimeout bounds the wait for the lock. A holder of the lock
// that is stuck (say, in uninterruptible sleep) must not stall every pod
// start and stop on the node for ever: after this long the operation fails
// with ErrLockTimeout and the runtime tries again later.
const defaultLockTimeout = 30 * time.Second

// ErrLockTimeout is returned when the lock could not be taken in time.
var ErrLockTimeout = errors.New("timed out waiting for the lock")

// lock takes the store's single exclusive flock. Every mutation of pins,
// links and records happens under it, so concurrent plugin processes (the
// runtime runs many pods at once) see each other's steps whole. The kernel
// drops the lock when a process dies, which is what makes crash recovery
// by the next process possible. Taking the lock also reopens pinDir (see
// openPinDir).
func (s *Store) lock() (unlock func(), err error) {
	f, err := regfile.OpenBeneath(s.stateFd, lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s/%s: %w", s.StateDir, lockFile, err)
	}
	if err := FlockWithin(int(f.Fd()), s.lockTimeout); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s/%s: %w", s.StateDir, lockFile, err)
	}
	if err := s.openPinDir(); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// FlockWithin takes an exclusive flock, giving up after timeout. A
// blocking flock cannot be given a deadline, so it runs in a goroutine; on
// timeout the caller closes fd, and should the flock still succeed later,
// it is dropped with the last reference to the open file, which that
// goroutine's syscall holds.
func FlockWithin(fd int, timeout time.Duration) error {
	// The usual case, a free lock, without a goroutine and a timer.
	switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return nil
	case !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR):
		return err
	}
	done := make(chan error, 1)
	go func() {
		for {
			err := unix.Flock(fd, unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				done <- err
				return
			}
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%w (%s): another netns-pin process holds it", ErrLockTimeout, timeout)
	}
}

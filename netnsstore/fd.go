package netnsstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// readDirNames lists the entries of a directory fd without changing its
// offset for later users.
func readDirNames(dirfd int) ([]string, error) {
	dup, err := unix.Openat(dirfd, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// unlinkIfExists removes name in dirfd; a name that is gone already is no
// error.
func unlinkIfExists(dirfd int, name string) error {
	if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

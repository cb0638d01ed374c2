package netnsstore

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readAllFd reads a whole file from fd (which stays open) up to limit bytes.
func readAllFd(fd int, limit int64) ([]byte, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

// readFileAt reads the file name of dirfd whole, up to limit bytes,
// without following a symlink; ok is false when it does not exist.
func readFileAt(dirfd int, name string, limit int64) (data []byte, ok bool, err error) {
	fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(fd)
	if data, err = readAllFd(fd, limit); err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// readFile reads a small file without os.Open, whose os.File of a regular
// file starts the runtime's network poller, which an ADD or DEL does not
// need otherwise.
func readFile(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return readAllFd(fd, limit)
}

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

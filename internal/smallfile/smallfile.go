// Package smallfile reads the small files netns-pin reads whole: records
// and markers of the store, procfs, sysfs and debugfs files of the in-use
// check, the boot id. Every read is bounded (an error names the file when
// it is larger than the caller allows), takes regular files only (a FIFO,
// a device or a directory is an error naming it, never a hang: the open
// does not block and the descriptor is checked before the read), and
// retries EINTR here, in Retry, and nowhere else.
//
// The files are read with plain open and read, not an os.File, whose open
// registers the descriptor with the runtime's network poller (procfs files
// accept it, and every registration wakes the poller's thread): a fresh
// process, as every CNI call is, pays for that thread
// (docs/performance.md).
package smallfile

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Beneath is how OpenAt and ReadAt resolve a name below pinDir or
// stateDir: never above the directory, never through a symlink, so that a
// link planted by anyone cannot redirect a read, a write or a mount
// (docs/design.md §13).
const Beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// flags are every open's: a FIFO opened for reading without a writer does
// not block, and a terminal does not become the controlling one.
const flags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK

// Retry calls fn until it fails with another error than EINTR.
func Retry[T any](fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		if err != unix.EINTR {
			return v, err
		}
	}
}

// ReadPath reads the regular file at path whole, up to limit bytes. Errors
// are *os.PathError, so errors.Is(err, fs.ErrNotExist) tells a missing file.
func ReadPath(path string, limit int) ([]byte, error) {
	fd, err := Retry(func() (int, error) { return unix.Open(path, flags, 0) })
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return readRegular(fd, path, limit)
}

// ReadAt reads the regular file name of the directory dirfd whole, up to
// limit bytes, resolved as Beneath says (openat2): the files of pinDir and
// stateDir, which are replaced whole and whose size the stat tells (a
// chunk from 0, ReadChunkAt). Errors are *os.PathError naming name.
func ReadAt(dirfd int, name string, limit int) ([]byte, error) {
	data, size, err := ReadChunkAt(dirfd, name, 0, limit)
	if err == nil && size > int64(limit) {
		return nil, &os.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)}
	}
	return data, err
}

// ReadIn is ReadAt for a reader that holds no descriptor of the trusted
// directory dir (the node agent, check, the sweeper's status): dir is
// opened without following a symlink as its last component, and name is
// read beneath it. Errors name dir/name.
func ReadIn(dir, name string, limit int) ([]byte, error) {
	var data []byte
	err := In(dir, func(dirfd int) (err error) {
		data, err = ReadAt(dirfd, name, limit)
		return err
	})
	return data, err
}

// In calls fn with a descriptor of dir, opened without following a
// symlink as its last component; the relative path of an *os.PathError
// of fn is made dir's.
func In(dir string, fn func(dirfd int) error) error {
	dirfd, err := Retry(func() (int, error) {
		return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dirfd)
	err = fn(dirfd)
	if pe, ok := err.(*os.PathError); ok && !filepath.IsAbs(pe.Path) {
		pe.Path = filepath.Join(dir, pe.Path)
	}
	return err
}

// ReadChunkAt reads at most limit bytes of the regular file name of dirfd
// from offset off on (resolved as ReadAt does), and returns them with the
// file's size: a reader of a file that only grows reads it in bounded
// pieces. An offset past the end reads nothing.
func ReadChunkAt(dirfd int, name string, off int64, limit int) (data []byte, size int64, err error) {
	fd, err := OpenAt(dirfd, name, flags|unix.O_NOFOLLOW, 0)
	if err == unix.ELOOP || err == unix.EXDEV {
		err = fmt.Errorf("a symlink (or a path through one, or out of its directory), never followed: %w", err)
	}
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if _, err := Retry(func() (int, error) { return 0, unix.Fstat(fd, &st) }); err != nil {
		return nil, 0, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, 0, &os.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %s", ErrNotRegular, Kind(st.Mode))}
	}
	if off >= st.Size {
		return nil, st.Size, nil
	}
	buf := make([]byte, min(int64(limit), st.Size-off))
	n := 0
	for n < len(buf) {
		m, err := Retry(func() (int, error) { return unix.Pread(fd, buf[n:], off+int64(n)) })
		if err != nil {
			return nil, 0, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			break // cut shorter since the stat
		}
		n += m
	}
	return buf[:n], st.Size, nil
}

// OpenAt is openat2 of name in dirfd with flags and mode, resolved as
// Beneath says. EAGAIN (a concurrent rename, which openat2 asks to retry)
// is retried like EINTR.
func OpenAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: Beneath}
	for {
		fd, err := Retry(func() (int, error) { return unix.Openat2(dirfd, name, &how) })
		if err != unix.EAGAIN {
			return fd, err
		}
	}
}

func readRegular(fd int, name string, limit int) ([]byte, error) {
	var st unix.Stat_t
	if _, err := Retry(func() (int, error) { return 0, unix.Fstat(fd, &st) }); err != nil {
		return nil, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %s", ErrNotRegular, Kind(st.Mode))}
	}
	// procfs and sysfs files say size 0: start small, grow by reading.
	buf := make([]byte, 0, min(limit+1, max(int(st.Size)+1, 512)))
	data, err := Read(fd, buf, limit, false)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: name, Err: err}
	}
	return data, nil
}

// ErrNotRegular is the error for a FIFO, a device, a socket, a directory
// or a symlink where a regular file is read.
var ErrNotRegular = fmt.Errorf("not a regular file")

// Kind names the type of a file of mode (a stat's st_mode): "a FIFO"...
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	}
	return fmt.Sprintf("mode %#o", mode)
}

// ErrTooLarge is Read's error for a file over its limit.
var ErrTooLarge = fmt.Errorf("file too large")

// Read reads fd to its end into buf (growing it) and returns what it
// read, up to limit bytes, more being ErrTooLarge. With short, a read that
// does not fill buf is the end: sysfs attributes and single_open
// seq_files produce their whole content in one read. It is the fast path
// of the in-use check, which reads thousands of procfs and sysfs files
// into one buffer per worker: no allocation while buf is large enough, one
// read per file, and no stat of files that are procfs's and sysfs's own
// (opened with OpenIn).
func Read(fd int, buf []byte, limit int, short bool) ([]byte, error) {
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := Retry(func() (int, error) { return unix.Read(fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, err
		}
		if n == 0 || (short && len(buf)+n < cap(buf)) {
			buf = buf[:len(buf)+n]
			if len(buf) > limit {
				return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
			}
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// OpenIn opens name relative to dirfd for reading: the procfs, sysfs and
// debugfs files of the in-use check, whose roots are trusted
// (docs/design.md §13) and which are not stat'ed on the fast path. The open
// may block, as a stuck kernel call does: the check's own timeout bounds
// both (docs/design.md §15).
func OpenIn(dirfd int, name string) (int, error) {
	return Retry(func() (int, error) { return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0) })
}

// Package regfile opens and reads the small regular files netns-pin reads
// whole: the records and markers of its trusted directories, the node
// agent's status, the configuration files it is pointed at.
package regfile

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ReadFlags open a file to Read: a FIFO without a writer does not block the
// open (Read then refuses it), and a terminal does not become the
// controlling one.
const ReadFlags = os.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY

// OpenBeneath opens name (one or more components) in the directory dirfd
// with openat2, never above dirfd and never through a symlink, so that a
// link planted by anyone cannot redirect a read, a write or a mount
// (docs/design.md §13). os.Root would not do: it follows a symlink that
// stays inside the root, and it starts from a path, while the store holds
// descriptors of the directories it checked. O_CLOEXEC is added to flag.
func OpenBeneath(dirfd int, name string, flag int, perm os.FileMode) (*os.File, error) {
	how := unix.OpenHow{
		Flags:   uint64(flag | unix.O_CLOEXEC),
		Mode:    uint64(perm.Perm()),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN: // EAGAIN: a concurrent rename, which openat2 asks to retry
			continue
		case err == unix.ELOOP || err == unix.EXDEV:
			err = fmt.Errorf("a symlink (or a path through one, or out of its directory), never followed: %w", err)
			fallthrough
		case err != nil:
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}

// Read reads f whole, a regular file of at most limit bytes. Anything else
// is an error naming f, at once: f was opened with ReadFlags, and is not
// read when its stat says it is no regular file.
func Read(f *os.File, limit int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: f.Name(), Err: errors.New("not a regular file: " + Kind(fi.Mode()))}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		return nil, &os.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("file too large: over %d bytes", limit)}
	}
	return data, err
}

// ReadFile reads the regular file at path whole, at most limit bytes,
// opened with ReadFlags and flag (O_NOFOLLOW for a file that is not the
// operator's own).
func ReadFile(path string, flag int, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, ReadFlags|flag, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, limit)
}

// ReadBeneath reads the regular file name beneath dirfd whole, at most
// limit bytes: the files of pinDir and stateDir, each replaced whole.
// Errors are *os.PathError naming name, so errors.Is(err, fs.ErrNotExist)
// tells a missing file.
func ReadBeneath(dirfd int, name string, limit int64) ([]byte, error) {
	f, err := OpenBeneath(dirfd, name, ReadFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, limit)
}

// InDir calls fn with a descriptor of dir, opened without following a
// symlink as its last component, for a reader that holds none (the node
// agent, check, the sweeper's status): what fn opens beneath it is
// resolved as the store's own reads are. The relative path of an
// *os.PathError of fn is made dir's.
func InDir(dir string, fn func(dirfd int) error) error {
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	err = fn(int(d.Fd()))
	if pe, ok := err.(*os.PathError); ok && !filepath.IsAbs(pe.Path) {
		pe.Path = filepath.Join(dir, pe.Path)
	}
	return err
}

// ReadIn is ReadBeneath of name beneath dir (InDir).
func ReadIn(dir, name string, limit int64) (data []byte, err error) {
	err = InDir(dir, func(dirfd int) error {
		data, err = ReadBeneath(dirfd, name, limit)
		return err
	})
	return data, err
}

// Kind names the type of a file that is not regular, for an error: "a
// FIFO", "a symlink", ...
func Kind(m fs.FileMode) string { return cmp.Or(kinds[m.Type()], m.Type().String()) }

var kinds = map[fs.FileMode]string{fs.ModeNamedPipe: "a FIFO", fs.ModeDevice | fs.ModeCharDevice: "a character device",
	fs.ModeDevice: "a block device", fs.ModeSocket: "a socket", fs.ModeDir: "a directory", fs.ModeSymlink: "a symlink"}

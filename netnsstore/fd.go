package netnsstore

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
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

// readFile reads the regular file name beneath dirfd whole, at most limit
// bytes: the files of pinDir and stateDir, each replaced whole. Errors
// are *os.PathError naming name, so errors.Is(err, fs.ErrNotExist) tells a
// missing file.
func readFile(dirfd int, name string, limit int64) ([]byte, error) {
	f, err := regfile.OpenBeneath(dirfd, name, regfile.ReadFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return regfile.Read(f, limit)
}

// inDir calls fn with a descriptor of dir, opened without following a
// symlink as its last component, for a reader that holds none (the node
// agent, check, the sweeper's status): what fn opens beneath it is
// resolved as the store's own reads are. The relative path of an
// *os.PathError of fn is made dir's.
func inDir(dir string, fn func(dirfd int) error) error {
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

// readIn is readFile of name beneath dir, for a reader without a
// descriptor of dir (inDir).
func readIn(dir, name string, limit int64) (data []byte, err error) {
	err = inDir(dir, func(dirfd int) error {
		data, err = readFile(dirfd, name, limit)
		return err
	})
	return data, err
}

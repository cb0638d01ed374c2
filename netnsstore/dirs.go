package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/smallfile"
)

// ensureTrustedDir creates dir (and missing parents) and checks that dir
// itself is a real directory owned by root and not writable by group or
// others: anyone who could write there could swap a pin or a record.
func ensureTrustedDir(dir string, mode os.FileMode) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
		}
		if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return err
	}
	return checkTrusted(dir, fi)
}

func checkTrusted(dir string, fi os.FileInfo) error {
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink; use the real directory", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", dir)
	}
	if st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, want root (0)", dir, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s has mode %v: group or others may write; want at most 0755", dir, fi.Mode().Perm())
	}
	return nil
}

// openDirBeneath opens rel (a relative path, possibly several components)
// below the directory fd root without following symlinks, creating the
// missing directories with mode when create is set.
func openDirBeneath(root int, rel string, create bool, mode uint32) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	if rel == "." || rel == "" {
		return fd, nil
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			unix.Close(fd)
			return -1, fmt.Errorf("path %q leaves its directory", rel)
		}
		next, err := smallfile.OpenAt(fd, part, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err := unix.Mkdirat(fd, part, mode); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, fmt.Errorf("mkdir %s: %w", part, err)
			}
			next, err = smallfile.OpenAt(fd, part, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %s in %q: %w", part, rel, err)
		}
		fd = next
	}
	return fd, nil
}

// openRootDir opens an absolute directory that was checked by
// ensureTrustedDir, refusing a symlink in its last component.
func openRootDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}

package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openTrustedDir opens the absolute directory dir by walking it from "/"
// one component at a time, never following a symlink, and checks every
// directory on the way, dir included: owned by root and not writable by
// group or others. Anyone who could write an ancestor could rename the
// directory away and put another in its place between a check and a mount.
// One exception, for ancestors only: a root-owned directory with the
// sticky bit (/tmp) may be writable by all, because there nobody but root
// and an entry's owner can rename or remove that entry, and the next
// component must itself be root-owned. dir itself never may be.
// With create, missing components are made: intermediate ones 0755, dir
// itself with mode. The descriptor is what mounts and unmounts go through
// (/proc/self/fd), so whatever happens to the path afterwards, they act on
// the directory that was checked.
func openTrustedDir(dir string, create bool, mode uint32) (int, error) {
	if !filepath.IsAbs(dir) {
		return -1, fmt.Errorf("%q: want an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	fd, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	if err = checkTrustedFd(fd, "/", dir != "/"); err != nil {
		unix.Close(fd)
	} else {
		fd, err = openChain(fd, dir, create, mode, true)
	}
	var u *UntrustedDirError
	if errors.As(err, &u) {
		u.Of = dir
	}
	return fd, err
}

// dirFlags open one component of a directory's path: a name that is never
// ".." (the paths are clean, openChain refuses it), so O_NOFOLLOW is
// all it takes to stay beneath the directory and off every symlink, what
// regfile.OpenBeneath asks openat2 for.
const dirFlags = unix.O_DIRECTORY | unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openChain opens the components of path one by one beneath the directory
// fd, which it takes over, without following a symlink. With create, a
// missing component is made: 0755, the last one mode. trusted: path is
// absolute, fd is "/", and every directory opened must pass
// checkTrustedFd.
func openChain(fd int, path string, create bool, mode uint32, trusted bool) (int, error) {
	at := ""
	if trusted {
		at = "/"
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, part := range parts {
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			unix.Close(fd)
			return -1, fmt.Errorf("path %q leaves its directory", path)
		}
		last := i == len(parts)-1
		at = filepath.Join(at, part)
		next, err := unix.Openat(fd, part, dirFlags, 0)
		if errors.Is(err, unix.ENOENT) && create {
			m := uint32(0o755)
			if last {
				m = mode
			}
			if err := unix.Mkdirat(fd, part, m); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, fmt.Errorf("create %s: %w", at, err)
			}
			next, err = unix.Openat(fd, part, dirFlags, 0)
		}
		unix.Close(fd)
		switch {
		case err != nil && trusted:
			return -1, describeOpenErr(at, err)
		case err != nil:
			return -1, fmt.Errorf("open %s: %w", at, err)
		}
		fd = next
		if trusted {
			if err := checkTrustedFd(fd, at, !last); err != nil {
				unix.Close(fd)
				return -1, err
			}
		}
	}
	return fd, nil
}

// describeOpenErr says why a component of a trusted directory's path
// could not be opened, naming it.
func describeOpenErr(at string, err error) error {
	var st unix.Stat_t
	if unix.Lstat(at, &st) == nil {
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return &UntrustedDirError{Path: at, Why: "is a symlink; use the real directory"}
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return &UntrustedDirError{Path: at, Why: "is not a directory"}
		}
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("open %s: a symlink in the way: %w", at, err)
	}
	return fmt.Errorf("open %s: %w", at, err)
}

// checkTrustedFd checks the open directory fd, named at: owned by root,
// not writable by group or others, or (ancestor) root-owned and sticky.
func checkTrustedFd(fd int, at string, ancestor bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", at, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return &UntrustedDirError{Path: at, Why: "is not a directory"}
	}
	perm := os.FileMode(st.Mode & 0o777)
	if st.Uid != 0 {
		return &UntrustedDirError{Path: at, Why: fmt.Sprintf("is owned by uid %d, want root (0)", st.Uid)}
	}
	if perm&0o022 != 0 && !(ancestor && st.Mode&unix.S_ISVTX != 0) {
		return &UntrustedDirError{Path: at, Why: fmt.Sprintf("has mode %v: group or others may write; want at most 0755", perm)}
	}
	return nil
}

// UntrustedDirError is a directory on the way to pinDir or stateDir (or
// that directory itself) that fails the rule of openTrustedDir.
type UntrustedDirError struct {
	Path string // the offending directory (or symlink)
	Of   string // the directory it is on the way to (Path itself when the same)
	Why  string
}

func (e *UntrustedDirError) Error() string {
	if e.Of != "" && e.Of != e.Path {
		return e.Path + " (on the way to " + e.Of + ") " + e.Why
	}
	return e.Path + " " + e.Why
}

// openDirBeneath opens rel (a relative path, possibly several components)
// below the directory fd root without following symlinks, creating the
// missing directories when create is set (see openChain).
func openDirBeneath(root int, rel string, create bool, mode uint32) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	return openChain(fd, rel, create, mode, false)
}

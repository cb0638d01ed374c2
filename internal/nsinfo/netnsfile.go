package nsinfo

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotNetns is wrapped by OpenNetns for paths that are no network
// namespace file.
var ErrNotNetns = errors.New("not a network namespace")

// OpenNetns opens path as a network namespace file, for setns and fstat.
// It refuses, wrapping ErrNotNetns, anything that is not an nsfs file of
// type CLONE_NEWNET: a regular file, a directory, a FIFO, a mount or pid
// namespace. The descriptor is the caller's to close.
func OpenNetns(path string) (int, error) {
	// O_PATH first: opening a FIFO or device for reading could block or
	// have side effects, and fstatfs works on an O_PATH descriptor.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(pfd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pfd, &sfs); err != nil {
		return -1, fmt.Errorf("statfs netns %s: %w", path, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return -1, fmt.Errorf("netns %s: %w: not on nsfs", path, ErrNotNetns)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open netns %s: %w", path, err)
	}
	nstype, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netns %s: NS_GET_NSTYPE: %w", path, err)
	}
	if nstype != unix.CLONE_NEWNET {
		unix.Close(fd)
		return -1, fmt.Errorf("netns %s: %w: it is a %s namespace", path, ErrNotNetns, cmp.Or(nsTypeNames[nstype], fmt.Sprintf("type %#x", nstype)))
	}
	return fd, nil
}

var nsTypeNames = map[int]string{unix.CLONE_NEWNS: "mount", unix.CLONE_NEWPID: "pid", unix.CLONE_NEWUSER: "user",
	unix.CLONE_NEWUTS: "uts", unix.CLONE_NEWIPC: "ipc", unix.CLONE_NEWCGROUP: "cgroup", unix.CLONE_NEWTIME: "time"}

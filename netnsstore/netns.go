package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// NetnsID identifies a network namespace while something holds it: the
// nsfs device and inode. Inode numbers are reused once a namespace dies,
// so an ID is only meaningful for a namespace that is pinned or open.
type NetnsID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (id NetnsID) String() string { return "net:[" + strconv.FormatUint(id.Ino, 10) + "]" }

// ErrNotNetns is wrapped by OpenNetns for paths that are no network
// namespace file.
var ErrNotNetns = errors.New("not a network namespace")

// OpenNetns opens path as a network namespace and returns it with its ID.
// It refuses anything that is not an nsfs file of type CLONE_NEWNET (a
// regular file, a directory, a mount or pid namespace) and the caller's
// own network namespace, which would pin the host's.
func OpenNetns(path string) (*os.File, NetnsID, error) {
	// O_PATH first: opening a FIFO or device for reading could block or
	// have side effects, and fstatfs works on an O_PATH descriptor.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, NetnsID{}, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(pfd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pfd, &sfs); err != nil {
		return nil, NetnsID{}, fmt.Errorf("statfs netns %s: %w", path, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return nil, NetnsID{}, fmt.Errorf("netns %s: %w: not on nsfs", path, ErrNotNetns)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, NetnsID{}, fmt.Errorf("open netns %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	nstype, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		f.Close()
		return nil, NetnsID{}, fmt.Errorf("netns %s: NS_GET_NSTYPE: %w", path, err)
	}
	if nstype != unix.CLONE_NEWNET {
		f.Close()
		return nil, NetnsID{}, fmt.Errorf("netns %s: %w: it is a %s namespace", path, ErrNotNetns, nsTypeName(nstype))
	}
	id, err := fdNetnsID(fd)
	if err != nil {
		f.Close()
		return nil, NetnsID{}, fmt.Errorf("netns %s: %w", path, err)
	}
	own, err := pathNetnsID("/proc/self/ns/net")
	if err != nil {
		f.Close()
		return nil, NetnsID{}, err
	}
	if id == own {
		f.Close()
		return nil, NetnsID{}, fmt.Errorf("netns %s: %w: it is the plugin's own (host) network namespace", path, ErrNotNetns)
	}
	return f, id, nil
}

func fdNetnsID(fd int) (NetnsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return NetnsID{}, fmt.Errorf("fstat: %w", err)
	}
	return NetnsID{Dev: st.Dev, Ino: st.Ino}, nil
}

func pathNetnsID(path string) (NetnsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return NetnsID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return NetnsID{Dev: st.Dev, Ino: st.Ino}, nil
}

func nsTypeName(t int) string {
	switch t {
	case unix.CLONE_NEWNS:
		return "mount"
	case unix.CLONE_NEWPID:
		return "pid"
	case unix.CLONE_NEWUSER:
		return "user"
	case unix.CLONE_NEWUTS:
		return "uts"
	case unix.CLONE_NEWIPC:
		return "ipc"
	case unix.CLONE_NEWCGROUP:
		return "cgroup"
	case unix.CLONE_NEWTIME:
		return "time"
	}
	return fmt.Sprintf("type %#x", t)
}

package netnsstore

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// NetnsID identifies a network namespace while something holds it: the
// nsfs device and inode. Inode numbers are reused once a namespace dies,
// so an ID is only meaningful for a namespace that is pinned or open.
type NetnsID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (id NetnsID) String() string { return "net:[" + strconv.FormatUint(id.Ino, 10) + "]" }

// openNetns opens path as a network namespace and returns it with its ID.
// It refuses anything that is not an nsfs file of type CLONE_NEWNET (a
// regular file, a directory, a mount or pid namespace: nsinfo.OpenNetns)
// and the caller's own network namespace, which would pin the host's.
func openNetns(path string) (*os.File, NetnsID, error) {
	fd, err := nsinfo.OpenNetns(path)
	if err != nil {
		return nil, NetnsID{}, err
	}
	f := os.NewFile(uintptr(fd), path)
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
		return nil, NetnsID{}, fmt.Errorf("netns %s: %w: it is the plugin's own (host) network namespace", path, nsinfo.ErrNotNetns)
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

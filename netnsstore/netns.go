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
	var st, own unix.Stat_t
	if err = unix.Fstat(fd, &st); err != nil {
		err = fmt.Errorf("netns %s: fstat: %w", path, err)
	} else if err = unix.Stat("/proc/self/ns/net", &own); err != nil {
		err = fmt.Errorf("stat /proc/self/ns/net: %w", err)
	} else if st.Dev == own.Dev && st.Ino == own.Ino {
		err = fmt.Errorf("netns %s: %w: it is the plugin's own (host) network namespace", path, nsinfo.ErrNotNetns)
	}
	if err != nil {
		f.Close()
		return nil, NetnsID{}, err
	}
	return f, NetnsID{Dev: st.Dev, Ino: st.Ino}, nil
}

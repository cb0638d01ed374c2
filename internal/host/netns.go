package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// nsfsMagic is NSFS_MAGIC from linux/magic.h: the statfs type of namespace
// files, which tells a pin (an nsfs bind mount) from a plain file.
const nsfsMagic = 0x6e736673

// NSID is the identity of a namespace file: the nsfs device and inode. Two
// paths lead to the same namespace exactly when their NSIDs are equal.
type NSID struct{ Dev, Ino uint64 }

func (n NSID) String() string { return fmt.Sprintf("net:[%d] (dev %d)", n.Ino, n.Dev) }

// NSIDOf stats a namespace path (following symlinks) and requires nsfs.
func NSIDOf(path string) (NSID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return NSID{}, err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return NSID{}, err
	}
	if fs.Type != nsfsMagic {
		return NSID{}, fmt.Errorf("%s is not an nsfs file (statfs type %#x)", path, fs.Type)
	}
	return NSID{Dev: st.Dev, Ino: st.Ino}, nil
}

// netnsPath is where `ip netns add <name>` pins a namespace.
func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

// AddNetns makes a network namespace with `ip netns add`, as a container
// runtime makes a pod's, with lo up and, when cidr is not empty, a veth
// pair inside it whose end eth0 has cidr (a holder's global address). It
// returns the namespace's path; on error the namespace may exist and
// DelNetns removes it.
func AddNetns(name, cidr string) (string, error) {
	if r := RunCmd(CmdTimeout, nil, nil, "ip", "netns", "add", name); r.Err != nil {
		return "", fmt.Errorf("%s", r)
	}
	batch := "link set lo up\n"
	if cidr != "" {
		batch += "link add eth0 type veth peer name eth0p\n" +
			"addr add " + cidr + " dev eth0\n" +
			"link set eth0p up\n" +
			"link set eth0 up\n"
	}
	if r := RunCmd(CmdTimeout, nil, []byte(batch), "ip", "-n", name, "-batch", "-"); r.Err != nil {
		return "", fmt.Errorf("%s", r)
	}
	return netnsPath(name), nil
}

// DelNetns removes the name of a namespace AddNetns made, unless it is gone
// already (the namespace lives on while anything pins or holds it).
func DelNetns(name string) error {
	if _, err := os.Lstat(netnsPath(name)); os.IsNotExist(err) {
		return nil
	}
	if r := RunCmd(CmdTimeout, nil, nil, "ip", "netns", "del", name); r.Err != nil {
		return fmt.Errorf("%s", r)
	}
	return nil
}

// LinkExists reports whether a link of that name is in this (the host's)
// network namespace.
func LinkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// StartInNetns starts name with args inside the network namespace at path,
// the way ceph-csi starts its clients (`nsenter --net=<path> -- ...`;
// nsenter execs the command, so the process is the command), and waits
// until the process runs in that namespace. On error nothing is left
// running.
func StartInNetns(path, name string, args ...string) (*exec.Cmd, error) {
	want, err := NSIDOf(path)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + path, "--", name}, args...)...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nsenter --net=%s -- %s: %w", path, name, err)
	}
	pidNetns := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	// Entered, and nsenter has exec'd the command: until then the process
	// is named nsenter, and a test that reads what holds the netns would
	// see that name.
	comm := fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)
	if Poll(10*time.Second, 5*time.Millisecond, func() bool {
		id, err := NSIDOf(pidNetns)
		c, cerr := os.ReadFile(comm)
		return err == nil && id == want && cerr == nil && strings.TrimSpace(string(c)) != "nsenter"
	}) {
		return cmd, nil
	}
	if err := Stop(cmd); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s (pid %d) did not enter %s", name, cmd.Process.Pid, path)
}

// Stop kills a started command and reaps it, so that it is gone from /proc.
// A command that has exited already is only reaped.
func Stop(cmd *exec.Cmd) error {
	if cmd.ProcessState != nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", cmd.Path, err)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); err != nil && !errors.As(err, &exit) { // an exit status is what the kill caused
		return fmt.Errorf("wait for %s: %w", cmd.Path, err)
	}
	return nil
}

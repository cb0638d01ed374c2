package inuse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
)

// These tests use real network namespaces, real processes and real sockets.
// They need root (the machine runs tests as root) and fail, not skip,
// without it.

const helperEnv = "INUSE_TEST_HELPER"

// TestMain doubles as the helper process the tests start inside a netns
// (nsenter --net=<netns> -- <test binary>): with INUSE_TEST_HELPER set it
// does what the mode says, prints "ready" and waits for stdin to close.
func TestMain(m *testing.M) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	if mode == "check" {
		os.Exit(checkHelper())
	}
	var keep []io.Closer
	switch mode {
	case "wait":
	case "tcp":
		// A userspace Ceph client stand-in: a "monitor" on 6789 and a
		// connection to it, both held by this process.
		ln, err := net.Listen("tcp", "127.0.0.1:6789")
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		c, err := net.Dial("tcp", "127.0.0.1:6789")
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		s, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		keep = append(keep, ln, c, s)
		go func() { // hold connections the test makes to it as well
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				keep = append(keep, c)
			}
		}()
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
		os.Exit(2)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range keep {
		c.Close()
	}
	os.Exit(0)
}

func requireRoot(t *testing.T) {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "this test creates network namespaces and cgroups: run it as root")
}

var netnsSeq atomic.Int64

const netnsIP = "192.0.2.10"

// newNetns creates a throwaway named netns with lo up and an address on it,
// and returns it as a check target.
func newNetns(t *testing.T) Target {
	t.Helper()
	requireRoot(t)
	staleOnce.Do(func() { removeStaleNetns(t) })
	name := fmt.Sprintf("inuse-test-%d-%d", os.Getpid(), netnsSeq.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	run(t, "ip", "-n", name, "addr", "add", netnsIP+"/32", "dev", "lo")
	path := filepath.Join("/run/netns", name)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return Target{NetnsPath: path, Dev: uint64(st.Dev), Ino: st.Ino, IPs: []netip.Addr{netip.MustParseAddr(netnsIP)}}
}

var staleOnce sync.Once

// removeStaleNetns deletes the namespaces of earlier runs whose test process
// is gone: a run killed by its timeout does not get to run its cleanups.
func removeStaleNetns(t *testing.T) {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "inuse-test-")
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // a live run's
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			t.Logf("removing stale netns %s: %v: %s", e.Name(), err, out)
		}
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}

type helper struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	pid    int
	done   bool
}

// startHelper runs this test binary in the netns the way ceph-csi runs its
// clients (nsenter --net=<path> -- cmd) and waits until it says it is ready.
func startHelper(t *testing.T, netnsPath, mode string) *helper {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	h := &helper{t: t, cmd: exec.Command("nsenter", "--net="+netnsPath, "--", exe)}
	h.cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	h.cmd.Stderr = &h.stderr
	h.stdin, err = h.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := h.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, h.cmd.Start())
	t.Cleanup(h.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "helper: %s", &h.stderr)
	require.Equal(t, "ready\n", line)
	h.pid = h.cmd.Process.Pid
	return h
}

// stop kills the helper and reaps it: once it returns, the pid is gone
// from /proc.
func (h *helper) stop() {
	if h.done {
		return
	}
	h.done = true
	if err := host.Stop(h.cmd); err != nil {
		h.t.Errorf("stop the helper: %v", err)
	}
}

// helperComm is the comm the kernel gives the helper: the executable's
// base name cut to TASK_COMM_LEN-1 bytes.
func helperComm(t *testing.T) string {
	exe, err := os.Executable()
	require.NoError(t, err)
	c := filepath.Base(exe)
	return c[:min(len(c), 15)]
}

func checkReal(t *testing.T, tg Target) []Reference {
	t.Helper()
	refs, err := Check(tg, Options{})
	require.NoError(t, err)
	return refs
}

func TestNetnsProcess(t *testing.T) {
	tg := newNetns(t)
	assert.Empty(t, checkReal(t, tg), "a fresh netns is used by nobody")

	h := startHelper(t, tg.NetnsPath, "wait")
	refs := checkReal(t, tg)
	assert.Equal(t, []Reference{{Kind: kindProcess, PID: h.pid, Comm: helperComm(t), InNetns: true}}, refs)
	assert.Equal(t, fmt.Sprintf("process %d (%s)", h.pid, helperComm(t)), refs[0].String())

	h.stop()
	assert.Empty(t, checkReal(t, tg), "the process is gone")
}

func TestNetnsHolderPodProcessExcluded(t *testing.T) {
	requireRoot(t)
	const root = "/sys/fs/cgroup/pids"
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(root, &st), "want the cgroup v1 pids hierarchy at %s", root)
	require.Equal(t, int64(unix.CGROUP_SUPER_MAGIC), int64(st.Type), "%s is not a cgroup v1 hierarchy", root)

	uid := fmt.Sprintf("5a6b7c8d-%04x-4e5f-8a9b-%012x", os.Getpid()&0xffff, netnsSeq.Add(1))
	for _, tc := range []struct{ driver, dir string }{
		{"cgroupfs", "kubepods/besteffort/pod" + uid},
		{"systemd", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			tg := newNetns(t)
			base := filepath.Join(root, fmt.Sprintf("inuse-test-%d-%d", os.Getpid(), netnsSeq.Add(1)))
			dir := filepath.Join(base, tc.dir)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			t.Cleanup(func() { removeCgroups(t, base) }) // runs after the helper is reaped

			h := startHelper(t, tg.NetnsPath, "wait")
			require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(h.pid)), 0o644))
			cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.pid))
			require.NoError(t, err)
			require.Contains(t, string(cg), tc.dir)

			tg.PodUID = uid
			assert.Empty(t, checkReal(t, tg), "the holder pod's own process is not a reference")
			tg.PodUID = "11111111-2222-3333-4444-555555555555"
			assert.Len(t, checkReal(t, tg), 1, "another pod's process is")
			tg.PodUID = ""
			assert.Len(t, checkReal(t, tg), 1)
		})
	}
}

// removeCgroups removes a cgroup tree, deepest first.
func removeCgroups(t *testing.T, base string) {
	var dirs []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil {
		t.Errorf("list cgroups under %s: %v", base, err)
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil {
			t.Errorf("rmdir %s: %v", d, err)
		}
	}
}

// dialIn connects from this (host-netns) process to addr inside the netns:
// the socket is created by a thread that has entered the netns, so it lives
// there while this process, outside, holds it.
func dialIn(t *testing.T, netnsPath, addr string) *net.TCPConn {
	t.Helper()
	var c net.Conn
	require.NoError(t, ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		c, err = net.Dial("tcp", addr)
		return err
	}))
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func TestNetnsSocketsHeldByProcesses(t *testing.T) {
	tg := newNetns(t)
	h := startHelper(t, tg.NetnsPath, "tcp")
	mon := netip.MustParseAddrPort("127.0.0.1:6789")

	refs := checkReal(t, tg)
	require.Len(t, refs, 1, "%v", refs)
	assert.Equal(t, kindProcess, refs[0].Kind, "a userspace connection is the process's, not a kernel socket")
	assert.Equal(t, h.pid, refs[0].PID)
	assert.True(t, refs[0].InNetns)
	assert.Equal(t, 1, refs[0].Sockets, "the connection to 6789; not the listener, not the accepted side")
	assert.Equal(t, mon, refs[0].Remote)

	// This process, outside the netns, holds a socket inside it.
	c := dialIn(t, tg.NetnsPath, mon.String())
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	refs = checkReal(t, tg)
	require.Len(t, refs, 2, "%v", refs)
	me := refs[slices.IndexFunc(refs, func(r Reference) bool { return r.PID == os.Getpid() })]
	assert.Equal(t, Reference{Kind: kindProcess, PID: os.Getpid(), Comm: helperComm(t), Sockets: 1, Local: local, Remote: mon}, me)
	assert.Contains(t, me.String(), ", outside the netns, Ceph connection 127.0.0.1:")

	// Closed: the socket is orphaned (inode 0) and nobody's reference.
	require.NoError(t, c.Close())
	refs = checkReal(t, tg)
	require.Len(t, refs, 1, "%v", refs)
	assert.Equal(t, h.pid, refs[0].PID)

	h.stop()
	assert.Empty(t, checkReal(t, tg))
}

// TestNetnsUnheldSocketIsKernelSocket makes a socket that no process holds
// without a kernel client: a TCP socket in flight in an SCM_RIGHTS message
// is referenced only by the message, exactly like a kernel client's socket
// is referenced only by the kernel. It must be reported as a kernel socket,
// and as this process's again once received.
func TestNetnsUnheldSocketIsKernelSocket(t *testing.T) {
	tg := newNetns(t)
	startHelper(t, tg.NetnsPath, "tcp")
	mon := netip.MustParseAddrPort("127.0.0.1:6789")

	c := dialIn(t, tg.NetnsPath, mon.String())
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	f, err := c.File()
	require.NoError(t, err)
	require.NoError(t, c.Close()) // close(2), not shutdown: f keeps the connection
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(pair[0]); unix.Close(pair[1]) })
	require.NoError(t, unix.Sendmsg(pair[0], []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0))
	require.NoError(t, f.Close())

	refs := checkReal(t, tg)
	require.Len(t, refs, 2, "%v", refs)
	assert.Equal(t, kindProcess, refs[0].Kind) // the helper
	assert.Equal(t, Reference{Kind: kindSocket, Local: local, Remote: mon, Inode: refs[1].Inode}, refs[1])
	assert.NotZero(t, refs[1].Inode)
	assert.Equal(t, "kernel socket "+local.String()+" -> 127.0.0.1:6789", refs[1].String())

	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(pair[1], buf, oob, unix.MSG_CMSG_CLOEXEC)
	require.NoError(t, err)
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	fds, err := unix.ParseUnixRights(&msgs[0])
	require.NoError(t, err)
	require.Len(t, fds, 1)
	refs = checkReal(t, tg)
	require.Len(t, refs, 2, "%v", refs)
	i := slices.IndexFunc(refs, func(r Reference) bool { return r.PID == os.Getpid() })
	require.GreaterOrEqual(t, i, 0, "held by this process again: %v", refs)
	assert.Equal(t, local, refs[i].Local)
	assert.False(t, refs[i].InNetns)
	require.NoError(t, unix.Close(fds[0]))
}

// checkHelper runs one in-use check of the fixture at INUSE_TEST_ROOT under
// unattributed: ignore, for a pin with the address INUSE_TEST_IP, and
// prints the references, or the error and exits 3: a check as a process
// with other capabilities than the test's sees it.
func checkHelper() int {
	root := os.Getenv("INUSE_TEST_ROOT")
	o := Options{Sysfs: filepath.Join(root, "sys"), Debugfs: filepath.Join(root, "debug"), Proc: filepath.Join(root, "proc"), Unattributed: policyIgnore}
	refs, err := Check(Target{IPs: []netip.Addr{netip.MustParseAddr(os.Getenv("INUSE_TEST_IP"))}}, o)
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	for _, r := range refs {
		fmt.Println(r.String())
	}
	return 0
}

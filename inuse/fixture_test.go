package inuse

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

// fixture builds sysfs, debugfs and procfs trees laid out like the kernel's
// under a temporary directory (sysfs and debugfs with package cephfixture):
//
//	sys/..., debug/ceph/...
//	proc/filesystems, proc/1/mountinfo
//	proc/<pid>/{comm,cgroup,ns/net -> <netns>,fd/<n> -> socket:[ino]}
//	proc/thread-self/net/{tcp,tcp6}
type fixture struct {
	tb                   testing.TB
	root                 string
	sysfs, debugfs, proc string
	// pinned and other stand for two network namespaces: processes whose
	// ns/net links to pinned are in the target netns.
	pinned, other string
}

const fsidA, fsidB = cephfixture.FSIDA, cephfixture.FSIDB

var (
	ourIP4   = netip.MustParseAddr("192.168.20.5")
	ourIP6   = netip.MustParseAddr("fd00::17")
	otherIP4 = netip.MustParseAddr("192.168.20.6")
)

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	root := tb.TempDir()
	f := &fixture{
		tb: tb, root: root,
		sysfs:   filepath.Join(root, "sys"),
		debugfs: filepath.Join(root, "debug"),
		proc:    filepath.Join(root, "proc"),
		pinned:  filepath.Join(root, "netns-pinned"),
		other:   filepath.Join(root, "netns-other"),
	}
	for _, d := range []string{f.sysfs, f.debugfs, f.proc} {
		require.NoError(tb, os.MkdirAll(d, 0o755))
	}
	f.write(f.pinned, "")
	f.write(f.other, "")
	// Every /proc has these; the checker must skip non-numeric entries.
	f.write(filepath.Join(f.proc, "sys", "kernel", "ostype"), "Linux\n")
	f.write(filepath.Join(f.proc, "1", "mountinfo"), baseMountinfo)
	// debugfs mounted and libceph and ceph loaded; see noDebugfs and noCephFS.
	require.NoError(tb, os.MkdirAll(filepath.Join(f.debugfs, "ceph"), 0o755))
	f.write(filepath.Join(f.proc, "filesystems"), cephfixture.Filesystems(true))
	return f
}

const baseMountinfo = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:3 - sysfs sysfs rw
25 22 0:40 / /var/lib/kubelet/fuse rw,relatime shared:9 - fuse.ceph-fuse ceph-fuse rw,user_id=0,group_id=0,allow_other
`

func (f *fixture) write(path, content string) {
	f.tb.Helper()
	require.NoError(f.tb, cephfixture.Write(path, content))
}

func (f *fixture) symlink(target, path string) {
	f.tb.Helper()
	require.NoError(f.tb, cephfixture.Symlink(target, path))
}

// rbdDev is an rbd device's sysfs attributes.
type rbdDev = cephfixture.RBDDev

func (f *fixture) rbd(id int, d rbdDev) {
	f.tb.Helper()
	require.NoError(f.tb, cephfixture.RBD(f.sysfs, id, d))
}

// debugfsClient creates <debugfs>/ceph/<fsid>.client<gid>/; status "" means
// no status file (an rbd client, or CephFS before Linux 5.11).
func (f *fixture) debugfsClient(fsid string, gid int, status string) {
	f.tb.Helper()
	require.NoError(f.tb, cephfixture.DebugfsClient(f.debugfs, fsid, gid, status))
}

// cephfsStatus is fs/ceph/debugfs.c status_show's output.
func cephfsStatus(gid int, addr string) string { return cephfixture.CephFSStatus(gid, addr) }

// noDebugfs removes <debugfs>/ceph, as when debugfs is not mounted.
func (f *fixture) noDebugfs() {
	f.tb.Helper()
	require.NoError(f.tb, os.RemoveAll(filepath.Join(f.debugfs, "ceph")))
}

// noCephFS writes a /proc/filesystems without the ceph type, as on a node
// where the ceph module is not loaded.
func (f *fixture) noCephFS() {
	f.tb.Helper()
	f.write(filepath.Join(f.proc, "filesystems"), cephfixture.Filesystems(false))
}

func (f *fixture) mountinfo(lines ...string) {
	f.tb.Helper()
	f.write(filepath.Join(f.proc, "1", "mountinfo"), baseMountinfo+strings.Join(lines, "\n")+"\n")
}

// proc is a process of the fixture /proc.
type proc struct {
	Comm   string
	Cgroup string // content of <pid>/cgroup; default: a plain system service
	Netns  string // target of <pid>/ns/net; "" for none (vanished, zombie)
	FDs    map[int]string
}

func (f *fixture) process(pid int, p proc) {
	f.tb.Helper()
	dir := filepath.Join(f.proc, strconv.Itoa(pid))
	f.write(filepath.Join(dir, "comm"), p.Comm+"\n")
	cg := p.Cgroup
	if cg == "" {
		cg = "0::/system.slice/" + p.Comm + ".service\n"
	}
	f.write(filepath.Join(dir, "cgroup"), cg)
	require.NoError(f.tb, os.MkdirAll(filepath.Join(dir, "ns"), 0o755))
	if p.Netns != "" {
		f.symlink(p.Netns, filepath.Join(dir, "ns", "net"))
	}
	require.NoError(f.tb, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	f.symlink("/dev/null", filepath.Join(dir, "fd", "0"))
	f.symlink("pipe:[4242]", filepath.Join(dir, "fd", "1"))
	for n, target := range p.FDs {
		f.symlink(target, filepath.Join(dir, "fd", strconv.Itoa(n)))
	}
}

// tcp writes <proc>/thread-self/net/tcp and tcp6 from socket descriptions,
// in the kernel's format (cephfixture.TCPLine).
func (f *fixture) tcp(v4, v6 []tcpSocket) {
	f.tb.Helper()
	var b4, b6 strings.Builder
	b4.WriteString(cephfixture.TCPHeader)
	b6.WriteString(cephfixture.TCP6Header)
	for i, s := range v4 {
		b4.WriteString(tcpLine(i, s))
	}
	for i, s := range v6 {
		b6.WriteString(tcpLine(i, s))
	}
	f.write(filepath.Join(f.proc, "thread-self", "net", "tcp"), b4.String())
	f.write(filepath.Join(f.proc, "thread-self", "net", "tcp6"), b6.String())
}

func tcpLine(sl int, s tcpSocket) string {
	return cephfixture.TCPLine(sl, s.Local, s.Remote, s.State, int(s.UID), s.Inode)
}

// target is the fixture's pinned netns (no NetnsPath: the socket signal
// needs a real netns, see selfTarget).
func (f *fixture) target(ips ...netip.Addr) Target {
	f.tb.Helper()
	var st unix.Stat_t
	require.NoError(f.tb, unix.Stat(f.pinned, &st))
	return Target{Dev: uint64(st.Dev), Ino: st.Ino, IPs: ips, PodUID: holderUID}
}

// selfTarget targets the test's own netns, so the socket signal enters a
// real netns (harmlessly: it is the current one) and reads the fixture's
// <proc>/thread-self/net files. Fixture processes in the pinned netns must
// then link to selfNetns.
func (f *fixture) selfTarget(ips ...netip.Addr) Target {
	f.tb.Helper()
	var st unix.Stat_t
	require.NoError(f.tb, unix.Stat(selfNetns, &st))
	return Target{NetnsPath: selfNetns, Dev: uint64(st.Dev), Ino: st.Ino, IPs: ips, PodUID: holderUID}
}

const selfNetns = "/proc/self/ns/net"

const holderUID = "6f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"

func (f *fixture) options(p Policy) Options {
	return Options{Sysfs: f.sysfs, Debugfs: f.debugfs, Proc: f.proc, Unattributed: p}
}

package inuse

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

func check(t *testing.T, tg Target, o Options) []Reference {
	t.Helper()
	refs, err := Check(tg, o)
	require.NoError(t, err)
	return refs
}

func strs(refs []Reference) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.String())
	}
	return out
}

func TestCheckNothing(t *testing.T) {
	f := newFixture(t)
	assert.Empty(t, check(t, f.target(ourIP4), f.options(PolicyBlock)))
	// No rbd module, no debugfs: still nothing, and no error.
	f.noDebugfs()
	assert.Empty(t, check(t, f.target(ourIP4), f.options(PolicyBlock)))
}

func TestCheckRBDIPv4(t *testing.T) {
	f := newFixture(t)
	f.rbd(0, rbdDev{ClientAddr: "192.168.20.5:0/3527561932", ClientID: "client4161", FSID: fsidA, Pool: "replicapool", Name: "csi-vol-1"})
	// Another netns's device: same cluster, other address, other client.
	f.rbd(1, rbdDev{ClientAddr: "192.168.20.6:0/1111", ClientID: "client4200", FSID: fsidA, Pool: "replicapool", Name: "csi-vol-2"})
	f.debugfsClient(fsidA, 4161, "")
	f.debugfsClient(fsidA, 4200, "")

	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 1)
	assert.Equal(t, Reference{
		Kind: kindRBD, Device: "rbd0", Pool: "replicapool", Image: "csi-vol-1",
		ClusterFSID: fsidA, ClientID: "client4161", ClientAddr: "192.168.20.5:0/3527561932", Addr: ourIP4,
	}, refs[0])
	assert.Equal(t, "rbd0 replicapool/csi-vol-1 client4161 192.168.20.5", refs[0].String())

	// The other device is the other netns's reference, and neither is
	// unattributed.
	refs = check(t, f.target(otherIP4), f.options(PolicyBlock))
	assert.Equal(t, []string{"rbd1 replicapool/csi-vol-2 client4200 192.168.20.6"}, strs(refs))
	assert.Empty(t, check(t, f.target(netip.MustParseAddr("10.9.9.9")), f.options(PolicyBlock)))
}

func TestCheckRBDIPv6(t *testing.T) {
	f := newFixture(t)
	f.rbd(3, rbdDev{ClientAddr: "[fd00::17]:0/3527561932", ClientID: "client4161", FSID: fsidA, Pool: "replicapool", PoolNS: "tenant-a", Name: "csi-vol-1", Snap: "snap-1"})
	f.rbd(4, rbdDev{ClientAddr: "[fd00::18]:0/3527561932", ClientID: "client4162", FSID: fsidA, Pool: "replicapool", Name: "csi-vol-2"})
	refs := check(t, f.target(ourIP4, ourIP6), f.options(PolicyBlock))
	assert.Equal(t, []string{"rbd3 replicapool/tenant-a/csi-vol-1@snap-1 client4161 fd00::17"}, strs(refs))
	assert.Equal(t, ourIP6, refs[0].Addr)
	// An IPv4-mapped recorded address still matches an IPv4 client.
	f.rbd(5, rbdDev{ClientAddr: "192.168.20.5:0/1", ClientID: "client4163", FSID: fsidA, Pool: "p", Name: "i"})
	refs = check(t, f.target(netip.MustParseAddr("::ffff:192.168.20.5")), f.options(PolicyBlock))
	assert.Equal(t, []string{"rbd5 p/i client4163 192.168.20.5"}, strs(refs))
}

func TestCheckRBDSharedClient(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		f.rbd(i, rbdDev{ClientAddr: "192.168.20.5:0/3527561932", ClientID: "client4161", FSID: fsidA, Pool: "replicapool", Name: "csi-vol-" + string(rune('a'+i))})
	}
	// The one libceph client of the three devices has one debugfs
	// directory without status: it belongs to them, it is not unattributed.
	f.debugfsClient(fsidA, 4161, "")
	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	assert.Equal(t, []string{
		"rbd0 replicapool/csi-vol-a client4161 192.168.20.5",
		"rbd1 replicapool/csi-vol-b client4161 192.168.20.5",
		"rbd2 replicapool/csi-vol-c client4161 192.168.20.5",
	}, strs(refs))
}

func TestCheckRBDOrderIsNumeric(t *testing.T) {
	f := newFixture(t)
	for _, i := range []int{10, 2, 1, 33, 0} {
		f.rbd(i, rbdDev{ClientAddr: "192.168.20.5:0/1", ClientID: "client1", FSID: fsidA, Pool: "p", Name: "i"})
	}
	var devs []string
	for _, r := range check(t, f.target(ourIP4), f.options(PolicyBlock)) {
		devs = append(devs, r.Device)
	}
	assert.Equal(t, []string{"rbd0", "rbd1", "rbd2", "rbd10", "rbd33"}, devs)
}

func TestCheckRBDOlderKernelAttributes(t *testing.T) {
	f := newFixture(t)
	// Before 4.19 there is no pool_ns; an image mapped at head may lack
	// current_snap on very old kernels; no trailing newline.
	f.rbd(0, rbdDev{ClientAddr: "192.168.20.5:0/1", ClientID: "client4161", FSID: fsidA, Pool: "rbd", Name: "img", Omit: []string{"pool_ns", "current_snap"}, NoNewline: true})
	// Before 4.9 there is no client_addr: the device cannot be attributed.
	f.rbd(1, rbdDev{ClientID: "client4170", FSID: fsidB, Pool: "rbd", Name: "old", Omit: []string{"client_addr"}})
	// Its client's debugfs directory is that device's, not one more
	// unattributed client.
	f.debugfsClient(fsidB, 4170, "")

	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 2)
	assert.Equal(t, Reference{Kind: kindRBD, Device: "rbd0", Pool: "rbd", Image: "img", ClusterFSID: fsidA, ClientID: "client4161", ClientAddr: "192.168.20.5:0/1", Addr: ourIP4}, refs[0])
	assert.Equal(t, kindCephClient, refs[1].Kind)
	assert.Equal(t, "rbd1", refs[1].Device)
	assert.Equal(t, "unattributed rbd device rbd1 rbd/old client4170: rbd device without client_addr (Linux before 4.9)", refs[1].String())
	// Unattributed means every pin's reference.
	assert.Equal(t, []string{refs[1].String()}, strs(check(t, f.target(otherIP4), f.options(PolicyBlock))))

	refs = check(t, f.target(ourIP4), f.options(policyIgnore))
	assert.Equal(t, []string{"rbd0 rbd/img client4161 192.168.20.5"}, strs(refs))
}

func TestCheckRBDBadClientAddr(t *testing.T) {
	f := newFixture(t)
	f.rbd(0, rbdDev{ClientAddr: "(einval)/0", ClientID: "client1", FSID: fsidA, Pool: "p", Name: "i"})
	f.rbd(1, rbdDev{ClientAddr: "0.0.0.0:0/0", ClientID: "client2", FSID: fsidA, Pool: "p", Name: "j"})
	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 2)
	for _, r := range refs {
		assert.Equal(t, kindCephClient, r.Kind)
		assert.NotEmpty(t, r.Reason)
	}
	assert.Empty(t, check(t, f.target(ourIP4), f.options(policyIgnore)))
}

func TestCheckCephFS(t *testing.T) {
	f := newFixture(t)
	f.debugfsClient(fsidA, 4170, cephfsStatus(4170, "192.168.20.5:0"))
	f.debugfsClient(fsidA, 4171, cephfsStatus(4171, "[fd00::17]:0"))
	f.debugfsClient(fsidA, 4172, cephfsStatus(4172, "192.168.20.6:0")) // other netns
	f.debugfsClient(fsidB, 99, "instance: client.99 (3)192.168.20.5:0/7\nblocklisted: true\nsomething_new: 42\n")

	refs := check(t, f.target(ourIP4, ourIP6), f.options(PolicyBlock))
	assert.Equal(t, []string{
		"cephfs " + fsidB + ".client99 192.168.20.5 (blocklisted)",
		"cephfs " + fsidA + ".client4170 192.168.20.5",
		"cephfs " + fsidA + ".client4171 fd00::17",
	}, strs(refs))
	assert.Equal(t, Reference{Kind: kindCephFS, ClusterFSID: fsidA, ClientID: "client4170", ClientAddr: "192.168.20.5:0/3527561932", Addr: ourIP4}, refs[1])

	assert.Equal(t, []string{"cephfs " + fsidA + ".client4172 192.168.20.6"}, strs(check(t, f.target(otherIP4), f.options(policyIgnore))))
}

func TestCheckUnattributedDebugfsClient(t *testing.T) {
	f := newFixture(t)
	// A client without status that no rbd device claims: a CephFS mount
	// on a kernel before 5.11, or an rbd client between map and unmap.
	f.debugfsClient(fsidA, 5000, "")
	// A status the parser does not understand.
	f.debugfsClient(fsidA, 5001, "instance: garbage\n")
	// Not a client directory: ignored.
	require.NoError(t, os.MkdirAll(filepath.Join(f.debugfs, "ceph", "README"), 0o755))

	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 2)
	assert.Equal(t, kindCephClient, refs[0].Kind)
	assert.Equal(t, "client5000", refs[0].ClientID)
	assert.Equal(t, fsidA, refs[0].ClusterFSID)
	assert.Contains(t, refs[0].String(), "unattributed ceph client "+fsidA+".client5000: ")
	assert.Equal(t, "client5001", refs[1].ClientID)
	assert.Contains(t, refs[1].Reason, "unreadable debugfs status")
	// Every pin sees them under "block", none under "ignore".
	assert.Len(t, check(t, f.target(otherIP4), f.options(PolicyBlock)), 2)
	assert.Len(t, check(t, f.target(), f.options("")), 2) // "" is block
	assert.Empty(t, check(t, f.target(ourIP4), f.options(policyIgnore)))
}

func TestCheckRBDOfOtherNetnsClaimsItsClient(t *testing.T) {
	f := newFixture(t)
	f.rbd(7, rbdDev{ClientAddr: "192.168.20.6:0/1", ClientID: "client4300", FSID: fsidA, Pool: "p", Name: "i"})
	f.debugfsClient(fsidA, 4300, "")
	// Same gid in another cluster is another client.
	f.debugfsClient(fsidB, 4300, "")
	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	assert.Equal(t, []string{"unattributed ceph client " + fsidB + ".client4300: debugfs client without status and without rbd device (CephFS before Linux 5.11, or rbd client between map and unmap)"}, strs(refs))
}

const (
	mountOld = "301 22 0:61 / /var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/abc/globalmount rw,relatime shared:120 - ceph 10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/csi-vol-1/uuid rw,name=csi-cephfs-node,secret=<hidden>,fsid=" + fsidA + ",acl,mds_namespace=myfs"
	// kubelet's bind mount of the same superblock into a pod: one client.
	mountOldBind = "302 22 0:61 /volumes/csi/csi-vol-1/uuid /var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pvc-1/mount rw,relatime shared:120 - ceph 10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/csi-vol-1/uuid rw,name=csi-cephfs-node,secret=<hidden>,acl"
	mountNew     = "303 22 0:62 / /mnt/with\\040space rw,relatime shared:121 - ceph admin@" + fsidB + ".myfs=/volumes/x rw,name=admin,secret=<hidden>,ms_mode=prefer-crc,mon_addr=[fd00::1]:3300/[fd00::2]:3300"
)

func TestCheckMountinfoWithoutDebugfs(t *testing.T) {
	f := newFixture(t)
	f.noDebugfs()
	f.mountinfo(mountOld, mountOldBind, mountNew)
	// krbd is still attributed through sysfs.
	f.rbd(0, rbdDev{ClientAddr: "192.168.20.5:0/1", ClientID: "client1", FSID: fsidA, Pool: "p", Name: "i"})

	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 3)
	assert.Equal(t, "rbd0 p/i client1 192.168.20.5", refs[0].String())
	assert.Equal(t, Reference{
		Kind: kindCephClient, Source: "admin@" + fsidB + ".myfs=/volumes/x", Mountpoint: "/mnt/with space",
		ClusterFSID: fsidB, Monitors: []string{"[fd00::1]:3300", "[fd00::2]:3300"},
		Reason: "CephFS kernel mount, no debugfs to tell its netns",
	}, refs[1])
	assert.Equal(t, Reference{
		Kind: kindCephClient, Source: "10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/csi-vol-1/uuid",
		Mountpoint:  "/var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/abc/globalmount",
		ClusterFSID: fsidA, Monitors: []string{"10.0.0.1:6789", "10.0.0.2:6789"},
		Reason: "CephFS kernel mount, no debugfs to tell its netns",
	}, refs[2])
	assert.Equal(t, "unattributed ceph mount admin@"+fsidB+".myfs=/volumes/x on /mnt/with space: CephFS kernel mount, no debugfs to tell its netns", refs[1].String())

	assert.Equal(t, []string{"rbd0 p/i client1 192.168.20.5"}, strs(check(t, f.target(ourIP4), f.options(policyIgnore))))
}

func TestCheckMountinfoIgnoredWithDebugfs(t *testing.T) {
	f := newFixture(t)
	// With debugfs every kernel client has a directory there; mountinfo
	// adds nothing.
	f.mountinfo(mountOld)
	f.debugfsClient(fsidA, 4170, cephfsStatus(4170, "192.168.20.6:0"))
	assert.Empty(t, check(t, f.target(ourIP4), f.options(PolicyBlock)))
}

func TestCheckMountinfoUnreadable(t *testing.T) {
	f := newFixture(t)
	f.noDebugfs()
	// A mountinfo that cannot be read (here: a directory, EISDIR) fails
	// the check: a mount namespace that was not read may hold a mount.
	require.NoError(t, os.Remove(filepath.Join(f.proc, "1", "mountinfo")))
	require.NoError(t, os.Mkdir(filepath.Join(f.proc, "1", "mountinfo"), 0o755))
	_, err := Check(f.target(ourIP4), f.options(PolicyBlock))
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(f.proc, "1", "mountinfo"))
	// Nothing to learn from it under "ignore".
	assert.Empty(t, check(t, f.target(ourIP4), f.options(policyIgnore)))
}

// Without the ceph file system type no CephFS kernel mount can exist, and
// no mountinfo is read: an unreadable one (a directory) does not fail the
// check. With the type, or when /proc/filesystems cannot be read, every
// mountinfo is read as before.
func TestCheckMountinfoOnlyWithCephFSRegistered(t *testing.T) {
	f := newFixture(t)
	f.noDebugfs()
	mi := filepath.Join(f.proc, "1", "mountinfo")
	require.NoError(t, os.Remove(mi))
	require.NoError(t, os.Mkdir(mi, 0o755))
	f.noCephFS()
	assert.Empty(t, check(t, f.target(ourIP4), f.options(PolicyBlock)), "no ceph type: mountinfo not read")

	for name, fs := range map[string]func(){
		"ceph registered":              func() { f.write(filepath.Join(f.proc, "filesystems"), cephfixture.Filesystems(true)) },
		"/proc/filesystems unreadable": func() { require.NoError(t, os.Remove(filepath.Join(f.proc, "filesystems"))) },
	} {
		fs()
		_, err := Check(f.target(ourIP4), f.options(PolicyBlock))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), mi, name)
	}

	// A ceph mount in mountinfo is found once the type is registered.
	require.NoError(t, os.Remove(mi))
	f.mountinfo(mountOld)
	f.noCephFS()
	assert.Empty(t, check(t, f.target(ourIP4), f.options(PolicyBlock)))
	f.write(filepath.Join(f.proc, "filesystems"), cephfixture.Filesystems(true))
	require.Len(t, check(t, f.target(ourIP4), f.options(PolicyBlock)), 1)
}

// Hole: without debugfs only PID 1's mountinfo was searched, so a CephFS
// mount made in a container's mount namespace (ceph-csi's node plugin)
// was missed. Every distinct mount namespace is read, once.
func TestCheckMountinfoOfEveryMountNamespace(t *testing.T) {
	f := newFixture(t)
	f.noDebugfs()
	mntA, mntB := filepath.Join(f.root, "mnt-a"), filepath.Join(f.root, "mnt-b")
	f.write(mntA, "")
	f.write(mntB, "")
	for pid, mnt := range map[string]string{"1": mntA, "200": mntB, "201": mntB} {
		require.NoError(t, os.MkdirAll(filepath.Join(f.proc, pid, "ns"), 0o755))
		require.NoError(t, os.Symlink(mnt, filepath.Join(f.proc, pid, "ns", "mnt")))
	}
	// 200 and 201 share a mount namespace: one mountinfo of the two is
	// read (they differ here only to show which).
	f.write(filepath.Join(f.proc, "200", "mountinfo"), baseMountinfo+mountNew+"\n")
	f.write(filepath.Join(f.proc, "201", "mountinfo"), baseMountinfo+mountOld+"\n")
	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 1, "one mount namespace read once: %v", strs(refs))
	assert.Equal(t, kindCephClient, refs[0].Kind)
	assert.Contains(t, []string{"admin@" + fsidB + ".myfs=/volumes/x", "10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/csi-vol-1/uuid"}, refs[0].Source)

	// PID 1's mount namespace adds its own ceph mount.
	f.mountinfo("304 22 0:63 / /mnt/third rw,relatime shared:122 - ceph 10.0.0.9:6789:/third rw,name=admin")
	refs = check(t, f.target(ourIP4), f.options(PolicyBlock))
	assert.Len(t, refs, 2, "%v", strs(refs))
}

// Hole: a process whose ns/net cannot be read (EACCES/EPERM under an LSM,
// or any error but its disappearance) was skipped, so a client the kernel
// hides counted as "not in use". It counts, unless /proc/<pid>/net tells
// its netns (the way PID 1 of an outer container is placed, on this kind of
// machine).
func TestCheckProcessWhoseNetnsCannotBeRead(t *testing.T) {
	f := newFixture(t)
	f.process(300, proc{Comm: "hidden"})
	// ELOOP when followed: an error that is not "gone".
	f.symlink("net", filepath.Join(f.proc, "300", "ns", "net"))
	// Its net/dev is of a netns that is neither the target's nor ours.
	f.write(filepath.Join(f.proc, "300", "net", "dev"), "")
	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, refs, 1)
	assert.Equal(t, kindProcess, refs[0].Kind)
	assert.Equal(t, 300, refs[0].PID)
	assert.Contains(t, refs[0].String(), "process 300 (hidden, cannot tell its network namespace: stat ")
	assert.ErrorContains(t, errors.New(refs[0].Reason), "too many levels of symbolic links")

	// Gone while looked at: not a reference.
	require.NoError(t, os.RemoveAll(filepath.Join(f.proc, "300")))
	assert.Empty(t, check(t, f.target(ourIP4), f.options(PolicyBlock)))
}

func TestCheckProcesses(t *testing.T) {
	f := newFixture(t)
	f.process(1, proc{Comm: "init"}) // no ns/net: unreadable or gone
	f.process(100, proc{Comm: "ceph-fuse", Netns: f.pinned})
	f.process(101, proc{Comm: "rbd-nbd", Netns: f.pinned, Cgroup: "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1111_2222.slice/cri-containerd-abc.scope\n"})
	f.process(102, proc{Comm: "sshd", Netns: f.other})
	// The holder pod's own processes, both cgroup drivers.
	f.process(200, proc{Comm: "pause", Netns: f.pinned, Cgroup: "12:pids:/kubepods/besteffort/pod" + holderUID + "/0123abcd\n0::/\n"})
	f.process(201, proc{Comm: "sleep", Netns: f.pinned, Cgroup: "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1c2d3e_4b5a_4c6d_9e8f_0a1b2c3d4e5f.slice/cri-containerd-0123.scope\n"})

	refs := check(t, f.target(ourIP4), f.options(PolicyBlock))
	assert.Equal(t, []Reference{
		{Kind: kindProcess, PID: 100, Comm: "ceph-fuse", InNetns: true},
		{Kind: kindProcess, PID: 101, Comm: "rbd-nbd", InNetns: true},
	}, refs)
	assert.Equal(t, "process 100 (ceph-fuse)", refs[0].String())

	// Without a pod UID nothing is excluded.
	tg := f.target(ourIP4)
	tg.PodUID = ""
	assert.Len(t, check(t, tg, f.options(PolicyBlock)), 4)
	// Without a netns identity, no process is in it.
	tg.Dev, tg.Ino = 0, 0
	assert.Empty(t, check(t, tg, f.options(PolicyBlock)))
}

func TestCheckSockets(t *testing.T) {
	f := newFixture(t)
	ap := netip.MustParseAddrPort
	f.tcp([]tcpSocket{
		// Kernel client to a monitor: nobody holds inode 1001.
		{Local: ap("192.168.20.5:41234"), Remote: ap("10.0.0.1:6789"), State: tcpEstablished, Inode: 1001},
		// Held by a process outside the netns (it setns'd, connected, left).
		{Local: ap("192.168.20.5:41236"), Remote: ap("10.0.0.3:6801"), State: tcpEstablished, Inode: 1002},
		{Local: ap("192.168.20.5:41238"), Remote: ap("10.0.0.3:6802"), State: tcpEstablished, Inode: 1003},
		// Held by a process inside the netns.
		{Local: ap("192.168.20.5:41240"), Remote: ap("10.0.0.1:3300"), State: tcpEstablished, Inode: 1004},
		// Held by the holder pod: not a kernel socket, not a reference.
		{Local: ap("192.168.20.5:41242"), Remote: ap("10.0.0.1:3300"), State: tcpEstablished, Inode: 1005},
		// Not candidates: a listener on a Ceph port, a TIME_WAIT (inode 0),
		// a connection to a non-Ceph port, an incoming connection to 6789.
		{Local: ap("0.0.0.0:6789"), Remote: ap("0.0.0.0:0"), State: tcpListen, Inode: 2001},
		{Local: ap("192.168.20.5:41250"), Remote: ap("10.0.0.1:6789"), State: 0x06, Inode: 0},
		{Local: ap("192.168.20.5:41252"), Remote: ap("10.0.0.9:443"), State: tcpEstablished, Inode: 2002},
		{Local: ap("192.168.20.5:6789"), Remote: ap("10.0.0.7:50000"), State: tcpEstablished, Inode: 2003},
	}, []tcpSocket{
		{Local: ap("[fd00::17]:50000"), Remote: ap("[fd00::1]:3300"), State: 0x02 /* SYN_SENT */, Inode: 1101},
		{Local: ap("[::ffff:192.168.20.5]:50002"), Remote: ap("[::ffff:10.0.0.2]:7300"), State: tcpEstablished, Inode: 1102},
		{Local: ap("[::]:3300"), Remote: ap("[::]:0"), State: tcpListen, Inode: 2101},
	})
	tg := f.selfTarget(ourIP4)
	f.process(300, proc{Comm: "rbd", Netns: f.other, FDs: map[int]string{3: "socket:[1003]", 4: "socket:[1002]", 5: "socket:[1002]", 6: "socket:[99999]"}})
	f.process(301, proc{Comm: "ceph-fuse", Netns: selfNetns, FDs: map[int]string{7: "socket:[1004]", 8: "anon_inode:[eventfd]"}})
	f.process(302, proc{Comm: "pause", Netns: selfNetns, Cgroup: "1:pids:/kubepods/pod" + holderUID + "/x\n", FDs: map[int]string{3: "socket:[1005]"}})

	refs := check(t, tg, f.options(PolicyBlock))
	assert.Equal(t, []string{
		"process 300 (rbd, outside the netns, 2 Ceph connections, e.g. 192.168.20.5:41236 -> 10.0.0.3:6801)",
		"process 301 (ceph-fuse, Ceph connection 192.168.20.5:41240 -> 10.0.0.1:3300)",
		"kernel socket 192.168.20.5:41234 -> 10.0.0.1:6789",
		"kernel socket [::ffff:192.168.20.5]:50002 -> [::ffff:10.0.0.2]:7300",
		"kernel socket [fd00::17]:50000 -> [fd00::1]:3300",
	}, strs(refs))
	assert.Equal(t, Reference{Kind: kindSocket, Local: ap("192.168.20.5:41234"), Remote: ap("10.0.0.1:6789"), Inode: 1001}, refs[2])
	assert.Equal(t, 2, refs[0].Sockets)
	assert.False(t, refs[0].InNetns)
	assert.True(t, refs[1].InNetns)

	// Other Ceph ports: only 6789 counts now; process 301 is still in
	// the netns.
	o := f.options(PolicyBlock)
	o.CephPorts = mustParsePorts("6789")
	assert.Equal(t, []string{"process 301 (ceph-fuse)", "kernel socket 192.168.20.5:41234 -> 10.0.0.1:6789"}, strs(check(t, tg, o)))

	// No tcp6 (IPv6 disabled) is fine.
	require.NoError(t, os.Remove(filepath.Join(f.proc, "thread-self", "net", "tcp6")))
	assert.Len(t, check(t, tg, f.options(PolicyBlock)), 3)

	// A malformed table is an error, not a silent "nothing".
	f.write(filepath.Join(f.proc, "thread-self", "net", "tcp"), cephfixture.TCPHeader+"   0: garbage\n")
	_, err := Check(tg, f.options(PolicyBlock))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tcp line")
}

func TestCheckNetnsIdentityMismatch(t *testing.T) {
	f := newFixture(t)
	tg := f.selfTarget(ourIP4)
	tg.Ino++
	_, err := Check(tg, f.options(PolicyBlock))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not the pinned netns")

	tg.NetnsPath = f.pinned // a regular file, not an nsfs file
	_, err = Check(tg, f.options(PolicyBlock))
	require.Error(t, err)
	assert.Contains(t, err.Error(), f.pinned)
}

func TestCheckBadPolicy(t *testing.T) {
	f := newFixture(t)
	_, err := Check(f.target(), f.options("maybe"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"maybe"`)
}

func TestCheckDeterministic(t *testing.T) {
	f := newFixture(t)
	for i := range 20 {
		f.rbd(i, rbdDev{ClientAddr: "192.168.20.5:0/1", ClientID: "client1", FSID: fsidA, Pool: "p", Name: "i"})
		f.debugfsClient(fsidA, 100+i, cephfsStatus(100+i, "192.168.20.5:0"))
		f.debugfsClient(fsidB, 900+i, "")
		f.process(1000+i, proc{Comm: "x", Netns: f.pinned})
	}
	first := check(t, f.target(ourIP4), f.options(PolicyBlock))
	require.Len(t, first, 80)
	for range 5 {
		assert.Equal(t, first, check(t, f.target(ourIP4), f.options(PolicyBlock)))
	}
	var kinds []Kind
	for _, r := range first {
		if len(kinds) == 0 || kinds[len(kinds)-1] != r.Kind {
			kinds = append(kinds, r.Kind)
		}
	}
	assert.Equal(t, []Kind{kindRBD, kindCephFS, kindCephClient, kindProcess}, kinds)
}

// TestDefaultOptions: the options a zero Options stands for.
func TestDefaultOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, "/sys", o.Sysfs)
	assert.Equal(t, "/sys/kernel/debug", o.Debugfs)
	assert.Equal(t, "/proc", o.Proc)
	assert.Equal(t, DefaultCephPorts, o.CephPorts.String())
	assert.Equal(t, PolicyBlock, o.Unattributed)
	assert.Equal(t, defaultTimeout, o.Timeout)
}

// TestCheckTimeout: a kernel call that never returns must not hang the
// caller. A FIFO without writer blocks open(2) like a stuck kernel call.
func TestCheckTimeout(t *testing.T) {
	f := newFixture(t)
	f.rbd(0, rbdDev{ClientAddr: "192.168.20.5:0/1", ClientID: "client1", FSID: fsidA, Pool: "p", Name: "i"})
	fifo := filepath.Join(f.sysfs, "devices", "rbd", "0", "client_addr")
	require.NoError(t, os.Remove(fifo))
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	t.Cleanup(func() {
		// Unblock the abandoned reader: opening the write side
		// completes its open, closing it gives it EOF.
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	})

	o := f.options(PolicyBlock)
	o.Timeout = 100 * time.Millisecond
	_, err := Check(f.target(ourIP4), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not finish within 100ms")
	assert.Contains(t, err.Error(), "blocked in read attributes of "+filepath.Join(f.sysfs, "bus", "rbd", "devices", "0"))
}

// A debugfs that is there but cannot be read (permissions, an LSM) is no
// proof of "no CephFS client" under unattributed: ignore, where debugfs is
// the only way to tell whose a CephFS client is: the check fails (in use),
// naming the folder. Under block the mounts in mountinfo stand in for it,
// each a reference of every pin. The check runs as a process without
// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so that mode 000 denies it.
func TestCheckDebugfsDenied(t *testing.T) {
	requireRoot(t)
	f := newFixture(t)
	f.debugfsClient(fsidA, 4172, "instance: client.4172 (3)"+ourIP4.String()+":0/3527561932\nblocklisted: false\n")
	ceph := filepath.Join(f.debugfs, "ceph")
	run := func() (string, error) {
		cmd := exec.Command("setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search",
			os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=check", "INUSE_TEST_ROOT="+f.root, "INUSE_TEST_IP="+ourIP4.String())
		out, err := cmd.Output()
		return string(out), err
	}
	out, err := run()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "client4172", "readable: the client is seen")

	require.NoError(t, os.Chmod(ceph, 0))
	t.Cleanup(func() { _ = os.Chmod(ceph, 0o755) })
	out, err = run()
	require.Error(t, err, "denied under ignore is no answer: %s", out)
	assert.Contains(t, out, ceph)
	assert.Contains(t, out, "permission denied")
}

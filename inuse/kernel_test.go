package inuse

// The files real kernels printed (Debian's 6.1 and 6.12, captured by the
// kernel suite test/kernel from a guest with a mapped krbd device and CephFS
// kernel mounts, kept in testdata/kernel/<kernel>; never config_info, which
// holds the cephx secret) through the same parsers the check uses, and the
// fixture writers of package cephfixture against them: a fixture whose
// shape drifts from what any of the kernels printed fails here.

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

const kernelDir = "testdata/kernel"

// eachKernel runs test once per kernel whose files are kept, as a subtest
// named after it, with its folder.
func eachKernel(t *testing.T, test func(t *testing.T, dir string)) {
	ents, err := os.ReadDir(kernelDir)
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
			t.Run(e.Name(), func(t *testing.T) { test(t, filepath.Join(kernelDir, e.Name())) })
		}
	}
	require.NotZero(t, n, "no kernel's files in %s", kernelDir)
}

func kernelFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err, "captured kernel file (refresh with NETNS_PIN_KERNEL_CAPTURE_UPDATE=1 go test ./test/kernel/)")
	return string(b)
}

func TestKernelFilesParse(t *testing.T) { eachKernel(t, testKernelFilesParse) }

func testKernelFilesParse(t *testing.T, dir string) {
	t.Logf("kernel %s", strings.TrimSpace(kernelFile(t, dir, "kernel_release")))

	// rbd sysfs
	addr, err := parseClientAddr(kernelFile(t, dir, "rbd/client_addr"))
	require.NoError(t, err)
	require.True(t, addr.AddrPort.Addr().Is4(), "client_addr %v", addr)
	assert.Equal(t, strings.TrimSpace(kernelFile(t, dir, "rbd/client_addr")), addr.String(), "entityAddr prints what the kernel printed")
	fsid := strings.TrimSpace(kernelFile(t, dir, "rbd/cluster_fsid"))
	clientID := strings.TrimSpace(kernelFile(t, dir, "rbd/client_id"))
	assert.Equal(t, "-", strings.TrimSpace(kernelFile(t, dir, "rbd/current_snap")), "the image head")

	// debugfs: the rbd client's folder (no status) and the CephFS client's
	rbdDir := strings.Split(kernelFile(t, dir, "debugfs_rbd_client"), "\n")
	f, c, ok := parseClientDirName(rbdDir[0])
	require.True(t, ok, "debugfs folder %q", rbdDir[0])
	assert.Equal(t, fsid, f)
	assert.Equal(t, clientID, c, "the debugfs folder of the rbd device's client")
	assert.NotContains(t, rbdDir[1:], "status", "an rbd client has no status file")

	st, err := parseStatus(kernelFile(t, dir, "debugfs_status"))
	require.NoError(t, err)
	assert.False(t, st.Blocklisted)
	f, c, ok = parseClientDirName(strings.TrimSpace(kernelFile(t, dir, "debugfs_cephfs_client")))
	require.True(t, ok)
	assert.Equal(t, fsid, f)
	assert.Equal(t, c, st.ClientID(), "status names the client of its folder")

	// mountinfo, both syntaxes
	monIP := ""
	for name, wantSource := range map[string]string{"mountinfo_old_syntax": "", "mountinfo_new_syntax": "@" + fsid + "."} {
		line := kernelFile(t, dir, name)
		refs := cephMountRefs(line)
		require.Len(t, refs, 1, line)
		assert.Empty(t, strings.TrimPrefix(refs[0].Reason, "CephFS kernel mount, no debugfs to tell its netns"), "parsed in full: %+v", refs[0])
		assert.Contains(t, refs[0].Source, wantSource)
		require.Len(t, refs[0].Monitors, 1, "%s: monitors %v", name, refs[0].Monitors)
		if monIP == "" {
			monIP = refs[0].Monitors[0]
		}
		assert.Equal(t, monIP, refs[0].Monitors[0], "both syntaxes name the same monitor")
		assert.True(t, strings.HasSuffix(monIP, ":3300"), "msgr2 monitor %q", monIP)
	}

	// /proc/filesystems with the ceph module loaded: mountinfo is read
	// (without debugfs); without the ceph line it is not
	filesystems := kernelFile(t, dir, "proc_filesystems")
	assert.True(t, hasCephFS([]byte(filesystems)), filesystems)
	assert.False(t, hasCephFS([]byte(strings.Replace(filesystems, "nodev\tceph\n", "", 1))), "without its ceph line")
	assert.False(t, hasCephFS([]byte("nodev\tfuse\nnodev\tfuse.ceph-fuse\n")), "ceph-fuse mounts are fuse's")

	// /proc/net/tcp of the client's netns: the kernel sockets of the rbd
	// client, from its address to the monitor and the OSD, ESTABLISHED
	lines := strings.Split(strings.TrimRight(kernelFile(t, dir, "proc_net_tcp"), "\n"), "\n")
	require.Greater(t, len(lines), 1)
	_, err = parseTCPLine(lines[0])
	assert.Error(t, err, "the header is not a socket")
	var remotes []uint16
	for _, l := range lines[1:] {
		s, err := parseTCPLine(l)
		require.NoError(t, err, l)
		assert.Equal(t, addr.AddrPort.Addr(), s.Local.Addr(), "a socket of the client's netns: %q", l)
		assert.EqualValues(t, tcpEstablished, s.State, l)
		assert.NotZero(t, s.Inode, l)
		remotes = append(remotes, s.Remote.Port())
	}
	assert.Contains(t, remotes, uint16(3300), "a socket to the monitor")
	// early after boot %pK prints "(____ptrval____)" for the socket's
	// address (seen in the guest): the line still parses
	f16 := strings.Fields(lines[1])
	f16[11] = "(____ptrval____)"
	early, err := parseTCPLine(strings.Join(f16, " "))
	require.NoError(t, err, "a line with (____ptrval____)")
	first, _ := parseTCPLine(lines[1])
	assert.Equal(t, first, early)
	assert.True(t, slices.ContainsFunc(remotes, func(p uint16) bool { return p >= 6800 && p <= 7300 }), "a socket to an OSD: %v", remotes)

	// an IPv6 storage network (a cluster with ms_bind_ipv6): client_addr
	// "[addr]:0/nonce" and the sockets of /proc/net/tcp6
	addr6, err := parseClientAddr(kernelFile(t, dir, "ipv6/rbd_client_addr"))
	require.NoError(t, err)
	require.True(t, addr6.AddrPort.Addr().Is6(), "client_addr %v", addr6)
	assert.Equal(t, strings.TrimSpace(kernelFile(t, dir, "ipv6/rbd_client_addr")), addr6.String())
	lines = strings.Split(strings.TrimRight(kernelFile(t, dir, "ipv6/proc_net_tcp6"), "\n"), "\n")
	require.Greater(t, len(lines), 1)
	remotes = nil
	for _, l := range lines[1:] {
		s, err := parseTCPLine(l)
		require.NoError(t, err, l)
		assert.Equal(t, addr6.AddrPort.Addr(), s.Local.Addr(), "a socket of the client's netns: %q", l)
		assert.EqualValues(t, tcpEstablished, s.State, l)
		remotes = append(remotes, s.Remote.Port())
	}
	assert.Contains(t, remotes, uint16(3300), "a socket to the monitor")
}

// TestFixturesMatchKernel: what cephfixture writes has the shape of what
// each kernel printed, file by file.
func TestFixturesMatchKernel(t *testing.T) { eachKernel(t, testFixturesMatchKernel) }

func testFixturesMatchKernel(t *testing.T, dir string) {
	shape := func(name, s string) string { return cephfixture.FileShape(name, s) }
	tmp := t.TempDir()
	sysfs, debugfs := filepath.Join(tmp, "sys"), filepath.Join(tmp, "debug")

	// rbd: the same attributes (all but config_info and the write-only
	// refresh), each of the same shape
	require.NoError(t, cephfixture.RBD(sysfs, 0, cephfixture.RBDDev{ClientAddr: "192.168.20.5:0/3527561932", ClientID: "client4161",
		FSID: fsidA, Pool: "replicapool", Name: "csi-vol-00000000"}))
	kernelAttrs, err := os.ReadDir(filepath.Join(dir, "rbd"))
	require.NoError(t, err)
	var names []string
	for _, e := range kernelAttrs {
		names = append(names, e.Name())
		b, err := os.ReadFile(filepath.Join(sysfs, "bus", "rbd", "devices", "0", e.Name()))
		if !assert.NoError(t, err, "the fixture lacks rbd attribute %s", e.Name()) {
			continue
		}
		got, want := string(b), kernelFile(t, dir, "rbd/"+e.Name())
		if e.Name() == "name" || e.Name() == "pool" {
			// names chosen by the user: only the line ending must match
			assert.Equal(t, strings.HasSuffix(want, "\n"), strings.HasSuffix(got, "\n"), "rbd attribute %s: fixture %q, kernel %q", e.Name(), got, want)
			continue
		}
		assert.Equal(t, shape(e.Name(), want), shape(e.Name(), got), "rbd attribute %s: fixture %q, kernel %q", e.Name(), got, want)
	}
	fixtureAttrs, err := os.ReadDir(filepath.Join(sysfs, "devices", "rbd", "0"))
	require.NoError(t, err)
	for _, e := range fixtureAttrs {
		if e.Type().IsRegular() {
			assert.Contains(t, names, e.Name(), "the fixture writes rbd attribute %s, which the kernel does not print", e.Name())
		}
	}

	// debugfs: the rbd client's folder holds the same files
	require.NoError(t, cephfixture.DebugfsClient(debugfs, fsidA, 4161, ""))
	kernelRBDDir := strings.Split(strings.TrimRight(kernelFile(t, dir, "debugfs_rbd_client"), "\n"), "\n")
	ents, err := os.ReadDir(filepath.Join(debugfs, "ceph", fsidA+".client4161"))
	require.NoError(t, err)
	var fixtureFiles []string
	for _, e := range ents {
		fixtureFiles = append(fixtureFiles, e.Name())
	}
	assert.Equal(t, kernelRBDDir[1:], fixtureFiles, "files of an rbd client's debugfs folder")
	assert.Equal(t, shape("", kernelRBDDir[0]), shape("", fsidA+".client4161"), "debugfs folder name")
	assert.Equal(t, shape("", kernelFile(t, dir, "debugfs_cephfs_client")), shape("", fsidB+".client50000\n"), "debugfs folder name")

	// status
	assert.Equal(t, shape("status", kernelFile(t, dir, "debugfs_status")), shape("status", cephfixture.CephFSStatus(50000, "192.168.20.5:0")))

	// mountinfo lines, both syntaxes, as the fixtures write them
	for name, line := range map[string]string{
		"mountinfo_old_syntax": cephfixture.CephMountinfo(301, 61, "/var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/abc/globalmount",
			"10.0.0.1:3300:/", "rw,name=csi-cephfs-node,secret=<hidden>,ms_mode=prefer-crc,acl"),
		"mountinfo_new_syntax": cephfixture.CephMountinfo(303, 62, "/mnt/x", "admin@"+fsidB+".myfs=/",
			"rw,name=admin,secret=<hidden>,ms_mode=prefer-crc,acl,mon_addr=10.0.0.1:3300"),
	} {
		assert.Equal(t, shape(name, kernelFile(t, dir, name)), shape(name, line+"\n"), "%s: fixture %q, kernel %q", name, line, kernelFile(t, dir, name))
	}

	// /proc/filesystems: every line the fixture writes, the kernel printed
	kernelFS := strings.Split(kernelFile(t, dir, "proc_filesystems"), "\n")
	for _, ceph := range []bool{false, true} {
		for _, l := range strings.Split(strings.TrimSuffix(cephfixture.Filesystems(ceph), "\n"), "\n") {
			assert.Contains(t, kernelFS, l, "/proc/filesystems line %q", l)
		}
	}

	// /proc/net/tcp: header and lines, byte for byte in width
	kernelTCP := strings.Split(strings.TrimRight(kernelFile(t, dir, "proc_net_tcp"), "\n"), "\n")
	fixtureTCP := cephfixture.TCPHeader + cephfixture.TCPLine(0, netip.MustParseAddrPort("192.168.20.5:41234"),
		netip.MustParseAddrPort("10.0.0.1:3300"), tcpEstablished, 0, 12345)
	lines := strings.Split(strings.TrimRight(fixtureTCP, "\n"), "\n")
	assert.Equal(t, kernelTCP[0], lines[0], "header")
	assert.Equal(t, shape("tcp", kernelTCP[1]), shape("tcp", lines[1]), "socket line")
	assert.Len(t, lines[1], len(kernelTCP[1]), "IPv4 lines are padded to the kernel's width")

	kernelTCP6 := strings.Split(strings.TrimRight(kernelFile(t, dir, "ipv6/proc_net_tcp6"), "\n"), "\n")
	fixtureTCP6 := cephfixture.TCP6Header + cephfixture.TCPLine(0, netip.MustParseAddrPort("[fd00::17]:41234"),
		netip.MustParseAddrPort("[fd00::1]:3300"), tcpEstablished, 0, 12345)
	lines = strings.Split(strings.TrimRight(fixtureTCP6, "\n"), "\n")
	assert.Equal(t, kernelTCP6[0], lines[0], "tcp6 header")
	assert.Equal(t, shape("tcp6", kernelTCP6[1]), shape("tcp6", lines[1]), "tcp6 socket line")

	// client_addr of an IPv6 client
	require.NoError(t, cephfixture.RBD(sysfs, 1, cephfixture.RBDDev{ClientAddr: "[fd00::17]:0/3527561932", ClientID: "client4161",
		FSID: fsidA, Pool: "replicapool", Name: "csi-vol-00000001"}))
	b, err := os.ReadFile(filepath.Join(sysfs, "bus", "rbd", "devices", "1", "client_addr"))
	require.NoError(t, err)
	assert.Equal(t, shape("", kernelFile(t, dir, "ipv6/rbd_client_addr")), shape("", string(b)))
}

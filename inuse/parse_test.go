package inuse

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "3300,6789,6800-7300", want: "3300,6789,6800-7300"},
		{in: " 6789 , 3300 ", want: "3300,6789"},
		{in: "6800-7300,7000-7400,7401", want: "6800-7401"},
		{in: "1-65535", want: "1-65535"},
		{in: "10-10", want: "10"},
		{in: "5,4,3", want: "3-5"},
		{in: "", err: "empty"},
		{in: "  ", err: "empty"},
		{in: "3300,,6789", err: "entry 2 is empty"},
		{in: "3300,abc", err: `"abc" is not a port number`},
		{in: "0", err: "port 0"},
		{in: "65536", err: `"65536" is not a port number`},
		{in: "7300-6800", err: `entry "7300-6800": range starts after it ends`},
		{in: "6800-", err: `entry "6800-": missing port number`},
		{in: "-6800", err: `entry "-6800": missing port number`},
		{in: "1-2-3", err: `"2-3" is not a port number`},
		{in: "+5", err: `"+5" is not a port number`},
		{in: "0x10", err: `"0x10" is not a port number`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParsePorts(tc.in)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.Contains(t, err.Error(), tc.in, "the error names the input")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, p.String())
		})
	}
}

func TestPortsContains(t *testing.T) {
	p := mustParsePorts(DefaultCephPorts)
	for port, want := range map[uint16]bool{
		0: false, 1: false, 3299: false, 3300: true, 3301: false, 6789: true,
		6799: false, 6800: true, 7000: true, 7300: true, 7301: false, 65535: false,
	} {
		assert.Equal(t, want, p.Contains(port), "port %d", port)
	}
	assert.False(t, Ports{}.Contains(6789))
	assert.True(t, Ports{}.isEmpty())
	assert.True(t, mustParsePorts("1-65535").Contains(65535))
	assert.Panics(t, func() { mustParsePorts("x") })
}

func TestPortsString(t *testing.T) {
	p, err := ParsePorts("6789, 3300")
	require.NoError(t, err)
	assert.Equal(t, "3300,6789", p.String())
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": PolicyBlock, "block": PolicyBlock, "ignore": policyIgnore} {
		p, err := ParsePolicy(in)
		require.NoError(t, err)
		assert.Equal(t, want, p)
	}
	for _, in := range []string{"Block", "allow", " block"} {
		_, err := ParsePolicy(in)
		assert.ErrorContains(t, err, in)
	}
}

func TestParseClientAddr(t *testing.T) {
	for _, tc := range []struct {
		in    string
		addr  string
		nonce uint32
		err   string
	}{
		{in: "10.244.1.17:0/3527561932", addr: "10.244.1.17:0", nonce: 3527561932},
		{in: "10.244.1.17:0/3527561932\n", addr: "10.244.1.17:0", nonce: 3527561932},
		{in: "[fd00::17]:0/3527561932\n", addr: "[fd00::17]:0", nonce: 3527561932},
		{in: "[::ffff:10.0.0.1]:0/1", addr: "[::ffff:10.0.0.1]:0", nonce: 1},
		{in: "192.168.1.1:6789/0", addr: "192.168.1.1:6789", nonce: 0},
		{in: "", err: "no /nonce"},
		{in: "10.244.1.17:0", err: "no /nonce"},
		{in: "(einval)/0", err: "(einval)"},
		{in: "(invalid address)/5", err: "invalid address"},
		{in: "10.244.1.17/5", err: "10.244.1.17"},
		{in: "fd00::17:0/5", err: "fd00::17:0"},
		{in: "10.244.1.17:0/4294967296", err: "not a 32-bit number"},
		{in: "10.244.1.17:0/-1", err: "not a 32-bit number"},
		{in: "10.244.1.17:0/", err: "not a 32-bit number"},
		{in: "10.244.1.17:99999/1", err: "10.244.1.17:99999"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			ca, err := parseClientAddr(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddrPort(tc.addr), ca.AddrPort)
			assert.Equal(t, tc.nonce, ca.Nonce)
			assert.Equal(t, strings.TrimSpace(tc.in), ca.String())
		})
	}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want clientStatus
		err  string
	}{
		{
			name: "ipv4",
			in:   "instance: client.4161 (3)10.244.1.17:0/3527561932\nblocklisted: false\n",
			want: clientStatus{EntityType: "client", GID: 4161, AddrType: 3, Addr: entityAddr{netip.MustParseAddrPort("10.244.1.17:0"), 3527561932}},
		},
		{
			name: "ipv6 blocklisted extra lines",
			in:   "instance: client.18446744073709551615 (3)[fd00::17]:0/1\nblocklisted: true\nmds_sessions: 2\n\n",
			want: clientStatus{EntityType: "client", GID: 18446744073709551615, AddrType: 3, Addr: entityAddr{netip.MustParseAddrPort("[fd00::17]:0"), 1}, Blocklisted: true},
		},
		{
			name: "old name, no trailing newline",
			in:   "instance: client.7 (2)10.0.0.5:0/9\nblacklisted: true",
			want: clientStatus{EntityType: "client", GID: 7, AddrType: 2, Addr: entityAddr{netip.MustParseAddrPort("10.0.0.5:0"), 9}, Blocklisted: true},
		},
		{
			name: "instance only",
			in:   "instance: client.7 (3)10.0.0.5:0/9",
			want: clientStatus{EntityType: "client", GID: 7, AddrType: 3, Addr: entityAddr{netip.MustParseAddrPort("10.0.0.5:0"), 9}},
		},
		{name: "empty", in: "", err: "no instance line"},
		{name: "no instance", in: "blocklisted: false\n", err: "no instance line"},
		{name: "two instances", in: "instance: client.7 (3)10.0.0.5:0/9\ninstance: client.8 (3)10.0.0.5:0/9\n", err: "second instance"},
		{name: "no address", in: "instance: client.7\n", err: "want"},
		{name: "no type", in: "instance: client.7 10.0.0.5:0/9\n", err: "(<type>) prefix"},
		{name: "unterminated type", in: "instance: client.7 (310.0.0.5:0/9\n", err: "unterminated"},
		{name: "type not a number", in: "instance: client.7 (x)10.0.0.5:0/9\n", err: "type is not a number"},
		{name: "bad id", in: "instance: client.x (3)10.0.0.5:0/9\n", err: "id is not a number"},
		{name: "no dot", in: "instance: client7 (3)10.0.0.5:0/9\n", err: "<type>.<id>"},
		{name: "bad addr", in: "instance: client.7 (3)(einval)/0\n", err: "einval"},
		{name: "bad blocklisted", in: "instance: client.7 (3)10.0.0.5:0/9\nblocklisted: maybe\n", err: "maybe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseStatus(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, st)
		})
	}
	st, err := parseStatus(cephfsStatus(4161, "10.0.0.1:0"))
	require.NoError(t, err)
	assert.Equal(t, "client4161", st.ClientID())
}

func TestParseClientDirName(t *testing.T) {
	for in, want := range map[string][2]string{
		fsidA + ".client4161": {fsidA, "client4161"},
		"x.client.client1":    {"x.client", "client1"},
	} {
		fsid, id, ok := parseClientDirName(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, [2]string{fsid, id})
	}
	for _, in := range []string{"", ".client1", fsidA, fsidA + ".client", fsidA + ".clientx", fsidA + ".client1a", "README"} {
		_, _, ok := parseClientDirName(in)
		assert.False(t, ok, in)
	}
}

// cephMountRefs runs the mountinfo part of the check over text.
func cephMountRefs(text string) []Reference {
	c := &checker{}
	c.cephMounts([]byte(text), map[[2]int]bool{})
	return c.unattributed
}

func TestCephMounts(t *testing.T) {
	const reason = "CephFS kernel mount, no debugfs to tell its netns"
	assert.Equal(t, []Reference{{
		Kind: kindCephClient, Source: "10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/csi-vol-1/uuid",
		Mountpoint:  "/var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/abc/globalmount",
		ClusterFSID: fsidA, Monitors: []string{"10.0.0.1:6789", "10.0.0.2:6789"}, Reason: reason,
	}}, cephMountRefs(mountOld))

	refs := cephMountRefs(mountNew + "\n")
	require.Len(t, refs, 1)
	assert.Equal(t, "/mnt/with space", refs[0].Mountpoint)
	assert.Equal(t, "admin@"+fsidB+".myfs=/volumes/x", refs[0].Source)

	// Lines of other types are not read; a bind mount of a superblock
	// already seen (same major:minor) is the same client.
	assert.Empty(t, cephMountRefs(baseMountinfo))
	assert.Len(t, cephMountRefs(mountOld+"\n"+mountOldBind+"\n"), 1)

	// No optional fields; several optional fields; escapes; incomplete
	// escapes are kept.
	for in, mountpoint := range map[string]string{
		`40 22 0:70 /a\134b /m\011n rw - ceph 10.0.0.1:6789:/ rw`:                         "/m\tn",
		`41 22 0:71 / /m rw shared:1 master:2 propagate_from:3 - ceph 10.0.0.1:6789:/ rw`: "/m",
		`43 22 0:72 / /m\04 rw - ceph s o`:                                                `/m\04`,
	} {
		refs := cephMountRefs(in)
		require.Len(t, refs, 1, in)
		assert.Equal(t, mountpoint, refs[0].Mountpoint, in)
		assert.Equal(t, reason, refs[0].Reason, in)
	}

	// A ceph line that does not parse is still a ceph mount: reported
	// with the parse error, and the lines after it are still read.
	for _, in := range []string{
		"1 2 03 / /m rw - ceph s o",                 // device
		"1 2 0:3 / - ceph s o",                      // separator too early
		"42 22 0:72 / /m rw - ceph 10.0.0.1:6789:/", // no super options
	} {
		refs := cephMountRefs(in + "\n" + mountOld)
		require.Len(t, refs, 2, in)
		assert.Equal(t, Reference{Kind: kindCephClient, Source: in, Reason: refs[0].Reason}, refs[0], in)
		assert.True(t, strings.HasPrefix(refs[0].Reason, reason+", "), "%q: %s", in, refs[0].Reason)
		assert.Equal(t, "/var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/abc/globalmount", refs[1].Mountpoint, in)
	}
	// Lines that do not name the ceph type are no ceph mounts.
	for _, in := range []string{"", "garbage", "1 2 0:3 / /m rw", "1 2 0:3 / /m rw -", "1 2 0:3 / /m rw - ceph", "1 2 0:3 / /m rw - ext4 s o"} {
		assert.Empty(t, cephMountRefs(in), "%q", in)
	}
	// Fields the kernel never prints wrong still leave a ceph mount counted.
	for _, in := range []string{
		"x 2 0:3 / /m rw - ceph s o",           // mount id
		"1 x 0:3 / /m rw - ceph s o",           // parent id
		"1 2 0:x / /m rw - ceph s o",           // minor
		"1 2 99999999999:3 / /m rw - ceph s o", // major overflow
	} {
		refs := cephMountRefs(in)
		require.Len(t, refs, 1, in)
		assert.Equal(t, kindCephClient, refs[0].Kind, in)
	}
}

func TestParseCephSource(t *testing.T) {
	for _, tc := range []struct {
		name, src, opts string
		want            cephSource
		err             string
	}{
		{
			name: "old syntax",
			src:  "10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/x", opts: "rw,name=csi,secret=<hidden>,fsid=" + fsidA,
			want: cephSource{Monitors: []string{"10.0.0.1:6789", "10.0.0.2:6789"}, User: "csi", FSID: fsidA, Path: "/volumes/csi/x"},
		},
		{
			name: "old syntax ipv6 root",
			src:  "[fd00::1]:3300,[fd00::2]:3300:/", opts: "rw",
			want: cephSource{Monitors: []string{"[fd00::1]:3300", "[fd00::2]:3300"}, Path: "/"},
		},
		{
			name: "old syntax hostname",
			src:  "mon.example.org:/", opts: "",
			want: cephSource{Monitors: []string{"mon.example.org"}, Path: "/"},
		},
		{
			name: "new syntax",
			src:  "admin@" + fsidB + ".myfs=/volumes/x", opts: "rw,name=admin,secret=<hidden>,mon_addr=10.0.0.1:3300/10.0.0.2:3300",
			want: cephSource{Monitors: []string{"10.0.0.1:3300", "10.0.0.2:3300"}, User: "admin", FSID: fsidB, FSName: "myfs", Path: "/volumes/x"},
		},
		{
			name: "new syntax fs name with dots, no fsid, no mon_addr",
			src:  "u@.my.fs=/", opts: "rw",
			want: cephSource{User: "u", FSName: "my.fs", Path: "/"},
		},
		{
			name: "new syntax unknown fsid",
			src:  "u@?.a=/", opts: "mon_addr=[fd00::1]:3300",
			want: cephSource{User: "u", FSName: "a", Path: "/", Monitors: []string{"[fd00::1]:3300"}},
		},
		{name: "empty", src: "", err: "want"},
		{name: "no path", src: "10.0.0.1:6789", err: "want"},
		{name: "no monitors", src: ":/x", err: "want"},
		{name: "empty monitor", src: "10.0.0.1:6789,:/x", err: "empty monitor"},
		{name: "new no path", src: "u@f.a", err: "want <user>@<fsid>.<fs>=/<path>"},
		{name: "new relative path", src: "u@f.a=x", err: "want <user>@<fsid>.<fs>=/<path>"},
		{name: "new no fs", src: "u@f=/", err: "want <fsid>.<fs>"},
		{name: "new empty mon", src: "u@f.a=/", opts: "mon_addr=1.2.3.4//5.6.7.8", err: "empty monitor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := parseCephSource(tc.src, tc.opts)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, cs)
		})
	}
}

func TestParseTCPLine(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     tcpSocket
		err      string
	}{
		{
			name: "ipv4 established",
			in:   "   3: 0514A8C0:A0D2 0100000A:1A85 01 00000000:00000000 02:000A7B1C 00000000     0        0 123456 2 ffff8880 20 4 30 10 -1",
			want: tcpSocket{Local: netip.MustParseAddrPort("192.168.20.5:41170"), Remote: netip.MustParseAddrPort("10.0.0.1:6789"), State: tcpEstablished, Inode: 123456},
		},
		{
			name: "ipv4 listen",
			in:   "   0: 0100007F:1A85 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 42 1 0000000000000000 100 0 0 10 0\n",
			want: tcpSocket{Local: netip.MustParseAddrPort("127.0.0.1:6789"), Remote: netip.MustParseAddrPort("0.0.0.0:0"), State: tcpListen, UID: 1000, Inode: 42},
		},
		{
			name: "ipv6",
			// Host byte order: these lines are what a little-endian
			// machine (amd64, arm64) prints.
			// fd00::17 -> words fd000000 00000000 00000000 00000017 printed little-endian.
			in:   "   0: 000000FD000000000000000017000000:C350 000000FD000000000000000001000000:0CE4 02 00000000:00000000 00:00000000 00000000     0        0 7 1 0000000000000000 20 4 30 10 -1",
			want: tcpSocket{Local: netip.MustParseAddrPort("[fd00::17]:50000"), Remote: netip.MustParseAddrPort("[fd00::1]:3300"), State: 2, Inode: 7},
		},
		{
			name: "ipv4-mapped ipv6, time wait inode 0",
			in:   "  12: 0000000000000000FFFF00000514A8C0:C352 0000000000000000FFFF00000200000A:1C84 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000",
			want: tcpSocket{Local: netip.MustParseAddrPort("[::ffff:192.168.20.5]:50002"), Remote: netip.MustParseAddrPort("[::ffff:10.0.0.2]:7300"), State: 6},
		},
		{name: "empty", in: "", err: "want"},
		{name: "header", in: cephfixture.TCPHeader, err: ""},
		{name: "short", in: "0: 0100007F:1A85 00000000:0000 0A", err: "want"},
		{name: "no colon sl", in: "0 0100007F:1A85 00000000:0000 0A 0:0 0:0 0 0 0 1", err: "want"},
		{name: "bad local", in: "0: 0100007G:1A85 00000000:0000 0A 0:0 0:0 0 0 0 1", err: "local address"},
		{name: "short addr", in: "0: 0100007:1A85 00000000:0000 0A 0:0 0:0 0 0 0 1", err: "7 hex digits"},
		{name: "no port", in: "0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 1", err: "local address"},
		{name: "short port", in: "0: 0100007F:1A8 00000000:0000 0A 0:0 0:0 0 0 0 1", err: "local address"},
		{name: "bad port", in: "0: 0100007F:1A8Z 00000000:0000 0A 0:0 0:0 0 0 0 1", err: "port is not hex"},
		{name: "bad remote", in: "0: 0100007F:1A85 x:0000 0A 0:0 0:0 0 0 0 1", err: "remote address"},
		{name: "mixed families", in: "0: 0100007F:1A85 000000FD000000000000000001000000:0000 0A 0:0 0:0 0 0 0 1", err: "families differ"},
		{name: "bad state", in: "0: 0100007F:1A85 00000000:0000 1FF 0:0 0:0 0 0 0 1", err: "state"},
		{name: "bad uid", in: "0: 0100007F:1A85 00000000:0000 0A 0:0 0:0 0 x 0 1", err: "uid"},
		{name: "bad inode", in: "0: 0100007F:1A85 00000000:0000 0A 0:0 0:0 0 0 0 -1", err: "inode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseTCPLine(tc.in)
			if tc.name == "header" {
				assert.Error(t, err, "the header is not a socket")
				return
			}
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, s)
		})
	}
}

// TestParseTCPLineRoundTrip checks the parser against the fixture's writer,
// which formats addresses the way the kernel does on this machine.
func TestParseTCPLineRoundTrip(t *testing.T) {
	for _, s := range []tcpSocket{
		{Local: netip.MustParseAddrPort("10.1.2.3:1"), Remote: netip.MustParseAddrPort("10.3.2.1:65535"), State: 1, UID: 65534, Inode: 1<<40 + 3},
		{Local: netip.MustParseAddrPort("[2001:db8::1:2:3]:443"), Remote: netip.MustParseAddrPort("[fe80::1]:6800"), State: 8, Inode: 1},
	} {
		got, err := parseTCPLine(tcpLine(0, s))
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
}

func TestLinkInode(t *testing.T) {
	for in, want := range map[string]uint64{"socket:[1]": 1, "socket:[18446744073709551615]": 18446744073709551615} {
		ino, ok := linkInode(in, "socket")
		assert.True(t, ok, in)
		assert.Equal(t, want, ino)
	}
	for _, in := range []string{"", "socket:[]", "socket:[", "socket:[12", "pipe:[12]", "socket:[1x]", "/dev/null", "socket:[99999999999999999999]", "anon_inode:[eventfd]"} {
		_, ok := linkInode(in, "socket")
		assert.False(t, ok, in)
	}
}

func TestReferenceString(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		r    Reference
		want string
	}{
		{Reference{Kind: kindRBD, Device: "rbd0", Pool: "replicapool", Image: "csi-vol-1", ClientID: "client4161", Addr: netip.MustParseAddr("192.168.20.5")}, "rbd0 replicapool/csi-vol-1 client4161 192.168.20.5"},
		{Reference{Kind: kindProcess, PID: 1234, Comm: "ceph-fuse", InNetns: true}, "process 1234 (ceph-fuse)"},
		{Reference{Kind: kindSocket, Local: ap("10.0.0.5:41234"), Remote: ap("10.0.0.1:6789")}, "kernel socket 10.0.0.5:41234 -> 10.0.0.1:6789"},
		{Reference{Kind: kindCephClient, ClientID: "client9", Reason: "why"}, "unattributed ceph client client9: why"},
		{Reference{Kind: kindCephFS, ClientID: "client9"}, "cephfs client9"},
		{Reference{Kind: "future"}, "future"},
	} {
		assert.Equal(t, tc.want, tc.r.String())
	}
}

// The fuzz targets run their seeds as unit tests; `go test -fuzz` explores.

func FuzzParseClientAddr(f *testing.F) {
	for _, s := range []string{"10.244.1.17:0/3527561932", "[fd00::17]:0/1\n", "(einval)/0", "", "/", "[:0/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ca, err := parseClientAddr(s)
		if err == nil {
			again, err := parseClientAddr(ca.String())
			require.NoError(t, err)
			require.Equal(t, ca, again)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	for _, s := range []string{cephfsStatus(1, "10.0.0.1:0"), cephfsStatus(1, "[fd00::1]:0"), "instance: client.1 (3", "instance:", "blocklisted: true"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseStatus(s)
		if err == nil {
			require.True(t, st.Addr.AddrPort.IsValid())
		}
	})
}

// FuzzCephMounts: whatever a mountinfo text holds, every line naming the
// ceph type is at most one reference, and one that does not parse is
// exactly one.
func FuzzCephMounts(f *testing.F) {
	for _, s := range []string{mountOld, mountOldBind, mountNew, baseMountinfo, "1 2 0:3 / /m rw - ceph \\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines := 0
		for line := range bytes.Lines([]byte(s)) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			if !containsCephFSType(line) {
				continue
			}
			lines++
			refs := cephMountRefs(string(line))
			require.LessOrEqual(t, len(refs), 1)
			if _, err := mountinfo.GetMountsFromReader(bytes.NewReader(line), nil); err != nil {
				require.Len(t, refs, 1)
				require.Equal(t, string(line), refs[0].Source)
			}
		}
		refs := cephMountRefs(s)
		require.LessOrEqual(t, len(refs), lines)
		for _, r := range refs {
			require.Equal(t, kindCephClient, r.Kind)
		}
	})
}

func FuzzParseCephSource(f *testing.F) {
	f.Add("10.0.0.1:6789,10.0.0.2:6789:/path", "rw,name=x")
	f.Add("u@fsid.fs=/p", "mon_addr=1.2.3.4:3300/5.6.7.8:3300")
	f.Add("@.=", ",,=")
	f.Fuzz(func(t *testing.T, src, opts string) {
		cs, err := parseCephSource(src, opts)
		if err == nil {
			require.True(t, strings.HasPrefix(cs.Path, "/"))
		}
	})
}

func FuzzParseTCPLine(f *testing.F) {
	f.Add("   3: 0514A8C0:A0D2 0100000A:1A85 01 00000000:00000000 02:000A7B1C 00000000     0        0 123456 2 ffff8880 20 4 30 10 -1")
	f.Add("   0: 000000FD000000000000000017000000:C350 000000FD000000000000000001000000:0CE4 02 00000000:00000000 00:00000000 00000000     0        0 7 1")
	f.Add(cephfixture.TCPHeader)
	f.Fuzz(func(t *testing.T, s string) {
		sock, err := parseTCPLine(s)
		if err == nil {
			require.True(t, sock.Local.IsValid())
			require.True(t, sock.Remote.IsValid())
		}
	})
}

func FuzzParsePorts(f *testing.F) {
	for _, s := range []string{DefaultCephPorts, "1-65535", "5,4,3", "", "-", ",", "65535-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePorts(s)
		if err == nil {
			again, err := ParsePorts(p.String())
			require.NoError(t, err)
			require.Equal(t, p, again)
		}
	})
}

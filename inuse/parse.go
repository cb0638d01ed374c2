package inuse

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The parsers in this file are pure functions of the text the kernel prints;
// they never panic and return an error naming the bad part, so they can be
// fuzzed and so one odd file never takes the whole check down with it.

// entityAddr is a Ceph entity address as libceph prints it: the IP and port
// the client is known by, and the nonce that tells client instances apart.
type entityAddr struct {
	AddrPort netip.AddrPort
	Nonce    uint32
}

// String prints the address the way the kernel does ("%pISpc/%u").
func (c entityAddr) String() string {
	return c.AddrPort.String() + "/" + strconv.FormatUint(uint64(c.Nonce), 10)
}

// parseClientAddr parses the rbd sysfs attribute client_addr, printed by
// drivers/block/rbd.c with "%pISpc/%u": "10.244.1.17:0/3527561932" or
// "[fd00::17]:0/3527561932". Trailing blanks and newlines are ignored. An
// address the kernel could not print (a blank address prints as "(einval)"
// on current kernels) is an error: such a client cannot be attributed.
func parseClientAddr(s string) (entityAddr, error) {
	s = strings.TrimRight(s, " \t\r\n")
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return entityAddr{}, fmt.Errorf("client address %q: no /nonce", s)
	}
	ap, err := netip.ParseAddrPort(s[:i])
	if err != nil {
		return entityAddr{}, fmt.Errorf("client address %q: %w", s, err)
	}
	nonce, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return entityAddr{}, fmt.Errorf("client address %q: nonce %q is not a 32-bit number", s, s[i+1:])
	}
	return entityAddr{AddrPort: ap, Nonce: uint32(nonce)}, nil
}

// clientStatus is the content of a CephFS client's debugfs "status" file
// (fs/ceph/debugfs.c status_show, Linux >= 5.11):
//
//	instance: client.4161 (3)10.244.1.17:0/3527561932
//	blocklisted: false
//
// The "(3)" is the entity address type (3 = "any", i.e. msgr1 and msgr2).
type clientStatus struct {
	EntityType  string // "client"
	GID         uint64 // global id, 4161
	AddrType    uint32
	Addr        entityAddr
	Blocklisted bool
}

// ClientID returns the client in the form the rbd client_id attribute and
// the debugfs directory name use: "client4161".
func (s clientStatus) ClientID() string {
	return s.EntityType + strconv.FormatUint(s.GID, 10)
}

// parseStatus parses a debugfs ceph client "status" file. The instance line is
// required; "blocklisted" is optional (and accepted under its pre-5.11
// spelling "blacklisted", should a backport print that); unknown lines are
// ignored so later kernels can add fields.
func parseStatus(s string) (clientStatus, error) {
	var st clientStatus
	seenInstance := false
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, " \t\r\n")
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "instance":
			if seenInstance {
				return clientStatus{}, fmt.Errorf("status: second instance line %q", line)
			}
			seenInstance = true
			var err error
			if st, err = parseInstance(val); err != nil {
				return clientStatus{}, fmt.Errorf("status: instance %q: %w", val, err)
			}
		case "blocklisted", "blacklisted":
			switch val {
			case "true":
				st.Blocklisted = true
			case "false":
				st.Blocklisted = false
			default:
				return clientStatus{}, fmt.Errorf("status: %s %q is not true or false", key, val)
			}
		}
	}
	if !seenInstance {
		return clientStatus{}, errors.New("status: no instance line")
	}
	return st, nil
}

// parseInstance parses "client.4161 (3)10.244.1.17:0/3527561932".
func parseInstance(v string) (clientStatus, error) {
	name, addr, ok := strings.Cut(v, " ")
	if !ok {
		return clientStatus{}, errors.New("want \"<type>.<id> (<addrtype>)<addr>\"")
	}
	typ, id, ok := strings.Cut(name, ".")
	if !ok || typ == "" {
		return clientStatus{}, fmt.Errorf("entity name %q: want <type>.<id>", name)
	}
	gid, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return clientStatus{}, fmt.Errorf("entity name %q: id is not a number", name)
	}
	addr = strings.TrimSpace(addr)
	if !strings.HasPrefix(addr, "(") {
		return clientStatus{}, fmt.Errorf("address %q: want (<type>) prefix", addr)
	}
	end := strings.IndexByte(addr, ')')
	if end < 0 {
		return clientStatus{}, fmt.Errorf("address %q: unterminated (<type>)", addr)
	}
	at, err := strconv.ParseUint(addr[1:end], 10, 32)
	if err != nil {
		return clientStatus{}, fmt.Errorf("address %q: type is not a number", addr)
	}
	ca, err := parseClientAddr(addr[end+1:])
	if err != nil {
		return clientStatus{}, err
	}
	return clientStatus{EntityType: typ, GID: gid, AddrType: uint32(at), Addr: ca}, nil
}

// parseClientDirName splits a debugfs ceph client directory name,
// "<fsid>.client<gid>" (net/ceph/debugfs.c ceph_debugfs_client_init), into the
// cluster fsid and the client id "client<gid>" as the rbd client_id attribute
// prints it.
func parseClientDirName(name string) (fsid, clientID string, ok bool) {
	i := strings.LastIndex(name, ".client")
	if i <= 0 {
		return "", "", false
	}
	if gid := name[i+len(".client"):]; gid == "" || strings.Trim(gid, "0123456789") != "" {
		return "", "", false
	}
	return name[:i], name[i+1:], true
}

// cephSource is what a CephFS kernel mount says about its cluster.
type cephSource struct {
	Monitors []string // "10.0.0.1:6789", "[fd00::1]:3300"
	User     string   // cephx user without "client.", when known
	FSID     string   // when known
	FSName   string   // when known (new syntax)
	Path     string   // path inside the file system
}

// parseCephSource parses the source and super options of a "ceph" mountinfo
// entry. Two syntaxes exist:
//
//	10.0.0.1:6789,10.0.0.2:6789:/path      (monitors in the source)
//	admin@b3a1c3a4-....myfs=/path          (Linux >= 5.17; monitors in mon_addr=a/b)
//
// In the new syntax the monitors come from the "mon_addr=" super option,
// separated by '/'.
func parseCephSource(source, superOptions string) (cephSource, error) {
	var cs cephSource
	var monAddr string
	for opt := range strings.SplitSeq(superOptions, ",") {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "mon_addr":
			monAddr = v
		case "name":
			cs.User = v
		case "fsid":
			cs.FSID = v
		}
	}
	if at := strings.IndexByte(source, '@'); at >= 0 && !strings.Contains(source[:at], ":/") {
		spec, path, ok := strings.Cut(source[at+1:], "=")
		if !ok || !strings.HasPrefix(path, "/") {
			return cephSource{}, fmt.Errorf("ceph source %q: want <user>@<fsid>.<fs>=/<path>", source)
		}
		fsid, fsname, ok := strings.Cut(spec, ".")
		if !ok || fsname == "" {
			return cephSource{}, fmt.Errorf("ceph source %q: want <fsid>.<fs> after @", source)
		}
		cs.User = cmp.Or(source[:at], cs.User)
		if fsid != "" && fsid != "?" {
			cs.FSID = fsid
		}
		cs.FSName, cs.Path = fsname, path
		if monAddr != "" {
			if cs.Monitors = strings.Split(monAddr, "/"); slices.Contains(cs.Monitors, "") {
				return cephSource{}, fmt.Errorf("ceph mount option mon_addr=%q: empty monitor address", monAddr)
			}
		}
		return cs, nil
	}
	i := strings.Index(source, ":/")
	if i <= 0 {
		return cephSource{}, fmt.Errorf("ceph source %q: want <mon>[,<mon>...]:/<path> or <user>@<fsid>.<fs>=/<path>", source)
	}
	if cs.Monitors = strings.Split(source[:i], ","); slices.Contains(cs.Monitors, "") {
		return cephSource{}, fmt.Errorf("ceph source %q: empty monitor address", source)
	}
	cs.Path = source[i+1:]
	return cs, nil
}

// TCP socket states as /proc/net/tcp prints them (include/net/tcp_states.h).
const (
	tcpEstablished uint8 = 0x01
	tcpListen      uint8 = 0x0A
)

// tcpSocket is one line of /proc/net/tcp or /proc/net/tcp6.
type tcpSocket struct {
	Local, Remote netip.AddrPort
	State         uint8
	UID           uint32
	// Inode is the sockfs inode, 0 for sockets without a struct socket
	// (TIME_WAIT and request minisockets, orphaned sockets after close).
	Inode uint64
}

// parseTCPLine parses one entry of /proc/net/tcp or tcp6 (not the header):
//
//	0: 0100007F:1A85 0100007F:A3C2 01 00000000:00000000 00:00000000 00000000 0 0 12345 ...
//
// Addresses are printed by net/ipv4/tcp_ipv4.c and net/ipv6/tcp_ipv6.c as the
// 32-bit words of the network-order address formatted with %08X in host byte
// order: one word for IPv4, four for IPv6; ports are plain %04X.
func parseTCPLine(line string) (tcpSocket, error) {
	var f [10]string
	n := 0
	for w := range strings.FieldsFuncSeq(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }) {
		if n == len(f) {
			break
		}
		f[n], n = w, n+1
	}
	if n < len(f) || !strings.HasSuffix(f[0], ":") {
		return tcpSocket{}, fmt.Errorf("tcp line %q: want \"<sl>: <local> <remote> <st> ... <inode>\"", line)
	}
	var s tcpSocket
	var err error
	if s.Local, err = parseHexAddrPort(f[1]); err != nil {
		return tcpSocket{}, fmt.Errorf("tcp line %q: local address: %w", line, err)
	}
	if s.Remote, err = parseHexAddrPort(f[2]); err != nil {
		return tcpSocket{}, fmt.Errorf("tcp line %q: remote address: %w", line, err)
	}
	if s.Local.Addr().Is4() != s.Remote.Addr().Is4() {
		return tcpSocket{}, fmt.Errorf("tcp line %q: local and remote address families differ", line)
	}
	st, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return tcpSocket{}, fmt.Errorf("tcp line %q: state %q is not a hex byte", line, f[3])
	}
	s.State = uint8(st)
	uid, err := strconv.ParseUint(f[7], 10, 32)
	if err != nil {
		return tcpSocket{}, fmt.Errorf("tcp line %q: uid %q is not a number", line, f[7])
	}
	s.UID = uint32(uid)
	if s.Inode, err = strconv.ParseUint(f[9], 10, 64); err != nil {
		return tcpSocket{}, fmt.Errorf("tcp line %q: inode %q is not a number", line, f[9])
	}
	return s, nil
}

func parseHexAddrPort(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || len(p) != 4 {
		return netip.AddrPort{}, fmt.Errorf("%q: want <hex address>:<4 hex digit port>", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: port is not hex", s)
	}
	if len(a) != 8 && len(a) != 32 {
		return netip.AddrPort{}, fmt.Errorf("%q: address has %d hex digits, want 8 or 32", s, len(a))
	}
	var b [16]byte
	for w := range len(a) / 8 {
		v, err := strconv.ParseUint(a[w*8:w*8+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("%q: address is not hex", s)
		}
		binary.NativeEndian.PutUint32(b[w*4:], uint32(v))
	}
	addr := netip.AddrFrom16(b)
	if len(a) == 8 {
		addr = netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

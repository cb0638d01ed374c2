// Package cephfixture lays out the kernel files through which Ceph kernel
// clients show, as the kernel lays them out, under any folder: rbd devices
// in sysfs and libceph clients in debugfs. The in-use check's tests and the
// benchmark runner build their fixture trees with it.
//
//	<sysfs>/devices/rbd/<id>/{client_addr,client_id,cluster_fsid,pool,pool_ns,name,current_snap,...}
//	<sysfs>/bus/rbd/devices/<id> -> ../../../devices/rbd/<id>
//	<debugfs>/ceph/<fsid>.client<gid>/{monc,osdc,client_options[,status]}
package cephfixture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The clusters of Volumes' rbd devices and CephFS clients.
const (
	FSIDA = "b3a1c3a4-7e2d-4e0f-9a4b-1f2e3d4c5b6a"
	FSIDB = "0c9d8e7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f"
)

// Volumes lays out a node with n volumes of each kind, as Ceph CSI maps
// them: n rbd devices of cluster FSIDA sharing krbd's clients (one per
// netns and map options: two, client10000 and client10001), and n CephFS
// mounts of cluster FSIDB, each a client of its own, with status. addr(i)
// is the IP address of volume i's clients. The Go benchmarks of the in-use
// check (BenchmarkCheck, BenchmarkCheckNode) lay out their nodes with it.
func Volumes(sysfs, debugfs string, n int, addr func(i int) string) error {
	err := DebugfsClient(debugfs, FSIDA, 10000, "")
	if n > 1 {
		err = errors.Join(err, DebugfsClient(debugfs, FSIDA, 10001, ""))
	}
	for i := 0; i < n && err == nil; i++ {
		err = errors.Join(
			RBD(sysfs, i, RBDDev{ClientAddr: addr(i) + ":0/3527561932", ClientID: fmt.Sprintf("client%d", 10000+i%2),
				FSID: FSIDA, Pool: "replicapool", Name: fmt.Sprintf("csi-vol-%08d", i)}),
			DebugfsClient(debugfs, FSIDB, 50000+i, CephFSStatus(50000+i, addr(i)+":0")))
	}
	return err
}

// RBDDev is an rbd device's sysfs attributes; attributes listed in Omit are
// not created (older kernels), all others end in "\n" unless NoNewline.
type RBDDev struct {
	ClientAddr, ClientID, FSID string
	Pool, PoolNS, Name, Snap   string // Snap "" is the image head ("-")
	Omit                       []string
	NoNewline                  bool
}

// RBD lays out rbd device id under sysfs.
func RBD(sysfs string, id int, d RBDDev) error {
	dir := filepath.Join(sysfs, "devices", "rbd", strconv.Itoa(id))
	nl := "\n"
	if d.NoNewline {
		nl = ""
	}
	attrs := map[string]string{
		"client_addr": d.ClientAddr, "client_id": d.ClientID, "cluster_fsid": d.FSID,
		"pool": d.Pool, "pool_ns": d.PoolNS, "name": d.Name, "current_snap": d.Snap,
		// Extra attributes the checker does not read.
		"size": "1073741824", "major": "251", "minor": strconv.Itoa(id * 16),
		"features": "0x000000000000003d", "image_id": "1a2b3c4d5e6f", "pool_id": "2",
		"snap_id": "18446744073709551614", "parent": "(no parent image)", "uevent": "DEVTYPE=rbd",
	}
	if d.Snap == "" {
		attrs["current_snap"] = "-"
	}
	for k, v := range attrs {
		if slices.Contains(d.Omit, k) {
			continue
		}
		if err := Write(filepath.Join(dir, k), v+nl); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "power"), 0o755); err != nil {
		return err
	}
	return Symlink(filepath.Join("..", "..", "..", "devices", "rbd", strconv.Itoa(id)),
		filepath.Join(sysfs, "bus", "rbd", "devices", strconv.Itoa(id)))
}

// DebugfsClient lays out <debugfs>/ceph/<fsid>.client<gid>/; status ""
// means no status file (an rbd client, or CephFS before Linux 5.11).
func DebugfsClient(debugfs, fsid string, gid int, status string) error {
	dir := filepath.Join(debugfs, "ceph", fmt.Sprintf("%s.client%d", fsid, gid))
	files := map[string]string{
		"monc":           "have monmap 2 want 3+\nhave osdmap 42\n",
		"monmap":         "epoch 2\n",
		"osdc":           "REQUESTS 0 homeless 0\nLINGER REQUESTS\n",
		"osdmap":         "epoch 42 barrier 0 flags 0x188000\n",
		"client_options": "name=admin,secret=<hidden>\n",
	}
	if status != "" {
		files["status"] = status
	}
	for name, content := range files {
		if err := Write(filepath.Join(dir, name), content); err != nil {
			return err
		}
	}
	return nil
}

// CephFSStatus is fs/ceph/debugfs.c status_show's output for a CephFS client
// whose address is addr ("<ip>:<port>").
func CephFSStatus(gid int, addr string) string {
	return fmt.Sprintf("instance: client.%d (3)%s/3527561932\nblocklisted: false\n", gid, addr)
}

// CephMountinfo is a CephFS kernel mount's line of /proc/<pid>/mountinfo
// (without its newline) as Linux 6.1 prints it: source "<mon>:<port>:/<path>"
// (old syntax) or "<user>@<fsid>.<fs>=/<path>" (new syntax) and the super
// options ceph_show_options prints, e.g.
// "rw,name=<user>,secret=<hidden>,ms_mode=prefer-crc,acl[,mon_addr=<mon>:3300]".
func CephMountinfo(id, minor int, mountpoint, source, superOptions string) string {
	return fmt.Sprintf("%d 22 0:%d / %s rw,relatime shared:%d - ceph %s %s", id, minor, mountpoint, id, source, superOptions)
}

// Filesystems is /proc/filesystems (fs/filesystems.c filesystems_proc_show)
// of a kernel with the ceph module loaded, or without it when ceph is
// false: one registered type per line, "nodev" or nothing, a tab, the name.
func Filesystems(ceph bool) string {
	s := "nodev\tsysfs\nnodev\ttmpfs\nnodev\tproc\nnodev\tcgroup2\nnodev\tdevtmpfs\nnodev\tdebugfs\nnodev\tmqueue\n"
	if ceph {
		s += "nodev\tceph\n"
	}
	return s
}

// TCPHeader is the first line of /proc/net/tcp (net/ipv4/tcp_ipv4.c
// tcp4_seq_show), padded like every line of that file to 149 columns.
var TCPHeader = pad149("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode")

// TCP6Header is the first line of /proc/net/tcp6 (not padded).
const TCP6Header = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// TCPLine formats a socket like net/ipv4/tcp_ipv4.c get_tcp4_sock and
// net/ipv6/tcp_ipv6.c get_tcp6_sock: each 32-bit word of the address in
// host byte order with %08X, the port with %04X; IPv4 lines are padded to
// 149 columns (seq_setwidth(seq, TMPSZ - 1)), IPv6 lines are not.
func TCPLine(sl int, local, remote netip.AddrPort, state uint8, uid int, inode uint64) string {
	l := fmt.Sprintf("%4d: %s %s %02X 00000000:00000000 00:00000000 00000000 %5d        0 %d 1 0000000000000000 20 4 30 10 -1",
		sl, hexAddrPort(local), hexAddrPort(remote), state, uid, inode)
	if local.Addr().Is4() {
		return pad149(l)
	}
	return l + "\n"
}

func pad149(l string) string { return fmt.Sprintf("%-149s\n", l) }

func hexAddrPort(ap netip.AddrPort) string {
	var b strings.Builder
	raw := ap.Addr().AsSlice()
	for w := 0; w+4 <= len(raw); w += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(raw[w:w+4]))
	}
	fmt.Fprintf(&b, ":%04X", ap.Port())
	return b.String()
}

// Write writes a file, making its folder.
func Write(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// Symlink makes a symbolic link, making its folder.
func Symlink(target, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.Symlink(target, path)
}

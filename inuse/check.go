// Package inuse finds what still uses a pinned network namespace: Ceph
// kernel clients (krbd devices, CephFS mounts), processes and kernel-owned
// sockets.
//
// No kernel interface names a Ceph kernel client's netns. libceph takes a
// reference on the netns of the process that maps or mounts
// (net/ceph/messenger.c ceph_messenger_init, get_net(current->nsproxy->net_ns))
// and opens every socket there, so a client is attributed to a pinned netns by
// the address the cluster knows it by: rbd's client_addr and CephFS's debugfs
// status carry the address the first monitor saw, which is one of the pin's
// recorded addresses when the client lives in that netns. Clients whose
// address cannot be read are "unattributed" and, by default, keep every pin.
// Processes are attributed by their /proc/<pid>/ns/net identity, and sockets
// by reading the TCP table from a thread that has entered the netns.
//
// The package reads text files only. It never stats, statfs's or reads
// extended attributes of anything on a Ceph mount: a dead kernel client makes
// those calls hang in uninterruptible sleep, taking the caller with it. That
// is why process file descriptors are readlink'ed, never stat'ed, and mounts
// are only ever seen through mountinfo.
//
// All roots are configurable (Options) so the same code runs against fixture
// trees laid out like the kernel's sysfs, debugfs and procfs.
//
// Limits of attribution by address: a client whose traffic to the monitors
// is source-NATed is known by the NAT address and looks like another
// netns's client; two network namespaces with the same address cannot be
// told apart (both pins see the client). Holder pods on a Multus storage
// network have neither. Only a process's main thread's netns is looked at,
// and a socket that is in flight between processes (SCM_RIGHTS) at the
// moment of the scan is held by nobody and reported as a kernel socket.
package inuse

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Options configures a check. The zero value means the defaults.
type Options struct {
	// Sysfs, Debugfs and Proc are the roots of the file systems read;
	// defaults "/sys", "/sys/kernel/debug", "/proc".
	Sysfs, Debugfs, Proc string
	// CephPorts are the remote ports that make a TCP socket a Ceph client
	// socket; empty means DefaultCephPorts.
	CephPorts Ports
	// Unattributed is the policy for clients whose netns cannot be told;
	// empty means PolicyBlock.
	Unattributed Policy
	// Timeout bounds a check; zero means 10 seconds. A kernel call that
	// never returns must not hang the CNI DEL that runs the check: Check
	// then returns an error naming the file it was blocked on.
	Timeout time.Duration
}

// Defaults of a zero Options.
const (
	DefaultSysfs   = "/sys"
	DefaultDebugfs = "/sys/kernel/debug"
	DefaultProc    = "/proc"
	defaultTimeout = 10 * time.Second
)

// defaultPorts is parsed on first use, not at every plugin start.
var defaultPorts = sync.OnceValue(func() Ports { return mustParsePorts(DefaultCephPorts) })

func (o Options) withDefaults() (Options, error) {
	o.Sysfs = cmp.Or(o.Sysfs, DefaultSysfs)
	o.Debugfs = cmp.Or(o.Debugfs, DefaultDebugfs)
	o.Proc = cmp.Or(o.Proc, DefaultProc)
	if o.CephPorts.isEmpty() {
		o.CephPorts = defaultPorts()
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	p, err := ParsePolicy(string(o.Unattributed))
	if err != nil {
		return o, err
	}
	o.Unattributed = p
	return o, nil
}

// Target is the pinned netns to check.
type Target struct {
	// NetnsPath is the pinned nsfs file. It is entered from a locked OS
	// thread to read the netns's TCP sockets; empty skips the socket signal
	// (it cannot be read without entering the netns).
	NetnsPath string
	// Dev and Ino are the nsfs identity (st_dev, st_ino) of the pinned
	// netns. Processes whose /proc/<pid>/ns/net has this identity run in
	// it; NetnsPath must have it too, so a replaced pin is noticed. Zero
	// skips both (an nsfs inode is never 0). Inode numbers are reused after
	// a netns dies, so this identity is only meaningful while it is pinned.
	Dev, Ino uint64
	// IPs are the global addresses recorded for the netns; a Ceph client
	// whose address is one of them lives there.
	IPs []netip.Addr
	// PodUID is the holder pod's UID: its own processes (the pause
	// container, which a runtime may stop after tearing the network down)
	// are not references. Empty excludes nothing.
	PodUID string
}

// Check returns every reference to the target netns, in a deterministic
// order: rbd devices by number, CephFS clients, unattributed clients,
// processes by pid, kernel sockets by endpoints. An error means the check
// could not be completed; callers must then treat the netns as in use.
//
// Processes and devices that vanish while they are looked at are skipped.
// A process whose netns cannot be told (the kernel refuses to show its
// ns/net even to root, and its /proc/<pid>/net does not tell either) is a
// reference: not known to be elsewhere is in use.
func Check(t Target, o Options) ([]Reference, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &checker{t: t, o: o, workers: min(runtime.GOMAXPROCS(0), maxWorkers)}
	c.progress.items = make([]atomic.Int64, c.workers)
	for _, ip := range t.IPs {
		if ip.IsValid() {
			c.ips = append(c.ips, ip.Unmap().WithZone(""))
		}
	}
	done := make(chan error, 1)
	go func() { done <- c.run() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return c.refs, nil
	case <-time.After(o.Timeout):
		// The goroutine stays blocked in the kernel; nothing can
		// interrupt it. It ends with the process, or when the call
		// returns.
		return nil, fmt.Errorf("in-use check did not finish within %s, blocked in %s", o.Timeout, &c.progress)
	}
}

// run leaves the references, sorted, in c.refs.
func (c *checker) run() error {
	if err := c.ceph(); err != nil {
		return err
	}
	if err := c.processesAndSockets(); err != nil {
		return err
	}
	if c.o.Unattributed == PolicyBlock {
		c.refs = append(c.refs, c.unattributed...)
	}
	c.refs = sortRefs(c.refs)
	return nil
}

// maxWorkers bounds the goroutines reading files: past a few, the kernel's
// locks, not the CPUs, limit the rate, and the node has other work to do.
const maxWorkers = 8

type checker struct {
	t        Target
	o        Options
	ips      []netip.Addr
	workers  int // goroutines of parallel
	progress progress

	refs         []Reference
	unattributed []Reference

	// targetNetDev is the inode of <proc>/thread-self/net/dev read inside
	// the target netns (0 when it could not be entered): see inTargetNetns.
	targetNetDev uint64

	// scanMounts: without debugfs, every mount namespace's mountinfo is
	// read for CephFS kernel mounts (see mountinfoOf).
	scanMounts bool

	// noStatus indexes the debugfs client directories without a status
	// file (rbd clients, and CephFS clients before Linux 5.11) into
	// claimed, set once an rbd device is found to use that client. It is
	// nil when unattributed clients are ignored: then nobody asks.
	noStatus   map[string]int
	claimed    []atomic.Bool
	unresolved atomic.Int64
}

// ours reports whether a client address is one of the pin's.
func (c *checker) ours(a netip.Addr) bool { return slices.Contains(c.ips, a.Unmap().WithZone("")) }

// ceph runs the krbd, CephFS and unattributed-client signals.
func (c *checker) ceph() error {
	cephDir := filepath.Join(c.o.Debugfs, "ceph")
	c.progress.set("read directory " + cephDir)
	ents, err := os.ReadDir(cephDir)
	debugfs := err == nil
	var noStatus []string
	switch {
	case err == nil:
		if noStatus, err = c.debugfsClients(cephDir, ents); err != nil {
			return err
		}
	case errors.Is(err, unix.ENOENT) || (isDenied(err) && c.o.Unattributed == PolicyBlock):
		// debugfs not mounted, libceph not loaded, or debugfs locked
		// down: CephFS kernel clients are only visible in mountinfo,
		// where each is a reference of every pin.
	case isDenied(err):
		// Under "ignore" debugfs is the only way to tell whose a CephFS
		// client is: without it, one of this pin's would go unseen.
		return fmt.Errorf("%w (with unattributed: ignore, CephFS clients are told apart only through debugfs: make it readable, or use unattributed: block)", err)
	default:
		return err
	}
	if c.o.Unattributed == PolicyBlock && len(noStatus) > 0 {
		c.noStatus = make(map[string]int, len(noStatus))
		for i, n := range noStatus {
			c.noStatus[n] = i
		}
		c.claimed = make([]atomic.Bool, len(noStatus))
		c.unresolved.Store(int64(len(noStatus)))
	}
	if err := c.rbdDevices(); err != nil {
		return err
	}
	if c.o.Unattributed != PolicyBlock {
		return nil
	}
	if !debugfs {
		// Read in the pass over the processes (processes): one mountinfo
		// per mount namespace, told by the same look at each process.
		c.scanMounts = c.cephFSRegistered()
		return nil
	}
	c.progress.set("stat debugfs client directories in " + cephDir)
	for i, name := range noStatus {
		if c.claimed[i].Load() || !exists(filepath.Join(cephDir, name)) {
			continue // an rbd device's client, or gone
		}
		fsid, id, _ := parseClientDirName(name) // indexed only when it parsed
		c.unattributed = append(c.unattributed, Reference{
			Kind: kindCephClient, ClusterFSID: fsid, ClientID: id,
			Reason: "debugfs client without status and without rbd device (CephFS before Linux 5.11, or rbd client between map and unmap)",
		})
	}
	return nil
}

// debugfsClients reads <debugfs>/ceph/<fsid>.client<gid>/status. Every
// libceph client (rbd and CephFS alike) has such a directory
// (net/ceph/debugfs.c); only CephFS clients have "status" (fs/ceph/debugfs.c,
// Linux >= 5.11), whose instance line carries the address the monitors saw.
// It returns the directories without status, sorted.
func (c *checker) debugfsClients(dir string, ents []os.DirEntry) ([]string, error) {
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	// A kindCephFS reference is the pin's, a kindCephClient one cannot
	// be attributed; noStatus marks the directories without status.
	res := make([]Reference, len(names))
	noStatus := make([]bool, len(names))
	describe := func(i int) string { return "read " + filepath.Join(dir, names[i], "status") }
	err := c.parallel(len(names), describe, func(_, i int) error {
		fsid, id, ok := parseClientDirName(names[i])
		if !ok {
			return nil
		}
		data, err := readFile(filepath.Join(dir, names[i], "status"), maxSmallFile)
		switch {
		case err == nil:
		case isGone(err):
			noStatus[i] = true
			return nil
		default:
			return err
		}
		r := &res[i]
		r.ClusterFSID, r.ClientID = fsid, id
		st, err := parseStatus(string(data))
		addr := st.Addr.AddrPort.Addr()
		switch {
		case err != nil:
			r.Kind, r.Reason = kindCephClient, "unreadable debugfs status: "+err.Error()
		case c.ours(addr):
			r.Kind, r.ClientAddr, r.Addr, r.Blocklisted = kindCephFS, st.Addr.String(), addr.Unmap(), st.Blocklisted
		case addr.IsUnspecified():
			r.Kind, r.ClientAddr, r.Reason = kindCephClient, st.Addr.String(), "CephFS client has no address yet"
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var without []string
	for i, r := range res {
		switch {
		case noStatus[i]:
			without = append(without, names[i])
		case r.Kind == kindCephFS:
			c.refs = append(c.refs, r)
		case r.Kind == kindCephClient:
			c.unattributed = append(c.unattributed, r)
		}
	}
	slices.Sort(without)
	return without, nil
}

// rbdDevices reads /sys/bus/rbd/devices/<id>/ (Documentation/ABI/testing/
// sysfs-bus-rbd). client_addr (Linux >= 4.9) is "%pISpc/%u" of the client's
// address as the first monitor saw it (learnt in messenger_v2.c
// process_hello, messenger_v1.c process_banner). Devices mapped from one
// netns with the same options share one client unless mapped with "noshare";
// libceph never shares a client across network namespaces.
func (c *checker) rbdDevices() error {
	dir := filepath.Join(c.o.Sysfs, "bus", "rbd", "devices")
	c.progress.set("read directory " + dir)
	// Entries are symlinks to ../../../devices/rbd/<id>.
	ids, err := dirNames(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil // rbd module not loaded
	}
	if err != nil {
		return err
	}
	ids = slices.DeleteFunc(ids, func(id string) bool { return !isID(id) })
	res := make([]Reference, len(ids))
	describe := func(i int) string { return "read attributes of " + filepath.Join(dir, ids[i]) }
	err = c.parallel(len(ids), describe, func(_, i int) error {
		var err error
		res[i], err = c.rbdDevice(filepath.Join(dir, ids[i]), ids[i])
		return err
	})
	if err != nil {
		return err
	}
	for _, r := range res {
		switch r.Kind {
		case kindRBD:
			c.refs = append(c.refs, r)
		case kindCephClient:
			c.unattributed = append(c.unattributed, r)
		}
	}
	return nil
}

// rbdDevice reads one device. It returns a reference of kind kindRBD when
// the device is the pin's, kindCephClient when it cannot be attributed (and
// unattributed clients count), and no kind otherwise; on the way it claims
// the debugfs directory of the device's client.
func (c *checker) rbdDevice(dir, id string) (Reference, error) {
	// read reads attributes into dsts; one that is gone reads "".
	read := func(names []string, dsts ...*string) error {
		for i, a := range names {
			data, err := readFile(filepath.Join(dir, a), maxSmallFile)
			if err != nil && !isGone(err) {
				return err
			}
			*dsts[i] = strings.TrimSpace(string(data))
		}
		return nil
	}
	data, err := readFile(filepath.Join(dir, "client_addr"), maxSmallFile)
	if err != nil && !isGone(err) {
		return Reference{}, err
	}
	ref := c.rbdClient(strings.TrimSpace(string(data)), err == nil)
	if ref.Kind == kindCephClient && c.o.Unattributed != PolicyBlock {
		ref = Reference{} // unattributed clients are ignored
	}
	if ref.Kind == "" && c.unresolved.Load() == 0 {
		// Another netns's device, and no debugfs directory left that
		// its client could be the owner of.
		return Reference{}, nil
	}
	if ref.Kind != "" && !exists(dir) {
		// Unmapped while we looked: its attributes went with it.
		return Reference{}, nil
	}
	if err := read([]string{"cluster_fsid", "client_id"}, &ref.ClusterFSID, &ref.ClientID); err != nil {
		return Reference{}, err
	}
	if c.unresolved.Load() > 0 {
		if i, ok := c.noStatus[ref.ClusterFSID+"."+ref.ClientID]; ok && c.claimed[i].CompareAndSwap(false, true) {
			c.unresolved.Add(-1)
		}
	}
	if ref.Kind == "" {
		return Reference{}, nil
	}
	ref.Device = "rbd" + id
	if err := read([]string{"pool", "pool_ns", "name", "current_snap"}, &ref.Pool, &ref.PoolNamespace, &ref.Image, &ref.Snap); err != nil {
		return Reference{}, err
	}
	if ref.Snap == "-" {
		ref.Snap = ""
	}
	return ref, nil
}

// rbdClient tells from an rbd device's client_addr (ok: the attribute
// exists) whether its client is the pin's (kindRBD), cannot be attributed
// (kindCephClient), or is another netns's (no kind).
func (c *checker) rbdClient(raw string, ok bool) Reference {
	if !ok {
		return Reference{Kind: kindCephClient, Reason: "rbd device without client_addr (Linux before 4.9)"}
	}
	ca, err := parseClientAddr(raw)
	switch {
	case err != nil:
		return Reference{Kind: kindCephClient, ClientAddr: raw, Reason: "unreadable client_addr: " + err.Error()}
	case ca.AddrPort.Addr().IsUnspecified():
		return Reference{Kind: kindCephClient, ClientAddr: raw, Reason: "rbd client has no address yet"}
	case c.ours(ca.AddrPort.Addr()):
		return Reference{Kind: kindRBD, ClientAddr: raw, Addr: ca.AddrPort.Addr().Unmap()}
	}
	return Reference{}
}

// cephFSRegistered reports whether the kernel has the ceph file system
// type, from <proc>/filesystems; true when that cannot be read. Without it
// no CephFS kernel mount can exist: the type is registered when the ceph
// module is loaded (or at boot when built in), and the module cannot be
// unloaded while a superblock of the type exists. So the pass over every
// mount namespace's mountinfo, the costliest part of a check without
// debugfs, is skipped exactly when it could find nothing. A node that
// mounts CephFS without debugfs still reads every mountinfo.
func (c *checker) cephFSRegistered() bool {
	path := filepath.Join(c.o.Proc, "filesystems")
	c.progress.set("read " + path)
	data, err := readFile(path, maxTable)
	return err != nil || hasCephFS(data) // unreadable: not known to be absent, look
}

// hasCephFS reports whether a /proc/filesystems text lists the ceph type.
func hasCephFS(filesystems []byte) bool {
	for line := range bytes.Lines(filesystems) {
		// "nodev\tceph": the type is the last field.
		if f := bytes.Fields(line); len(f) > 0 && string(f[len(f)-1]) == "ceph" {
			return true
		}
	}
	return false
}

// mountinfoOf reports the CephFS kernel mounts of every mount namespace
// (<proc>/<pid>/mountinfo, read once per mount namespace) as unattributed:
// without debugfs nothing tells their netns, and a mount made inside a
// container's mount namespace (ceph-csi's node plugin) is not in the
// host's. Only the text is read; the mount points are never touched. Bind
// mounts of one superblock (kubelet's staging and publish paths, the same
// mount seen from several namespaces) are one client and reported once, at
// their first mount point.
func (c *checker) mountinfoOf(pids []string, procs []procResult) error {
	seenNS := map[uint64]bool{}
	seen := map[[2]int]bool{}
	for i, pid := range pids {
		// A mount namespace whose identity cannot be read (PID 1 of an
		// outer container, an LSM) is read anyway: it may hold a mount.
		if ns := procs[i].mntNS; ns != 0 {
			if seenNS[ns] {
				continue
			}
			seenNS[ns] = true
		}
		path := filepath.Join(c.o.Proc, pid, "mountinfo")
		c.progress.set("read " + path)
		data, err := readFile(path, maxTable)
		if isGone(err) || errors.Is(err, unix.EINVAL) {
			// EINVAL: the process is exiting and has left its mount
			// namespace (fs/proc_namespace.c mounts_open_common).
			continue
		}
		if err != nil {
			return err
		}
		c.cephMounts(data, seen)
	}
	return nil
}

// mountNS is the inode of process pid's mount namespace, 0 when it cannot
// be told.
func (c *checker) mountNS(pid string) uint64 {
	path := filepath.Join(c.o.Proc, pid, "ns", "mnt")
	if ino, ok, err := nsLinkIno(path, "mnt"); err == nil && ok {
		return ino
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		return st.Ino
	}
	return 0
}

// cephMounts adds the ceph mounts of one mountinfo text, skipping the
// superblocks (major:minor) already in seen. Each line that names the ceph
// type is parsed on its own: a line that does not parse is still a ceph
// mount, reported without its details, and the other lines are unaffected.
func (c *checker) cephMounts(data []byte, seen map[[2]int]bool) {
	for line := range bytes.Lines(data) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		if !containsCephFSType(line) {
			continue
		}
		mounts, err := mountinfo.GetMountsFromReader(bytes.NewReader(line), mountinfo.FSTypeFilter("ceph"))
		if err != nil {
			// Unknown format: the line is still a ceph mount.
			c.unattributed = append(c.unattributed, Reference{
				Kind: kindCephClient, Source: string(line),
				Reason: "CephFS kernel mount, no debugfs to tell its netns, " + err.Error(),
			})
			continue
		}
		for _, m := range mounts {
			if seen[[2]int{m.Major, m.Minor}] {
				continue
			}
			seen[[2]int{m.Major, m.Minor}] = true
			ref := Reference{
				Kind: kindCephClient, Source: m.Source, Mountpoint: m.Mountpoint,
				Reason: "CephFS kernel mount, no debugfs to tell its netns",
			}
			if cs, err := parseCephSource(m.Source, m.VFSOptions); err == nil {
				ref.ClusterFSID, ref.Monitors = cs.FSID, cs.Monitors
			}
			c.unattributed = append(c.unattributed, ref)
		}
	}
}

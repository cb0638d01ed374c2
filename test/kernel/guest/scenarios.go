package main

// The scenarios (docs/design.md §17). Each has its own network (conflist,
// pinDir, stateDir, ten addresses) and its own rbd images, so one that
// fails leaves the next ones alone.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// first is the first of the scenario's block of client addresses.
func (s *S) first() netip.Addr {
	a := netip.MustParseAddr(cfg.RangeStart)
	for range block * s.index {
		a = a.Next()
	}
	return a
}

func mon() string { return cfg.MonIP + ":3300" }

func (s *S) image(key string) string {
	img := cfg.Images[key]
	s.must(img != "", "no rbd image for %q in the configuration", key)
	return img
}

// capture keeps a kernel file for scenario "parsers" (and the host's
// parser test) under out/capture/.
func (s *S) capture(name, content string) {
	p := filepath.Join(out, "capture", name)
	s.mustOK(os.MkdirAll(filepath.Dir(p), 0o755), "capture")
	s.mustOK(os.WriteFile(p, []byte(content), 0o644), "capture %s", name)
}

// devRef is how netns-pin names an rbd device: "rbd0 rbd/img".
func devRef(id int, image string) string { return fmt.Sprintf("rbd%d %s/%s", id, cfg.Pool, image) }

// 1. krbd through the link.
func scenarioKRBD(s *S) {
	ch := newChain(s, "krbd", true, s.first())
	a := ch.addHolder(s, "csi-holder-a")
	s.step("holder A (rook-ceph/csi-holder-a): %s, veth %s, pinned at %s", a.ip, a.veth, a.pinPath())
	s.linkIs(ch, a)
	img := s.image("krbd")
	id := s.rbdMap(ch.link(), mon(), img, "ms_mode=prefer-crc")
	addr := rbdAttr(id, "client_addr")
	s.check(clientIP(addr) == a.ip.String(), "rbd%d client_addr %q: want holder A's address %s", id, addr, a.ip)
	captureRBD(s, id, "rbd")
	tcp := inNetns(a.pinPath(), "cat", "/proc/net/tcp")
	s.mustOK(tcp.Err, "cat /proc/net/tcp in holder A's netns: %s", tcp.Stderr)
	s.capture("proc_net_tcp", tcp.Stdout)
	s.check(strings.Contains(tcp.Stdout, ":0CE4 01 "), "holder A's netns has no ESTABLISHED socket to :3300 (0CE4):\n%s", tcp.Stdout)

	msg, details := s.refusedDel(a, fmt.Sprintf("DEL of holder A with rbd%d mapped", id))
	s.contains("msg", msg, devRef(id, img), a.ip.String(), clusterNS+"/csi-holder-a", clusterNS+"/krbd")
	s.contains("details", details, devRef(id, img))
	s.addrStays(a, a.pinPath())
	s.linkIs(ch, a)
	_, err := os.Stat(a.pinPath())
	s.check(err == nil, "pin of holder A after the refused DEL: %v", err)

	r := ch.netnsPin("inuse", clusterNS+"/krbd")
	s.check(r.Err == nil, "netns-pinctl inuse: %s", r)
	s.contains("netns-pinctl inuse", r.Stdout, devRef(id, img), a.ip.String())
	s.step("netns-pinctl inuse %s/krbd:\n%s", clusterNS, strings.TrimRight(r.Stdout, "\n"))
	r = ch.netnsPin("list")
	s.check(r.Err == nil, "netns-pinctl list: %s", r)
	s.contains("netns-pinctl list", r.Stdout, "csi-holder-a", "draining", devRef(id, img))
	s.step("netns-pinctl list:\n%s", strings.TrimRight(r.Stdout, "\n"))

	s.must(s.rbdUnmap(id, false), "unmap rbd%d", id)
	s.step("rbd unmap rbd%d", id)
	s.delOK(a)
	s.released(a)
}

// captureRBD keeps every attribute of an rbd device but config_info.
func captureRBD(s *S, id int, dir string) {
	base := filepath.Join(rbdDevices, strconv.Itoa(id))
	ents, err := os.ReadDir(base)
	s.mustOK(err, "read %s", base)
	var names []string
	for _, e := range ents {
		if e.Name() == "config_info" || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(base, e.Name()))
		if err != nil { // write-only attributes (refresh)
			continue
		}
		names = append(names, e.Name())
		s.capture(filepath.Join(dir, e.Name()), string(b))
	}
	sort.Strings(names)
	s.step("captured rbd%d's attributes (all but config_info): %s", id, strings.Join(names, " "))
	// libceph's debugfs folder of the rbd client: no status file
	clientID := rbdAttr(id, "client_id")
	fsid := rbdAttr(id, "cluster_fsid")
	files, err := os.ReadDir(filepath.Join("/sys/kernel/debug/ceph", fsid+"."+clientID))
	s.mustOK(err, "debugfs folder of rbd%d's client", id)
	var fn []string
	for _, f := range files {
		fn = append(fn, f.Name())
	}
	s.capture("debugfs_rbd_client", fsid+"."+clientID+"\n"+strings.Join(fn, "\n")+"\n")
}

// 2. Holder replaced under live block I/O.
func scenarioHolderReplace(s *S) {
	ch := newChain(s, "replace", true, s.first())
	opts := fmt.Sprintf("ms_mode=prefer-crc,osd_request_timeout=%d", cfg.OSDTimeout)
	a := ch.addHolder(s, "csi-holder-a")
	s.step("holder A: %s, veth %s", a.ip, a.veth)
	img1, img2 := s.image("holder-replace"), s.image("holder-replace-2")
	id1 := s.rbdMap(ch.link(), mon(), img1, opts)
	s.check(clientIP(rbdAttr(id1, "client_addr")) == a.ip.String(), "rbd%d client_addr %s: want holder A's %s", id1, rbdAttr(id1, "client_addr"), a.ip)
	io := s.startIO(id1)
	st := s.waitOps(io, ioStats{}, 20, "before the holder's replacement")
	s.step("O_DIRECT write/read-back loop on /dev/rbd%d: %s", id1, st)

	s.refusedDel(a, "DEL of holder A under I/O")
	b := ch.addHolder(s, "csi-holder-b")
	s.step("holder B: %s, veth %s", b.ip, b.veth)
	s.linkIs(ch, b)
	removal, removalAt := io.snapshot(), time.Now()
	s.netnsDel(a)
	s.step("ip netns del %s: holder A's runtime netns path is gone", a.ns)
	st = removal
	for try := 1; try <= 3; try++ {
		st = s.waitOps(io, st, 10, fmt.Sprintf("before DEL retry %d", try))
		msg, _ := s.refusedDel(a, fmt.Sprintf("DEL retry %d of holder A", try))
		s.contains("msg", msg, devRef(id1, img1))
	}
	s.addrStays(a, a.pinPath())
	id2 := s.rbdMap(ch.link(), mon(), img2, opts)
	s.check(clientIP(rbdAttr(id2, "client_addr")) == b.ip.String(), "second map rbd%d through the link: client_addr %s, want holder B's %s",
		id2, rbdAttr(id2, "client_addr"), b.ip)
	// the client outlives the removal by more than its own timeout twice
	// over: a cut network would have failed an operation by then
	window := time.Duration(2*cfg.OSDTimeout+3) * time.Second
	ok := host.Poll(window+90*time.Second, 50*time.Millisecond, func() bool {
		st = io.snapshot()
		return time.Since(removalAt) > window && st.Ops >= removal.Ops+30
	})
	s.check(ok, "I/O after the removal: %s", st)
	stopped := io.halt(30 * time.Second)
	final := io.snapshot()
	s.step("I/O loop on rbd%d, %.0fs after holder A's removal: %s (%d after the removal began)", id1, time.Since(removalAt).Seconds(), final, final.Ops-removal.Ops)
	s.res.Row = &ioRow{Design: "netns-pin", Ops: final.Ops, During: final.Ops - removal.Ops, Failed: final.Failed,
		Mismatches: final.Mismatches, LongestMS: float64(final.Longest.Microseconds()) / 1000, Hung: !stopped, FirstError: final.FirstError,
		Removal: "DEL refused (code 11); holder B took the link; `ip netns del`; DEL retried 3x"}
	s.check(stopped, "the I/O loop did not stop")
	s.check(final.Failed == 0 && final.Mismatches == 0, "netns-pin: the krbd device must not see a failed or corrupt operation: %s (%s)", final, final.FirstError)

	s.must(s.rbdUnmap(id1, false), "unmap rbd%d", id1)
	s.step("rbd unmap rbd%d: the next DEL of holder A releases it", id1)
	s.delOK(a)
	s.released(a)
	s.linkIs(ch, b)
	s.must(s.rbdUnmap(id2, false), "unmap rbd%d", id2)
	s.delOK(b)
}

// 3. CephFS kernel mounts, old and new syntax, with and without debugfs.
func scenarioCephFS(s *S) {
	ch := newChain(s, "cephfs", true, s.first())
	a := ch.addHolder(s, "csi-holder-a")
	s.step("holder A: %s, veth %s", a.ip, a.veth)
	oldDir, newDir := "/mnt/cephfs-old", "/mnt/cephfs-new"
	s.cephMount(ch.link(), oldDir, false)
	status := captureStatus(s, a.ip.String())
	captureMountinfo(s, oldDir, "mountinfo_old_syntax")

	msg, _ := s.refusedDel(a, "DEL with a CephFS mount (old syntax), debugfs mounted (status signal)")
	s.contains("msg", msg, "cephfs "+cfg.FSID+".", a.ip.String())
	s.check(strings.Contains(status, a.ip.String()+":0/"), "status must show holder A's address: %s", status)

	s.cephMount(ch.link(), newDir, true)
	captureMountinfo(s, newDir, "mountinfo_new_syntax")
	s.mustOK(syscall.Unmount("/sys/kernel/debug", 0), "umount debugfs")
	s.cleanup(func() { _ = sh("mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug") })
	s.step("umount /sys/kernel/debug: only mountinfo tells of the CephFS clients")
	msg, _ = s.refusedDel(a, "DEL with CephFS mounts (old and new syntax), debugfs unmounted (mountinfo signal)")
	s.contains("msg", msg, "unattributed ceph mount", oldDir, newDir)
	s.addrStays(a, a.pinPath())
	r := sh("mount -t debugfs debugfs /sys/kernel/debug")
	s.mustOK(r.Err, "mount debugfs: %s", r.Stderr)

	s.cephUmount(oldDir)
	msg, _ = s.refusedDel(a, "DEL with the new-syntax mount left")
	s.contains("msg", msg, "cephfs ", a.ip.String())
	s.cephUmount(newDir)
	// the kernel client goes a moment after the last umount
	s.delOK(a)
	s.step("DEL of holder A after both umounts: released")
	s.released(a)
}

// captureStatus finds the CephFS client's debugfs status with ip and keeps it.
func captureStatus(s *S, ip string) string {
	dirs, _ := filepath.Glob("/sys/kernel/debug/ceph/*/status")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), " (3)"+ip+":0/") || strings.Contains(string(b), ")"+ip+":0/") {
			s.capture("debugfs_status", string(b))
			s.capture("debugfs_cephfs_client", filepath.Base(filepath.Dir(p))+"\n")
			s.step("debugfs %s:\n%s", p, strings.TrimSpace(string(b)))
			return string(b)
		}
	}
	s.fail("no debugfs ceph status with %s among %v", ip, dirs)
	return ""
}

func captureMountinfo(s *S, dir, name string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	s.mustOK(err, "mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == dir {
			s.capture(name, l+"\n")
			s.step("mountinfo: %s", l)
			return
		}
	}
	s.fail("no mountinfo line for %s", dir)
}

// 4. A Rook-style holder (a process, a symlink to /proc/<pid>/ns/net),
// removed the way a runtime removes a pod, under the same krbd I/O.
func scenarioRookStyle(s *S) {
	ch := newChain(s, "rook", false, s.first())
	a := ch.addHolder(s, "csi-holder-rook")
	pause, err := startInNetns(a.nsPath, "sleep", "1000000")
	s.mustOK(err, "start the holder's process")
	s.cleanup(func() { _ = pause.Process.Kill(); _, _ = pause.Process.Wait() })
	link := filepath.Join(ch.dir, clusterNS, "rook.net")
	s.mustOK(os.MkdirAll(filepath.Dir(link), 0o755), "mkdir")
	ok := host.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		id, err := host.NSIDOf(fmt.Sprintf("/proc/%d/ns/net", pause.Process.Pid))
		return err == nil && id == a.nsID
	})
	s.must(ok, "the holder process %d never entered %s", pause.Process.Pid, a.nsPath)
	s.mustOK(os.Symlink(fmt.Sprintf("/proc/%d/ns/net", pause.Process.Pid), link), "symlink")
	s.step("Rook-style holder: process %d (sleep) in %s (%s), %s -> /proc/%d/ns/net", pause.Process.Pid, a.nsPath, a.ip, link, pause.Process.Pid)
	img := s.image("rook-style")
	id := s.rbdMap(link, mon(), img, fmt.Sprintf("ms_mode=prefer-crc,osd_request_timeout=%d", cfg.OSDTimeout))
	io := s.startIO(id)
	st := s.waitOps(io, ioStats{}, 20, "before the holder's removal")
	s.step("O_DIRECT write/read-back loop on /dev/rbd%d: %s", id, st)

	removal, removalAt := io.snapshot(), time.Now()
	_ = pause.Process.Kill()
	_, _ = pause.Process.Wait()
	r := a.cnitool("del")
	s.check(r.Err == nil, "cnitool del of the Rook-style holder: %s", r)
	a.deleted = true
	s.netnsDel(a)
	s.step("holder removed as a runtime removes a pod: process killed, CNI DEL (veth %s deleted), ip netns del", a.veth)
	window := time.Duration(3*cfg.OSDTimeout+10) * time.Second
	host.Poll(window, 50*time.Millisecond, func() bool { st = io.snapshot(); return st.Failed > 0 })
	stopped := io.halt(time.Duration(2*cfg.OSDTimeout+5) * time.Second)
	final := io.snapshot()
	longest := final.Longest
	if !final.InFlightSince.IsZero() {
		longest = max(longest, time.Since(final.InFlightSince))
	}
	s.step("I/O loop on rbd%d, %.0fs after the removal: %s (%d after the removal began; first error: %s; stopped: %v)",
		id, time.Since(removalAt).Seconds(), final, final.Ops-removal.Ops, final.FirstError, stopped)
	s.res.Row = &ioRow{Design: "Rook-style", Ops: final.Ops, During: final.Ops - removal.Ops, Failed: final.Failed,
		Mismatches: final.Mismatches, LongestMS: float64(longest.Microseconds()) / 1000, Hung: !stopped, FirstError: final.FirstError,
		Removal: "process killed, CNI DEL (veth deleted), `ip netns del`"}
	s.check(final.Failed+final.Mismatches > 0 || !stopped, "Rook-style: removing the holder should fail or hang the krbd client: %s", final)
	s.rbdUnmap(id, true)
}

// 5. msgr2 secure mode maps and is detected like prefer-crc.
func scenarioSecure(s *S) {
	ch := newChain(s, "secure", true, s.first())
	a := ch.addHolder(s, "csi-holder-a")
	img := s.image("secure")
	id := s.rbdMap(ch.link(), mon(), img, "ms_mode=secure")
	s.check(clientIP(rbdAttr(id, "client_addr")) == a.ip.String(), "rbd%d client_addr %s: want %s", id, rbdAttr(id, "client_addr"), a.ip)
	// the device works: one O_DIRECT write and read-back
	io := s.startIO(id)
	st := s.waitOps(io, ioStats{}, 5, "ms_mode=secure")
	io.halt(30 * time.Second)
	s.check(st.Failed+st.Mismatches == 0, "I/O on the secure-mode device: %s (%s)", st, st.FirstError)
	msg, _ := s.refusedDel(a, "DEL with an ms_mode=secure device")
	s.contains("msg", msg, devRef(id, img), a.ip.String())
	s.must(s.rbdUnmap(id, false), "unmap")
	s.delOK(a)
	s.released(a)
}

// 6. An IPv6 storage network: krbd through the link against a cluster
// bound to IPv6 only.
func scenarioIPv6(s *S) {
	v6 := cfg.IPv6
	s.must(v6.MonIP != "" && v6.Image != "", "no IPv6 cluster in the configuration")
	first := netip.MustParseAddr(v6.RangeStart)
	ch := newChainOn(s, "ipv6", true, first, "br1", v6.Subnet)
	a := ch.addHolder(s, "csi-holder-a")
	s.must(a.ip.Is6(), "holder A's address %s is not IPv6", a.ip)
	s.step("holder A: %s on br1, veth %s", a.ip, a.veth)
	s.linkIs(ch, a)
	mon := "[" + v6.MonIP + "]:3300"
	id := s.rbdMapKey(ch.link(), mon, v6.RBDKey, v6.Image, "ms_mode=prefer-crc")
	addr := rbdAttr(id, "client_addr")
	s.check(strings.HasPrefix(addr, "["+a.ip.String()+"]:0/"), "rbd%d client_addr %q: want [%s]:0/<nonce>", id, addr, a.ip)
	s.capture("ipv6/rbd_client_addr", rbdAttr(id, "client_addr")+"\n")
	tcp := inNetns(a.pinPath(), "cat", "/proc/net/tcp6")
	s.mustOK(tcp.Err, "cat /proc/net/tcp6 in holder A's netns: %s", tcp.Stderr)
	s.capture("ipv6/proc_net_tcp6", tcp.Stdout)

	msg, _ := s.refusedDel(a, fmt.Sprintf("DEL of holder A with rbd%d mapped over IPv6", id))
	s.contains("msg", msg, devRef(id, v6.Image), a.ip.String())
	s.addrStays(a, a.pinPath())
	r := ch.netnsPin("inuse", clusterNS+"/ipv6")
	s.check(r.Err == nil, "netns-pinctl inuse: %s", r)
	s.contains("netns-pinctl inuse", r.Stdout, devRef(id, v6.Image), a.ip.String())
	s.must(s.rbdUnmap(id, false), "unmap rbd%d", id)
	s.delOK(a)
	s.released(a)
}

// 7. The real kernel's files, captured by the scenarios above, for the
// host's parser test: all there, and no secret among them.
func scenarioParsers(s *S) {
	want := []string{"rbd/client_addr", "rbd/client_id", "rbd/cluster_fsid", "rbd/pool", "rbd/pool_ns", "rbd/name",
		"rbd/current_snap", "debugfs_rbd_client", "debugfs_status", "debugfs_cephfs_client", "mountinfo_old_syntax",
		"mountinfo_new_syntax", "proc_net_tcp", "ipv6/rbd_client_addr", "ipv6/proc_net_tcp6"}
	for _, w := range want {
		_, err := os.Stat(filepath.Join(out, "capture", w))
		s.check(err == nil, "capture %s: %v (its scenario did not run or failed)", w, err)
	}
	r, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	s.capture("kernel_release", string(r))
	fs, err := os.ReadFile("/proc/filesystems")
	s.mustOK(err, "read /proc/filesystems")
	s.capture("proc_filesystems", string(fs)) // with the ceph module loaded
	err = filepath.WalkDir(filepath.Join(out, "capture"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, key := range []string{cfg.RBDKey, cfg.FSKey} {
			s.check(!strings.Contains(string(b), key), "%s holds a cephx secret", p)
		}
		return nil
	})
	s.mustOK(err, "walk the capture")
	s.step("captured the kernel's files (kernel %s) in out/capture; no secret in them", strings.TrimSpace(string(r)))
}

// 8. The node plugin as its own holder (docs/operating.md, "Two modes"):
// a chain whose netns-pin entry has "links": [] and a rule for
// csi-rbdplugin-* pods. The clients are made from inside the plugin pod's
// netns by a process that then exits (the rbd sysfs write and mount -t ceph
// each run by an nsenter that is gone when they return), as ceph-csi does
// with its node plugin off the host network: nothing of the pod runs in the
// netns afterwards. The pod's DEL is refused while the device and the mount
// are in use; its replacement comes up with its own netns and clients; the
// old pod's I/O continues past its netns path's removal; unmapped and
// unmounted from the host (the guest's own netns), it is released.
func scenarioNodePlugin(s *S) {
	ch := newChain(s, "nodeplugin", true, s.first())
	ch.asNodePlugin(s)
	a := ch.addHolder(s, "csi-rbdplugin-a")
	s.step("node plugin pod A (rook-ceph/csi-rbdplugin-a): %s, veth %s, pinned at %s", a.ip, a.veth, a.pinPath())
	s.noLinks(ch)

	opts := fmt.Sprintf("ms_mode=prefer-crc,osd_request_timeout=%d", cfg.OSDTimeout)
	img1, img2 := s.image("nodeplugin"), s.image("nodeplugin-2")
	id1 := s.rbdMap(a.nsPath, mon(), img1, opts)
	s.check(clientIP(rbdAttr(id1, "client_addr")) == a.ip.String(), "rbd%d client_addr %s: want pod A's %s", id1, rbdAttr(id1, "client_addr"), a.ip)
	dir := "/mnt/nodeplugin-a"
	s.cephMount(a.nsPath, dir, true)
	s.check(len(procsIn(a.nsID)) == 0, "processes left in pod A's netns after the map and the mount: %v", procsIn(a.nsID))
	io := s.startIO(id1)
	st := s.waitOps(io, ioStats{}, 20, "before pod A's DEL")
	s.step("O_DIRECT write/read-back loop on /dev/rbd%d: %s", id1, st)

	msg, _ := s.refusedDel(a, "DEL of node plugin pod A with rbd and CephFS clients it made")
	s.contains("msg", msg, devRef(id1, img1), a.ip.String(), clusterNS+"/csi-rbdplugin-a", clusterNS+"/nodeplugin")
	s.addrStays(a, a.pinPath())
	r := ch.netnsPin("inuse", clusterNS+"/nodeplugin")
	s.check(r.Err == nil, "netns-pinctl inuse: %s", r)
	s.contains("netns-pinctl inuse", r.Stdout, devRef(id1, img1), "cephfs ")
	s.step("netns-pinctl inuse %s/nodeplugin:\n%s", clusterNS, strings.TrimRight(r.Stdout, "\n"))

	// the replacement: its own netns, its own clients
	b := ch.addHolder(s, "csi-rbdplugin-b")
	s.step("node plugin pod B: %s, veth %s", b.ip, b.veth)
	s.noLinks(ch)
	id2 := s.rbdMap(b.nsPath, mon(), img2, opts)
	s.check(clientIP(rbdAttr(id2, "client_addr")) == b.ip.String(), "rbd%d client_addr %s: want pod B's %s", id2, rbdAttr(id2, "client_addr"), b.ip)
	removal, removalAt := io.snapshot(), time.Now()
	s.netnsDel(a)
	s.step("ip netns del %s: pod A's runtime netns path is gone", a.ns)
	st = removal
	for try := 1; try <= 2; try++ {
		st = s.waitOps(io, st, 10, fmt.Sprintf("before DEL retry %d", try))
		msg, _ := s.refusedDel(a, fmt.Sprintf("DEL retry %d of pod A", try))
		s.contains("msg", msg, devRef(id1, img1))
	}
	s.addrStays(a, a.pinPath())
	window := time.Duration(2*cfg.OSDTimeout+3) * time.Second
	ok := host.Poll(window+90*time.Second, 50*time.Millisecond, func() bool {
		st = io.snapshot()
		return time.Since(removalAt) > window && st.Ops >= removal.Ops+30
	})
	s.check(ok, "I/O after pod A's removal: %s", st)
	f := filepath.Join(dir, "after-"+host.RandHex(6))
	s.mustOK(os.WriteFile(f, []byte("netns-pin"), 0o644), "write through %s after pod A's removal", dir)
	b2, err := os.ReadFile(f)
	s.check(err == nil && string(b2) == "netns-pin", "read back through %s after pod A's removal: %q %v", dir, b2, err)
	stopped := io.halt(30 * time.Second)
	final := io.snapshot()
	s.step("I/O loop on rbd%d, %.0fs after pod A's removal: %s (%d after the removal began)", id1, time.Since(removalAt).Seconds(), final, final.Ops-removal.Ops)
	s.check(stopped, "the I/O loop did not stop")
	s.check(final.Failed == 0 && final.Mismatches == 0, "the krbd device of pod A must not see a failed or corrupt operation: %s (%s)", final, final.FirstError)

	// unmapped and unmounted from the host: released
	s.must(s.rbdUnmap(id1, false), "unmap rbd%d", id1)
	s.step("rbd unmap rbd%d from the guest's own netns", id1)
	msg, _ = s.refusedDel(a, "DEL of pod A with its CephFS mount left")
	s.contains("msg", msg, "cephfs ", a.ip.String())
	s.cephUmount(dir)
	s.delOK(a)
	s.released(a)
	s.must(s.rbdUnmap(id2, false), "unmap rbd%d", id2)
	s.delOK(b)
	s.released(b)
}

// asNodePlugin rewrites the chain's netns-pin entry as deploy/nodeplugin's:
// no link, holders are the node plugin's pods.
func (ch *chain) asNodePlugin(s *S) {
	b, err := os.ReadFile(ch.confPath)
	s.mustOK(err, "read %s", ch.confPath)
	var list map[string]any
	s.mustOK(json.Unmarshal(b, &list), "conflist")
	plugins := list["plugins"].([]any)
	pin := plugins[len(plugins)-1].(map[string]any)
	pin["links"] = []string{}
	pin["holders"] = []map[string]any{{"podNamespace": clusterNS, "podName": "csi-rbdplugin-*", "cluster": clusterNS + "/" + ch.cluster}}
	b, err = json.MarshalIndent(list, "", "  ")
	s.mustOK(err, "conflist")
	s.mustOK(os.WriteFile(ch.confPath, b, 0o644), "conflist")
}

// noLinks checks that nothing under the chain's pinDir is a symlink.
func (s *S) noLinks(ch *chain) {
	var links []string
	err := filepath.WalkDir(ch.pinDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&os.ModeSymlink != 0 {
			links = append(links, p)
		}
		return nil
	})
	s.mustOK(err, "walk %s", ch.pinDir)
	s.check(len(links) == 0, "links: [] made links: %v", links)
}

// procsIn lists the pids of the processes in the netns id.
func procsIn(id host.NSID) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if got, err := host.NSIDOf(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && got == id {
			out = append(out, e.Name())
		}
	}
	return out
}

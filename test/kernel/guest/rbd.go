package main

// krbd and CephFS kernel clients, made through a netns path the way
// ceph-csi makes them; an O_DIRECT write/read-back loop on a krbd device.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
)

const rbdDevices = "/sys/bus/rbd/devices"

func rbdIDs() []int {
	ents, _ := os.ReadDir(rbdDevices)
	var ids []int
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// rbdAttr reads a sysfs attribute of device id (never config_info: it holds
// the cephx secret in clear).
func rbdAttr(id int, name string) string {
	if name == "config_info" {
		panic("config_info holds the cephx secret: never read it")
	}
	b, _ := os.ReadFile(filepath.Join(rbdDevices, strconv.Itoa(id), name))
	return strings.TrimSpace(string(b))
}

// rbdMap maps pool/image from inside the netns at path with the rbd sysfs
// interface (what `rbd map` writes), monitor mon ("ip:port" or
// "[ip6]:port"), and returns the new device's id. The cleanup unmaps it
// (with force: the cluster may be unreachable from a cut netns).
func (s *S) rbdMap(path, mon, image, extraOpts string) int {
	return s.rbdMapKey(path, mon, cfg.RBDKey, image, extraOpts)
}

// rbdMapKey is rbdMap with another cluster's key.
func (s *S) rbdMapKey(path, mon, key, image, extraOpts string) int {
	opts := fmt.Sprintf("name=%s,secret=%s,%s", cfg.RBDUser, key, extraOpts)
	before := rbdIDs()
	r := inNetns(path, "sh", "-c", fmt.Sprintf("echo '%s %s %s %s -' > /sys/bus/rbd/add_single_major", mon, opts, cfg.Pool, image))
	// the key is in the command line: never print r (its Cmd) whole
	s.must(r.Err == nil, "rbd map %s/%s (%s) through %s: %v: %s", cfg.Pool, image, extraOpts, path, r.Err, strings.TrimSpace(r.Stderr))
	id := -1
	for _, n := range rbdIDs() {
		if !slices.Contains(before, n) && rbdAttr(n, "name") == image {
			id = n
		}
	}
	s.must(id >= 0, "rbd map %s: no new device under %s", image, rbdDevices)
	s.cleanup(func() { s.rbdUnmap(id, true) })
	s.step("rbd map %s/%s (%s) through %s: rbd%d, client_addr %s, %s", cfg.Pool, image, extraOpts, path, id,
		rbdAttr(id, "client_addr"), rbdAttr(id, "client_id"))
	return id
}

// rbdUnmap unmaps device id; it returns whether the device went.
func (s *S) rbdUnmap(id int, force bool) bool {
	if _, err := os.Stat(filepath.Join(rbdDevices, strconv.Itoa(id))); err != nil {
		return true
	}
	arg := strconv.Itoa(id)
	if force {
		arg += " force"
	}
	err := os.WriteFile("/sys/bus/rbd/remove_single_major", []byte(arg), 0o200)
	if err != nil {
		s.fail("rbd unmap %s: %v", arg, err)
		return false
	}
	return true
}

// clientIP is the IP of a client_addr ("10.96.0.101:0/123", "[fd00::5]:0/123").
func clientIP(addr string) string {
	a, _, _ := strings.Cut(addr, "/")
	if i := strings.LastIndexByte(a, ':'); i >= 0 {
		a = a[:i]
	}
	return strings.Trim(a, "[]")
}

// cephMount mounts CephFS through the netns at path; newSyntax uses
// "<user>@<fsid>.<fs>=/" with mon_addr, else "<mon>:/".
func (s *S) cephMount(path, dir string, newSyntax bool) {
	s.mustOK(os.MkdirAll(dir, 0o755), "mkdir %s", dir)
	src := cfg.MonIP + ":3300:/"
	opts := fmt.Sprintf("name=%s,secret=%s,ms_mode=prefer-crc", cfg.FSUser, cfg.FSKey)
	if newSyntax {
		src = fmt.Sprintf("%s@%s.%s=/", cfg.FSUser, cfg.FSID, cfg.FSName)
		opts = fmt.Sprintf("mon_addr=%s:3300,secret=%s,ms_mode=prefer-crc", cfg.MonIP, cfg.FSKey)
	}
	r := inNetns(path, "mount", "-t", "ceph", src, dir, "-o", opts)
	s.must(r.Err == nil, "mount -t ceph %s %s through %s: %v: %s", src, dir, path, r.Err, strings.TrimSpace(r.Stderr))
	// (EINVAL once unmounted: nothing to do)
	s.cleanup(func() { _ = unix.Unmount(dir, unix.MNT_FORCE) })
	s.step("nsenter --net=%s -- mount -t ceph %s %s", path, src, dir)
	// a write and a read through the mount: the client works
	f := filepath.Join(dir, "probe-"+host.RandHex(6))
	s.mustOK(os.WriteFile(f, []byte("netns-pin"), 0o644), "write through %s", dir)
	b, err := os.ReadFile(f)
	s.must(err == nil && string(b) == "netns-pin", "read back through %s: %q %v", dir, b, err)
}

func (s *S) cephUmount(dir string) {
	s.mustOK(unix.Unmount(dir, 0), "umount %s", dir)
	s.step("umount %s", dir)
}

// ioLoop writes a block at a time to a krbd device with O_DIRECT, reads it
// back and compares, until stopped; each write+read is one operation.
type ioLoop struct {
	dev  string
	fd   int
	mu   sync.Mutex
	st   ioStats
	stop chan struct{}
	done chan struct{}
}

type ioStats struct {
	Ops, Failed, Mismatches int
	Longest                 time.Duration
	FirstError              string
	InFlightSince           time.Time // start of the running operation
}

const ioBlock = 64 << 10

func (s *S) startIO(id int) *ioLoop {
	dev := fmt.Sprintf("/dev/rbd%d", id)
	var fd int
	ok := host.Poll(10*time.Second, 50*time.Millisecond, func() bool {
		var err error
		fd, err = unix.Open(dev, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		return err == nil
	})
	s.must(ok, "open %s O_DIRECT", dev)
	l := &ioLoop{dev: dev, fd: fd, stop: make(chan struct{}), done: make(chan struct{})}
	size, err := strconv.ParseInt(rbdAttr(id, "size"), 10, 64)
	s.must(err == nil && size >= 16*ioBlock, "rbd%d size %q", id, rbdAttr(id, "size"))
	go l.run(size / ioBlock)
	s.cleanup(func() { l.halt(5 * time.Second) })
	return l
}

func (l *ioLoop) run(blocks int64) {
	defer close(l.done)
	// O_DIRECT needs aligned buffers: mmap gives page-aligned ones
	wbuf, err1 := unix.Mmap(-1, 0, ioBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	rbuf, err2 := unix.Mmap(-1, 0, ioBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err1 != nil || err2 != nil {
		l.record(0, fmt.Errorf("mmap: %v %v", err1, err2), false)
		return
	}
	for i := int64(0); ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		for j := 0; j < ioBlock; j += 8 {
			binary.LittleEndian.PutUint64(wbuf[j:], uint64(i)<<20|uint64(j))
		}
		off := (i % blocks) * ioBlock
		start := time.Now()
		l.mu.Lock()
		l.st.InFlightSince = start
		l.mu.Unlock()
		_, err := unix.Pwrite(l.fd, wbuf, off)
		if err == nil {
			_, err = unix.Pread(l.fd, rbuf, off)
		}
		l.record(time.Since(start), err, err == nil && !bytes.Equal(wbuf, rbuf))
	}
}

func (l *ioLoop) record(d time.Duration, err error, mismatch bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.InFlightSince = time.Time{}
	l.st.Ops++
	l.st.Longest = max(l.st.Longest, d)
	switch {
	case err != nil:
		l.st.Failed++
		if l.st.FirstError == "" {
			l.st.FirstError = fmt.Sprintf("op %d after %s: %v", l.st.Ops, d.Round(time.Millisecond), err)
		}
	case mismatch:
		l.st.Mismatches++
		if l.st.FirstError == "" {
			l.st.FirstError = fmt.Sprintf("op %d: read back differs from what was written", l.st.Ops)
		}
	}
}

func (l *ioLoop) snapshot() ioStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// halt stops the loop and says whether it stopped within d (a device whose
// client lost its network can block an operation much longer).
func (l *ioLoop) halt(d time.Duration) bool {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	select {
	case <-l.done:
		unix.Close(l.fd)
		return true
	case <-time.After(d):
		return false
	}
}

// waitOps waits until n more operations than from completed.
func (s *S) waitOps(l *ioLoop, from ioStats, n int, why string) ioStats {
	var st ioStats
	ok := host.Poll(90*time.Second, 20*time.Millisecond, func() bool { st = l.snapshot(); return st.Ops >= from.Ops+n })
	s.must(ok, "%s: %d operations on %s in 90s (%d before), want %d more: %+v", why, st.Ops-from.Ops, l.dev, from.Ops, n, st)
	return st
}

func (st ioStats) String() string {
	return fmt.Sprintf("%d ops, %d failed, %d mismatches, longest %s", st.Ops, st.Failed, st.Mismatches, st.Longest.Round(time.Millisecond))
}

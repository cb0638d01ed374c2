package inuse

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// processesAndSockets runs the process and kernel-socket signals in one pass
// over <proc>: the TCP table of the netns is read first, and only when it has
// candidate sockets (TCP to a Ceph port, not listening, with a socket inode)
// are the processes' file descriptors read to find who holds them.
func (c *checker) processesAndSockets() error {
	var cands []tcpSocket
	if c.t.NetnsPath != "" {
		var err error
		if cands, err = c.readSockets(); err != nil {
			return err
		}
	}
	held, err := c.processes(cands)
	if err != nil {
		return err
	}
	if !slices.Contains(held, false) {
		return nil
	}
	// A process that exited between the two reads closed its sockets:
	// they are gone, or orphaned with inode 0, so read the table again and
	// keep only the unheld sockets that still exist with the same inode.
	again, err := c.readSockets()
	if err != nil {
		return err
	}
	still := make(map[uint64]bool, len(again))
	for _, s := range again {
		still[s.Inode] = true
	}
	for i, s := range cands {
		if held[i] || !still[s.Inode] {
			continue
		}
		c.refs = append(c.refs, Reference{Kind: kindSocket, Local: s.Local, Remote: s.Remote, Inode: s.Inode})
	}
	return nil
}

// readSockets returns the candidate sockets of the target netns: TCP sockets
// whose remote port is a Ceph port, not LISTEN, with a nonzero inode (TIME_WAIT
// and orphaned sockets have none; nothing can hold them and they hold no
// client). /proc/thread-self/net follows the calling thread's netns, unlike
// /proc/self/net, which follows the thread-group leader's; nsinfo.Do runs
// the read on a locked OS thread that has entered the netns.
func (c *checker) readSockets() ([]tcpSocket, error) {
	c.progress.set("open netns " + c.t.NetnsPath)
	fd, err := nsinfo.OpenNetns(c.t.NetnsPath)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if c.t.Dev != 0 || c.t.Ino != 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("stat netns %s: %w", c.t.NetnsPath, err)
		}
		if uint64(st.Dev) != c.t.Dev || st.Ino != c.t.Ino {
			return nil, fmt.Errorf("netns %s is %d:%d, not the pinned netns %d:%d", c.t.NetnsPath, st.Dev, st.Ino, c.t.Dev, c.t.Ino)
		}
	}
	c.progress.set("read TCP sockets in netns " + c.t.NetnsPath)
	var tables [2][]byte
	paths := [2]string{
		filepath.Join(c.o.Proc, "thread-self", "net", "tcp"),
		filepath.Join(c.o.Proc, "thread-self", "net", "tcp6"),
	}
	err = nsinfo.Do(fd, func() error {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(c.o.Proc, "thread-self", "net", "dev"), &st) == nil {
			c.targetNetDev = st.Ino
		}
		if c.noTCPSockets() {
			return nil
		}
		for i, p := range paths {
			data, err := readFile(p, maxTable)
			if i == 1 && errors.Is(err, unix.ENOENT) {
				continue // IPv6 disabled
			}
			if err != nil {
				return err
			}
			tables[i] = data
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", c.t.NetnsPath, err)
	}
	var cands []tcpSocket
	for i, data := range tables {
		_, body, _ := bytes.Cut(data, []byte("\n")) // below the header
		for line := range bytes.Lines(body) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			s, err := parseTCPLine(string(line))
			if err != nil {
				return nil, fmt.Errorf("%s in netns %s: %w", paths[i], c.t.NetnsPath, err)
			}
			if s.State != tcpListen && s.Inode != 0 && c.o.CephPorts.Contains(s.Remote.Port()) {
				cands = append(cands, s)
			}
		}
	}
	return cands, nil
}

// noTCPSockets reports whether the netns of the calling thread has no TCP
// socket at all, from sockstat's per-netns counters ("TCP: inuse 0",
// "TCP6: inuse 0"). Reading the tcp tables walks the host-wide socket hash
// whatever the netns, so its cost grows with the node's sockets; sockstat
// is two short lines. When sockstat cannot be read the tables are read.
func (c *checker) noTCPSockets() bool {
	for _, f := range []struct{ name, key string }{{"sockstat", "TCP:"}, {"sockstat6", "TCP6:"}} {
		data, err := readFile(filepath.Join(c.o.Proc, "thread-self", "net", f.name), maxSmallFile)
		if f.name == "sockstat6" && errors.Is(err, unix.ENOENT) {
			continue // IPv6 disabled
		}
		if err != nil {
			return false
		}
		inuse := -1
		for line := range bytes.Lines(data) {
			fields := strings.Fields(string(line))
			if len(fields) >= 3 && fields[0] == f.key && fields[1] == "inuse" {
				n, err := strconv.Atoi(fields[2])
				if err != nil {
					return false // unreadable: the table is read
				}
				inuse = n
			}
		}
		if inuse != 0 {
			return false
		}
	}
	return true
}

// processes finds processes in the target netns and, when there are
// candidate sockets, the processes holding them. It returns which candidates
// some process holds (including the holder pod's own processes: their
// sockets are not kernel sockets either).
func (c *checker) processes(cands []tcpSocket) ([]bool, error) {
	held := make([]bool, len(cands))
	var index map[uint64]int
	if len(cands) > 0 {
		index = make(map[uint64]int, len(cands))
		for i, s := range cands {
			index[s.Inode] = i
		}
	}
	if c.t.Ino == 0 && len(cands) == 0 && !c.scanMounts {
		return held, nil
	}
	needles := podCgroupNeedles(c.t.PodUID)
	c.progress.set("read directory " + c.o.Proc)
	pids, err := dirNames(c.o.Proc)
	if err != nil {
		return nil, err
	}
	// Numeric entries only: not self, thread-self, sys, ...
	pids = slices.DeleteFunc(pids, func(name string) bool { return !isID(name) })
	res := make([]procResult, len(pids))
	describe := func(i int) string {
		if index != nil {
			return "read ns/net, fd/, cgroup or comm of " + filepath.Join(c.o.Proc, pids[i])
		}
		return "read ns/net, cgroup or comm of " + filepath.Join(c.o.Proc, pids[i])
	}
	err = c.parallel(len(pids), describe, func(_, i int) error {
		var err error
		res[i], err = c.process(pids[i], index, needles, cands)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		for _, i := range r.mine {
			held[i] = true
		}
		if r.ref.Kind != "" {
			c.refs = append(c.refs, r.ref)
		}
	}
	if c.scanMounts {
		if err := c.mountinfoOf(pids, res); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// podCgroupNeedles are what the cgroup of a process of the pod with uid
// contains: cgroupfs driver .../kubepods/burstable/pod<uid>/<container>;
// systemd driver kubepods-burstable-pod<uid with _ for ->.slice.
func podCgroupNeedles(uid string) [][]byte {
	if uid == "" {
		return nil
	}
	needles := [][]byte{[]byte("pod" + uid)}
	if strings.Contains(uid, "-") {
		needles = append(needles, []byte("pod"+strings.ReplaceAll(uid, "-", "_")))
	}
	return needles
}

// procResult is what one process adds to a check.
type procResult struct {
	ref  Reference // Kind "" when the process is not a reference
	mine []int     // candidates it holds
	// mntNS is the inode of its mount namespace when the check reads
	// every mount namespace's mountinfo (0: not told, or not asked).
	mntNS uint64
}

// process examines process pid: whether it runs in the target netns, which
// candidate sockets (index: by inode, nil for none) it holds, and whether
// it is one of the holder pod's own processes (its cgroup contains one of
// needles), which hold sockets but are no reference.
func (c *checker) process(pid string, index map[uint64]int, needles [][]byte, cands []tcpSocket) (procResult, error) {
	var res procResult
	if c.scanMounts {
		res.mntNS = c.mountNS(pid)
	}
	inNetns, unknown, gone := c.inTargetNetns(pid)
	if gone {
		return res, nil
	}
	dir := filepath.Join(c.o.Proc, pid)
	if index != nil {
		var err error
		if res.mine, err = heldSockets(filepath.Join(dir, "fd"), index); err != nil {
			return res, err
		}
	}
	if !inNetns && len(res.mine) == 0 && unknown == nil {
		return res, nil
	}
	cg, err := readFile(filepath.Join(dir, "cgroup"), maxSmallFile)
	switch {
	case err == nil:
		if slices.ContainsFunc(needles, func(n []byte) bool { return bytes.Contains(cg, n) }) {
			return res, nil // the holder pod's own process
		}
	case isGone(err):
		return res, nil
	case isDenied(err):
	default:
		return res, err
	}
	comm, err := readFile(filepath.Join(dir, "comm"), maxSmallFile)
	if isGone(err) {
		return res, nil
	}
	if err != nil && !isDenied(err) {
		return res, err
	}
	n, _ := strconv.Atoi(pid) // digits, listed so
	ref := Reference{Kind: kindProcess, PID: n, Comm: strings.TrimSpace(string(comm)), InNetns: inNetns, Sockets: len(res.mine)}
	if unknown != nil {
		ref.Reason = "cannot tell its network namespace: " + unknown.Error()
	}
	if len(res.mine) > 0 {
		first := slices.MinFunc(res.mine, func(a, b int) int {
			return cmp.Or(cands[a].Local.Compare(cands[b].Local), cands[a].Remote.Compare(cands[b].Remote))
		})
		ref.Local, ref.Remote = cands[first].Local, cands[first].Remote
	}
	res.ref = ref
	return res, nil
}

// inTargetNetns tells whether process pid runs in the target netns (never,
// when the check has no target netns). unknown says why that cannot be
// told; gone that the process went away.
func (c *checker) inTargetNetns(pid string) (in bool, unknown error, gone bool) {
	if c.t.Ino == 0 {
		return false, nil, false
	}
	path := filepath.Join(c.o.Proc, pid, "ns", "net")
	ino, ok, err := nsLinkIno(path, "net")
	switch {
	case isGone(err):
		return false, nil, true
	case ok && ino != c.t.Ino:
		return false, nil, false // another netns: no stat needed
	}
	// The same inode, or the link did not tell: the stat decides.
	var st unix.Stat_t
	err = unix.Stat(path, &st)
	switch {
	case err == nil:
		return uint64(st.Dev) == c.t.Dev && st.Ino == c.t.Ino, nil, false
	case isGone(err):
		return false, nil, true
	}
	// The kernel may refuse even root (an LSM, PID 1 of an outer
	// container): tell the netns another way, and count the process when
	// that fails too. /proc/<pid>/net shows the files of the process's
	// netns, and each netns registers its own procfs entries, so the inode
	// number of <proc>/<pid>/net/dev names the netns (while it lives, which
	// the pinned one does); procfs shows it without the ptrace access check
	// of ns/net. It is compared with the target's (read from inside it when
	// its pin could be entered) or, failing that, with this process's own
	// netns, which is never the target.
	unknown = fmt.Errorf("stat %s: %w", path, err)
	err = unix.Stat(filepath.Join(c.o.Proc, pid, "net", "dev"), &st)
	switch {
	case isGone(err):
		return false, nil, true
	case err != nil:
		return false, unknown, false
	case c.targetNetDev != 0:
		return st.Ino == c.targetNetDev, nil, false
	}
	var own unix.Stat_t
	if err := unix.Stat(filepath.Join(c.o.Proc, "thread-self", "net", "dev"), &own); err == nil && own.Ino == st.Ino && own.Dev == st.Dev {
		return false, nil, false
	}
	return false, unknown, false
}

// heldSockets returns the indexes of the candidate sockets that the process
// pid holds, each once. Descriptors are readlink'ed ("socket:[ino]"),
// never stat'ed: stat would follow a descriptor of a file on a Ceph mount
// into the file system and hang on a dead client. A process that exits or
// that the kernel does not let us look into holds nothing we can see.
func heldSockets(fdDir string, index map[uint64]int) ([]int, error) {
	fds, err := dirNames(fdDir)
	if isGone(err) || isDenied(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []int
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd))
		if isGone(err) || isDenied(err) {
			continue // closed meanwhile, or hidden from us
		}
		if err != nil {
			return nil, err
		}
		ino, ok := linkInode(link, "socket")
		if !ok {
			continue
		}
		if i, ok := index[ino]; ok && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// linkInode parses a procfs link that names an inode, "<kind>:[<digits>]":
// a descriptor's "socket:[12345]" (net/socket.c sockfs_dname), a
// namespace's "net:[4026531840]".
func linkInode(l, kind string) (uint64, bool) {
	if d, ok := strings.CutPrefix(l, kind+":["); ok && strings.HasSuffix(d, "]") {
		n, err := strconv.ParseUint(d[:len(d)-1], 10, 64)
		return n, err == nil
	}
	return 0, false
}

func containsCephFSType(line []byte) bool { return bytes.Contains(line, []byte(" - ceph ")) }

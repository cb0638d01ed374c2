package inuse

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/smallfile"
)

// Small, allocation-free file system helpers. The check reads thousands of
// tiny sysfs, debugfs and procfs files on every holder DEL; os.ReadFile costs
// open, an epoll registration attempt, fstat, two reads and close per file,
// these helpers open (relative to an open directory, so the kernel does not
// walk the whole path again), read once and close, through smallfile.

// openDir opens a directory for getdents and *at calls.
func openDir(path string) (int, error) {
	return smallfile.Retry(func() (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) })
}

// walkDir calls fn with the name and d_type of every entry of the open
// directory fd except "." and "..". name aliases buf and is only valid
// during the call. fn returning an error stops the walk.
func walkDir(fd int, buf []byte, fn func(name []byte, typ uint8) error) error {
	for {
		n, err := smallfile.Retry(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return errors.New("getdents: malformed record")
			}
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if len(name) == 0 || (name[0] == '.' && (len(name) == 1 || (len(name) == 2 && name[1] == '.'))) {
				continue
			}
			if err := fn(name, typ); err != nil {
				return err
			}
		}
	}
}

// readAt reads the procfs, sysfs or debugfs file name (relative to dirfd)
// into buf and returns the bytes read, which alias buf until it is reused
// (smallfile's fast path: one read, no allocation, no stat).
func readAt(dirfd int, name string, buf []byte) ([]byte, error) {
	fd, err := smallfile.OpenIn(dirfd, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return smallfile.Read(fd, buf[:cap(buf)], maxSmallFile, true)
}

// maxSmallFile bounds a sysfs attribute, a debugfs status or a process's
// cgroup and comm (a page, or a few).
const maxSmallFile = 1 << 20

// maxTable bounds a file that grows with the node: a mountinfo, a TCP
// table.
const maxTable = 64 << 20

// statAt stats name relative to dirfd, following symlinks (the ns/net links
// in procfs resolve to the nsfs inode).
func statAt(dirfd int, name string, st *unix.Stat_t) error {
	_, err := smallfile.Retry(func() (int, error) { return 0, unix.Fstatat(dirfd, name, st, 0) })
	return err
}

// nsLinkIno reads the namespace inode a procfs ns link (/proc/<pid>/ns/net)
// names, "net:[4026531840]", with readlinkat: a third of the cost of the
// stat that follows it into nsfs, which matters once per process and
// check. ok is false when the link does not read that way (a fixture's
// plain file): then the caller stats. nsfs is one file system, so the
// inode alone tells namespaces apart; a match is confirmed by stat.
func nsLinkIno(dirfd int, name, kind string, buf []byte) (ino uint64, ok bool, err error) {
	n, err := smallfile.Retry(func() (int, error) { return unix.Readlinkat(dirfd, name, buf) })
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return 0, false, nil
		}
		return 0, false, err
	}
	ino, ok = linkInode(buf[:n], kind)
	return ino, ok, nil
}

// existsAt reports whether name exists relative to dirfd without following a
// final symlink. Errors other than ENOENT count as existing: callers use it to
// tell "vanished during the scan" from everything else.
func existsAt(dirfd int, name string) bool {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return !errors.Is(err, unix.ENOENT)
}

// isGone reports errors that mean the object went away while we looked:
// a process that exited (ENOENT, ESRCH) or a device that was removed
// (ENODEV from an attribute of a deleted kobject).
func isGone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV)
}

// isDenied reports permission errors. As root they still happen for
// processes the kernel or an LSM protects (here PID 1's ns links).
func isDenied(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func trimSpace(b []byte) string { return string(bytes.TrimSpace(b)) }

// workerBufs are one goroutine's buffers.
type workerBufs struct {
	buf   []byte // small files
	dents []byte // getdents of a nested directory (/proc/<pid>/fd)
}

// parallel calls fn(w, i) for every i in [0, n) from up to len(c.bufs)
// goroutines and returns the first error; w indexes the calling goroutine's
// buffers. Reading thousands of sysfs and procfs files is syscall-bound
// (microseconds each, mostly path lookup and the show callbacks), and those
// syscalls scale with CPUs. describe names item i for a timeout message.
func (c *checker) parallel(n int, describe func(i int) string, fn func(w, i int) error) error {
	// A worker takes chunk items at a time, and is started only for
	// perWorker items: in a fresh process (every CNI call is one) a
	// goroutine that needs a thread of its own costs about as much as
	// reading fifty processes' ns/net (docs/performance.md).
	const chunk, perWorker = 32, 48
	c.progress.loop(describe)
	defer c.progress.loop(nil)
	items := c.progress.items
	workers := min(len(c.bufs), n/perWorker)
	if workers <= 1 {
		for i := range n {
			items[0].Store(int64(i) + 1)
			if err := fn(0, i); err != nil {
				return err
			}
		}
		items[0].Store(0)
		return nil
	}
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error
		wg     sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			defer items[w].Store(0)
			for !failed.Load() {
				start := int(next.Add(chunk)) - chunk
				if start >= n {
					return
				}
				for i := start; i < min(start+chunk, n); i++ {
					items[w].Store(int64(i) + 1)
					if err := fn(w, i); err != nil {
						once.Do(func() { first = err })
						failed.Store(true)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return first
}

// progress records what a check is doing, for the message of a check that
// times out: a stage, and in a parallel loop the item each worker is on.
type progress struct {
	stage    atomic.Pointer[string]
	describe atomic.Pointer[func(int) string]
	items    []atomic.Int64 // per worker: index+1 of the current item, 0 idle
}

func (p *progress) set(stage string) { p.stage.Store(&stage) }

func (p *progress) loop(describe func(int) string) {
	if describe == nil {
		p.describe.Store(nil)
		return
	}
	p.describe.Store(&describe)
}

// String describes where the check is.
func (p *progress) String() string {
	if d := p.describe.Load(); d != nil {
		var busy []string
		for i := range p.items {
			if v := p.items[i].Load(); v > 0 {
				busy = append(busy, (*d)(int(v-1)))
			}
		}
		if len(busy) > 0 {
			return strings.Join(busy, "; ")
		}
	}
	if s := p.stage.Load(); s != nil {
		return *s
	}
	return "start"
}

// dirNames returns the names of the entries of the open directory fd for
// which keep returns true.
func dirNames(fd int, dents []byte, keep func(name []byte, typ uint8) bool) ([]string, error) {
	var names []string
	err := walkDir(fd, dents, func(name []byte, typ uint8) error {
		if keep(name, typ) {
			names = append(names, string(name))
		}
		return nil
	})
	return names, err
}

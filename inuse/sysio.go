package inuse

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxSmallFile bounds a sysfs attribute, a debugfs status or a process's
// cgroup and comm (a page, or a few).
const maxSmallFile = 1 << 20

// maxTable bounds a file that grows with the node: a mountinfo, a TCP
// table.
const maxTable = 64 << 20

// readFile reads the procfs, sysfs or debugfs file path whole, up to limit
// bytes: a larger file is an error, so that a runaway file cannot make the
// plugin read it into memory.
func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// dirNames returns the names in directory dir, in the order the kernel
// lists them (procfs: by pid).
func dirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// nsLinkIno reads the namespace inode a procfs ns link (/proc/<pid>/ns/net)
// names, "net:[4026531840]". Unlike a stat it does not follow the link into
// nsfs, so a process of another netns, most of them, needs nothing more.
// ok is false when the link does not read that way (a fixture's plain
// file): then the caller stats. nsfs is one file system, so the inode alone
// tells namespaces apart; a match is confirmed by stat.
func nsLinkIno(path, kind string) (ino uint64, ok bool, err error) {
	link, err := os.Readlink(path)
	if errors.Is(err, unix.EINVAL) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	ino, ok = linkInode(link, kind)
	return ino, ok, nil
}

// exists reports whether path exists, without following a final symlink.
// Errors other than ENOENT count as existing: callers use it to tell
// "vanished during the scan" from everything else.
func exists(path string) bool {
	_, err := os.Lstat(path)
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

// isID reports whether a directory entry is a pid (in procfs) or an rbd
// device id (in sysfs), not one of the named entries beside them.
func isID(name string) bool {
	_, err := strconv.ParseUint(name, 10, 32)
	return err == nil
}

// parallel calls fn(w, i) for every i in [0, n) from up to c.workers
// goroutines and returns the first error; w numbers the calling goroutine.
// Reading thousands of sysfs and procfs files is syscall-bound (mostly path
// lookup and the show callbacks), and those syscalls scale with CPUs.
// describe names item i for a timeout message.
func (c *checker) parallel(n int, describe func(i int) string, fn func(w, i int) error) error {
	// A worker takes chunk items at a time, and is started only for
	// perWorker items: in a fresh process (every CNI call is one) a
	// goroutine that needs a thread of its own costs as much as many of
	// the reads it would take over (docs/performance.md). The calling
	// goroutine is worker 0.
	const chunk, perWorker = 32, 48
	c.progress.describe.Store(&describe)
	defer c.progress.describe.Store(nil)
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error
		wg     sync.WaitGroup
	)
	work := func(w int) {
		defer c.progress.items[w].Store(0)
		for !failed.Load() {
			start := int(next.Add(chunk)) - chunk
			if start >= n {
				return
			}
			for i := start; i < min(start+chunk, n); i++ {
				c.progress.items[w].Store(int64(i) + 1)
				if err := fn(w, i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		}
	}
	for w := 1; w < min(c.workers, n/perWorker); w++ {
		wg.Go(func() { work(w) })
	}
	work(0)
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

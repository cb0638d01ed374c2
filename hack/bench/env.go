package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// env owns everything the runner makes on the host (network namespaces,
// bridges, mounts, processes, files) and undoes it, in reverse order, at the
// end, on error, on a signal and on panic. Every name starts with prefix, so
// hack/bench.sh can sweep leftovers of a runner that was killed.
type env struct {
	prefix string
	work   string // temporary folder: pinDir, stateDir, conflists, host-local
	fixt   string // fixture trees (tmpfs when available)

	mu       sync.Mutex
	cleanups []cleanup
	done     bool
}

type cleanup struct {
	what string
	fn   func() error
}

func (e *env) defer_(what string, fn func() error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, cleanup{what, fn})
}

// cleanup runs every registered undo once, newest first, then unmounts
// whatever is still mounted below the work folders (pins the plugin left,
// pinDir's bind mount onto itself) and removes the folders.
func (e *env) cleanup() {
	e.mu.Lock()
	if e.done {
		e.mu.Unlock()
		return
	}
	e.done = true
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	// Pins first: a netns pinned under pinDir survives `ip netns del`.
	for _, dir := range []string{e.work, e.fixt} {
		if n, err := unmountBelow(dir); err != nil {
			logf("cleanup: unmount below %s: %v", dir, err)
		} else if n > 0 {
			logf("cleanup: unmounted %d mount(s) below %s (pinDir bind mounts, pins of failed sections)", n, dir)
		}
	}
	for i := len(cs) - 1; i >= 0; i-- {
		if err := cs[i].fn(); err != nil {
			logf("cleanup: %s: %v", cs[i].what, err)
		}
	}
	for _, dir := range []string{e.work, e.fixt} {
		if dir == "" {
			continue
		}
		if n, _ := unmountBelow(dir); n > 0 {
			logf("cleanup: unmounted %d more mount(s) below %s", n, dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			logf("cleanup: remove %s: %v", dir, err)
		}
	}
}

// unmountBelow detaches every mount at or below dir, deepest first.
func unmountBelow(dir string) (int, error) {
	if dir == "" {
		return 0, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	// Deepest first; a path mounted several times appears several times.
	slices.SortStableFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	n := 0
	var errs []string
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			errs = append(errs, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return n, nil
}

// unescapeMountinfo undoes the octal escapes of mountinfo (\040 for space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sh runs a setup command and returns its error with its output.
func sh(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func shIn(stdin, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netns makes a named network namespace with lo up and, when cidr is not
// empty, a veth pair inside it whose end eth0 has cidr: the pin records
// the netns's global addresses, as it does for a real holder.
func (e *env) netns(name, cidr string) (string, error) {
	if err := sh("ip", "netns", "add", name); err != nil {
		return "", err
	}
	e.defer_("ip netns del "+name, func() error {
		if _, err := os.Lstat("/run/netns/" + name); os.IsNotExist(err) {
			return nil
		}
		return sh("ip", "netns", "del", name)
	})
	batch := "link set lo up\n"
	if cidr != "" {
		batch += "link add eth0 type veth peer name eth0p\n" +
			"addr add " + cidr + " dev eth0\n" +
			"link set eth0p up\n" +
			"link set eth0 up\n"
	}
	if err := shIn(batch, "ip", "-n", name, "-batch", "-"); err != nil {
		return "", err
	}
	return filepath.Join("/run/netns", name), nil
}

// bridge makes a bridge on the host for the bridge plugin (removed at the
// end; the bridge plugin would otherwise create it and leave it).
func (e *env) bridge(name string) error {
	if err := sh("ip", "link", "add", name, "type", "bridge"); err != nil {
		return err
	}
	e.defer_("ip link del "+name, func() error {
		if _, err := os.Lstat("/sys/class/net/" + name); os.IsNotExist(err) {
			return nil
		}
		return sh("ip", "link", "del", name)
	})
	return sh("ip", "link", "set", name, "up")
}

// sleepers starts n `sleep` processes (host netns) and returns a function
// that kills and reaps them. They die with the runner too (PDEATHSIG).
func (e *env) sleepers(ctx context.Context, n int) (func(), error) {
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		return nil, err
	}
	procs := make([]*os.Process, 0, n)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, p := range procs {
				_ = p.Kill()
			}
			for _, p := range procs {
				_, _ = p.Wait()
			}
		})
	}
	e.defer_(fmt.Sprintf("kill %d sleep processes", n), func() error { stop(); return nil })
	attr := &os.ProcAttr{
		Files: []*os.File{nil, nil, nil},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true},
	}
	for range n {
		if ctx.Err() != nil {
			stop()
			return nil, ctx.Err()
		}
		p, err := os.StartProcess(sleepBin, []string{"sleep", "3600"}, attr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("start sleep: %w", err)
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// countProcs is the number of processes on the host now.
func countProcs() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if c := e.Name()[0]; c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// leftoverMounts counts mounts below dir (a check after each section: the
// plugin must leave none once every holder is deleted).
func leftoverMounts(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/netns-pin/netns-pin/internal/host"
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
		if n, err := unmountUnder(dir); err != nil {
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
		if n, err := unmountUnder(dir); err != nil {
			logf("cleanup: unmount below %s: %v", dir, err)
		} else if n > 0 {
			logf("cleanup: unmounted %d more mount(s) below %s", n, dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			logf("cleanup: remove %s: %v", dir, err)
		}
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) (int, error) {
	if dir == "" {
		return 0, nil
	}
	return host.UnmountUnder(dir, nil)
}

// sh runs a setup command and returns its error with its output.
func sh(name string, args ...string) error {
	if r := host.RunCmd(host.CmdTimeout, nil, nil, name, args...); r.Err != nil {
		return fmt.Errorf("%s: %v: %s", r.Cmd, r.Err, strings.TrimSpace(r.Stdout+r.Stderr))
	}
	return nil
}

// netns makes a named network namespace (host.AddNetns) that is deleted at
// the end.
func (e *env) netns(name, cidr string) (string, error) {
	e.defer_("ip netns del "+name, func() error { return host.DelNetns(name) })
	return host.AddNetns(name, cidr)
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
func (e *env) sleepers(ctx context.Context, n int) (func() error, error) {
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		return nil, err
	}
	procs := make([]*os.Process, 0, n)
	stop := sync.OnceValue(func() error {
		var errs []error
		for _, p := range procs {
			errs = append(errs, p.Kill())
		}
		for _, p := range procs {
			_, err := p.Wait() // its exit status is the kill
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	e.defer_(fmt.Sprintf("kill %d sleep processes", n), stop)
	attr := &os.ProcAttr{
		Files: []*os.File{nil, nil, nil},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true},
	}
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, errors.Join(err, stop())
		}
		p, err := os.StartProcess(sleepBin, []string{"sleep", "3600"}, attr)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start sleep: %w", err), stop())
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

// leftoverMounts lists the mounts below dir (a check after each section:
// the plugin must leave none once every holder is deleted).
func leftoverMounts(dir string) []string {
	mps, err := host.MountsUnder(dir)
	if err != nil {
		return []string{err.Error()}
	}
	return slices.DeleteFunc(mps, func(mp string) bool { return mp == dir })
}

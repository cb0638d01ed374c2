package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/netns-pin/netns-pin/internal/host"
)

// env owns everything the runner makes on the host (network namespaces,
// bridges, mounts, processes, files) and undoes it, in reverse order, at the
// end, on error, on a signal and on panic. Every name starts with the
// runner's prefix, so hack/bench.sh can sweep leftovers of a runner that
// was killed.
type env struct {
	work  string // temporary folder: pinDir, stateDir, conflists, host-local
	fixt  string // fixture trees (tmpfs when available)
	undos []undo
}

type undo struct {
	what string
	fn   func() error
}

func (e *env) defer_(what string, fn func() error) { e.undos = append(e.undos, undo{what, fn}) }

// cleanup unmounts whatever is mounted below the work folders (pins the
// plugin left, pinDir's bind mount onto itself: a netns pinned there
// survives `ip netns del`), runs every registered undo, newest first, then
// unmounts again (an undo may have mounted) and removes the folders.
func (e *env) cleanup() {
	unmountAll := func() {
		for _, dir := range []string{e.work, e.fixt} {
			if n, err := host.UnmountUnder(dir, nil); err != nil {
				logf("cleanup: unmount below %s: %v", dir, err)
			} else if n > 0 {
				logf("cleanup: unmounted %d mount(s) below %s (pinDir bind mounts, pins of failed sections)", n, dir)
			}
		}
	}
	unmountAll()
	for _, u := range slices.Backward(e.undos) {
		if err := u.fn(); err != nil {
			logf("cleanup: %s: %v", u.what, err)
		}
	}
	e.undos = nil
	unmountAll()
	for _, dir := range []string{e.work, e.fixt} {
		if err := os.RemoveAll(dir); err != nil {
			logf("cleanup: remove %s: %v", dir, err)
		}
	}
}

// sh runs a setup command and returns its error with its output.
func sh(name string, args ...string) error {
	if r := host.RunCmd(host.CmdTimeout, nil, nil, name, args...); r.Err != nil {
		return fmt.Errorf("%s: %w: %s", r.Cmd, r.Err, strings.TrimSpace(r.Stdout+r.Stderr))
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
		if !host.LinkExists(name) {
			return nil
		}
		return sh("ip", "link", "del", name)
	})
	return sh("ip", "link", "set", name, "up")
}

// sleepers starts n `sleep` processes (host netns) and returns a function
// that kills and reaps them. They die with the runner too (PDEATHSIG).
func (e *env) sleepers(n int) (func() error, error) {
	var cmds []*exec.Cmd
	stop := sync.OnceValue(func() error {
		var errs []error
		for _, c := range cmds {
			errs = append(errs, host.Stop(c))
		}
		return errors.Join(errs...)
	})
	e.defer_(fmt.Sprintf("kill %d sleep processes", n), stop)
	for range n {
		c := exec.Command("sleep", "3600")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := c.Start(); err != nil {
			return nil, errors.Join(fmt.Errorf("start sleep: %w", err), stop())
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// countProcs is the number of processes on the host now.
func countProcs() int {
	pids, err := filepath.Glob("/proc/[0-9]*")
	if err != nil { // only for a malformed pattern
		panic(err)
	}
	return len(pids)
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

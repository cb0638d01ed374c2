package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/netns-pin/netns-pin/internal/host"
)

// env owns everything the runner makes on the host (network namespaces,
// links, mounts, files) and undoes it, newest first, at the end, on error,
// on a signal and on panic. Every name starts with the runner's prefix, so
// hack/bench.sh can sweep what a killed runner left.
type env struct {
	work, fixt string // temporary folders: pins, records, conflists; fixture trees
	undos      []undo
}

type undo struct {
	what string
	fn   func() error
}

func (e *env) defer_(what string, fn func() error) { e.undos = append(e.undos, undo{what, fn}) }

// cleanup unmounts whatever is mounted below the work folders (pins of a
// failed run: a netns pinned there survives `ip netns del`), runs every
// undo, newest first, and removes the folders.
func (e *env) cleanup() {
	for _, dir := range []string{e.work, e.fixt} {
		if _, err := host.UnmountUnder(dir, nil); err != nil {
			logf("cleanup: unmount below %s: %v", dir, err)
		}
	}
	for _, u := range slices.Backward(e.undos) {
		if err := u.fn(); err != nil {
			logf("cleanup: %s: %v", u.what, err)
		}
	}
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

// netns makes a named network namespace (host.AddNetns: lo up and, when
// cidr is not "", eth0 with that address) that is deleted at the end.
func (e *env) netns(name, cidr string) (string, error) {
	e.defer_("ip netns del "+name, func() error { return host.DelNetns(name) })
	return host.AddNetns(name, cidr)
}

// link makes a link on the host (`ip link add name type kind...`), up,
// deleted at the end.
func (e *env) link(name string, kind ...string) error {
	if err := sh("ip", append([]string{"link", "add", name, "type"}, kind...)...); err != nil {
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

package model

// The step set. Every verb, command and state of the plugin joins this one
// table: a step checks its own preconditions (returning false when it does
// not apply), acts on the host through the real binary or the kernel, says
// what it did in the step log and updates the model.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

type stepDef struct {
	name   string
	weight int
	run    func(d *driver) bool
}

const (
	maxAlive   = 10 // holders the runtime knows at once
	maxClients = 10
)

var stepTable = []stepDef{
	{"add", 6, func(d *driver) bool {
		if len(d.alive()) >= maxAlive {
			return false
		}
		d.add(d.newHolder(), "")
		return true
	}},
	{"add-retry", 2, func(d *driver) bool {
		hs := d.filter(func(h *holder) bool { return h.rt == rtRunning || h.rt == rtAdding })
		if len(hs) == 0 {
			return false
		}
		d.add(pick(d, hs), "")
		return true
	}},
	{"del", 6, func(d *driver) bool {
		hs := d.alive()
		if len(hs) == 0 {
			return false
		}
		d.del(pick(d, hs), "")
		return true
	}},
	{"gc", 3, func(d *driver) bool { d.gc(""); return true }},
	{"check", 2, func(d *driver) bool {
		hs := d.filter(func(h *holder) bool { return h.rt == rtRunning })
		if len(hs) == 0 {
			return false
		}
		d.check(pick(d, hs))
		return true
	}},
	{"status", 1, func(d *driver) bool {
		r := d.e.cni(cniCall{verb: "STATUS"}, "")
		d.logf("STATUS -> %s", r)
		d.count("I5")
		if r.rc != 0 || r.killed {
			d.violation("I5", "STATUS failed: %s", r)
		}
		return true
	}},
	{"add-nonholder", 1, func(d *driver) bool {
		hs := d.alive()
		if len(hs) == 0 {
			return false
		}
		h := pick(d, hs)
		before := d.snapshot()
		c := cniCall{verb: "ADD", containerID: fmt.Sprintf("app%d", d.step), netnsPath: h.netnsPath,
			podNS: clusterNamespaces[h.cluster], podName: fmt.Sprintf("app-%d", d.step), podUID: uid(d), prevIPs: h.ips}
		r := d.e.cni(c, "")
		c.verb = "DEL"
		r2 := d.e.cni(c, "")
		d.logf("ADD, DEL of a pod that is no holder (%s/%s) in the netns of %s -> %s, %s", c.podNS, c.podName, h, r, r2)
		d.count("I4")
		if r.rc != 0 || r2.rc != 0 || r.killed || r2.killed {
			d.violation("I4", "a pod that is no holder must pass through: ADD %s, DEL %s", r, r2)
		}
		if after := d.snapshot(); after != before {
			d.violation("I4", "a pod that is no holder changed the store:%s", before.diff(after))
		}
		return true
	}},
	{"claim-foreign", 1, func(d *driver) bool { d.claimForeign(); return true }},
	{"cli-list", 1, func(d *driver) bool {
		before := d.snapshot()
		r := d.e.cli(d.e.pinDir, "", "--json", "list")
		after := d.snapshot()
		d.logf("netns-pinctl list -> %s", r)
		// list only looks: what needs settling is shown, not settled.
		d.count("I4")
		if after != before {
			d.violation("I4", "netns-pinctl list changed the store:%s", before.diff(after))
			d.crashedAll() // only when the violation is ignored: let repair decide
		}
		if d.noStore(r) {
			return true
		}
		d.count("I5")
		if r.rc != 0 || r.killed {
			d.violation("I5", "list failed: %s", r)
		}
		return true
	}},
	{"cli-inuse", 2, func(d *driver) bool {
		hs := d.filter(func(h *holder) bool { return h.pin != pinNone || h.uncertain })
		if len(hs) == 0 {
			return false
		}
		d.cliInUse(pick(d, hs))
		return true
	}},
	{"cli-gc", 2, func(d *driver) bool { d.cliGC(""); return true }},
	{"cli-release", 2, func(d *driver) bool {
		hs := d.filter(func(h *holder) bool { return h.pin != pinNone || h.uncertain })
		if len(hs) == 0 {
			return false
		}
		d.cliRelease(pick(d, hs), "")
		return true
	}},
	{"cli-release-force", 1, func(d *driver) bool {
		hs := d.filter(func(h *holder) bool { return h.pin != pinNone && !h.uncertain })
		if len(hs) == 0 {
			return false
		}
		d.cliForceRelease(pick(d, hs))
		return true
	}},
	{"cli-gc-dry-run", 1, func(d *driver) bool { d.cliGCDryRun(); return true }},
	{"cli-uninstall", 1, func(d *driver) bool { d.cliUninstall(); return true }},
	{"cli-wrong-pindir", 1, func(d *driver) bool { d.cliWrongDir("--pin-dir"); return true }},
	{"cli-wrong-statedir", 1, func(d *driver) bool { d.cliWrongDir("--state-dir"); return true }},
	{"record-unreadable", 1, func(d *driver) bool { return d.recordUnreadable() }},
	{"del-moved-config", 1, func(d *driver) bool { return d.delMovedConfig() }},
	{"orphan-release", 1, func(d *driver) bool { return d.orphanRelease() }},
	{"cli-blind-roots", 1, func(d *driver) bool {
		// The operator's --sysfs and --debugfs lead to an empty folder:
		// release and gc must still decide as the pins' own settings do.
		d.e.blindRoots = d.t.TempDir()
		defer func() { d.e.blindRoots = "" }()
		d.logf("the next command runs with --sysfs and --debugfs at an empty folder")
		if hs := d.filter(func(h *holder) bool { return h.pin != pinNone || h.uncertain }); len(hs) > 0 && d.rng.IntN(2) == 0 {
			d.cliRelease(pick(d, hs), "")
		} else {
			d.cliGC("")
		}
		return true
	}},
	{"proc-enter", 5, func(d *driver) bool {
		if len(d.clients) >= maxClients {
			return false
		}
		link := d.clientPath(d.rng.IntN(len(clusterNamespaces)))
		if link == "" {
			return false
		}
		p := startProc(d.t, link)
		if p == nil {
			d.logf("nsenter --net=%s: no netns there", link)
			return true
		}
		id, err := host.NSIDOf(p.netnsPath())
		h := d.holderByNetns(id)
		if err != nil || h == nil {
			p.stop()
			d.logf("nsenter --net=%s entered %v (err %v)", link, id, err)
			d.violation("I2", "link %s led to a netns no holder has: %v", link, id)
			return true
		}
		d.nextC++
		c := &client{id: d.nextC, kind: "proc", h: h, p: p}
		d.clients = append(d.clients, c)
		d.logf("nsenter --net=%s sleep: %s", link, c)
		return true
	}},
	{"proc-leave", 4, func(d *driver) bool { return d.clientLeaves("proc") }},
	{"rbd-map", 4, func(d *driver) bool { return d.kernelClient("rbd") }},
	{"rbd-unmap", 3, func(d *driver) bool { return d.clientLeaves("rbd") }},
	{"cephfs-mount", 3, func(d *driver) bool { return d.kernelClient("cephfs") }},
	{"cephfs-umount", 3, func(d *driver) bool { return d.clientLeaves("cephfs") }},
	{"addr-add", 2, func(d *driver) bool {
		hs := d.filter(func(h *holder) bool { return h.rt != rtGone && len(h.ips) < 4 })
		if len(hs) == 0 {
			return false
		}
		h := pick(d, hs)
		ip := d.newIP()
		require.NoError(d.t, withNetlink(h.netnsPath, func(nh *netlinkHandle) error { return addrChange(nh, ip, true) }))
		h.ips = append(h.ips, ip)
		d.logf("ip addr add %s dev %s in %s", ip, ifName, h)
		return true
	}},
	{"addr-del", 2, func(d *driver) bool {
		// An address a Ceph kernel client uses goes only if the record
		// has it from ADD: the plugin cannot know of an address that came
		// and went between two of its runs.
		type cand struct {
			h  *holder
			ip string
		}
		var cs []cand
		for _, h := range d.alive() {
			for _, ip := range h.ips {
				used := slices.ContainsFunc(d.clients, func(c *client) bool { return c.h == h && c.ip == ip })
				if !used || slices.Contains(h.addIPs, ip) {
					cs = append(cs, cand{h, ip})
				}
			}
		}
		if len(cs) == 0 {
			return false
		}
		c := pick(d, cs)
		require.NoError(d.t, withNetlink(c.h.netnsPath, func(nh *netlinkHandle) error { return addrChange(nh, c.ip, false) }))
		c.h.ips = slices.DeleteFunc(c.h.ips, func(s string) bool { return s == c.ip })
		d.logf("ip addr del %s dev %s in %s", c.ip, ifName, c.h)
		return true
	}},
	{"runtime-forgets", 1, func(d *driver) bool {
		// CRI-O 1.32+ after a failed DEL: removes its netns file, marks
		// the network stopped and never retries; only GC and the
		// operator's gc can release the pin now.
		hs := d.filter(func(h *holder) bool { return h.rt == rtDeleting })
		if len(hs) == 0 {
			return false
		}
		h := pick(d, hs)
		hosttest.MustRun(d.t, "ip", "netns", "del", h.netnsName)
		h.rt = rtGone
		d.logf("the runtime forgets %s: its netns file is removed, DEL is not retried", h)
		return true
	}},
	{"umount-pin", 1, func(d *driver) bool {
		// Any pin: what still holds its netns (the runtime's file, a
		// process, a kernel client) keeps it alive.
		mounts := d.mounts()
		hs := d.filter(func(h *holder) bool { return mounts.pinned(d.e.pinPath(h.att), h.nsid) })
		if len(hs) == 0 {
			return false
		}
		h := pick(d, hs)
		unmountAll(d.t, d.e.pinPath(h.att))
		h.unmounted, h.uncertain, h.allowed = true, true, nil
		d.dirty = true
		d.logf("umount -l %s (%s, in use by %v)", d.e.pinPath(h.att), h, d.users(h))
		return true
	}},
	{"sweep", 2, func(d *driver) bool { d.sweep(""); return true }},
	{"crash", 3, func(d *driver) bool {
		// A failpoint named add-* is reached by ADD, del-* by a release
		// (DEL, GC, the operator's gc and release); others by anything.
		fp := pick(d, d.fps)
		ops := []int{0, 1, 2, 3, 4, 5, 6}
		switch {
		case strings.HasPrefix(fp, "add-"):
			ops = []int{0, 1}
		case strings.HasPrefix(fp, "del-"):
			ops = []int{2, 3, 4, 5, 6}
		case strings.HasPrefix(fp, "sweep-"):
			ops = []int{6}
		}
		hasRetry := d.filter(func(h *holder) bool { return h.rt == rtRunning || h.rt == rtAdding })
		hasPin := d.filter(func(h *holder) bool { return h.pin != pinNone || h.uncertain })
		switch op := pick(d, ops); {
		case op == 0 && len(d.alive()) < maxAlive:
			d.add(d.newHolder(), fp)
		case op == 1 && len(hasRetry) > 0:
			d.add(pick(d, hasRetry), fp)
		case op == 2 && len(d.alive()) > 0:
			d.del(pick(d, d.alive()), fp)
		case op == 3:
			d.gc(fp)
		case op == 4:
			d.cliGC(fp)
		case op == 5 && len(hasPin) > 0:
			d.cliRelease(pick(d, hasPin), fp)
		case op == 6:
			d.sweep(fp)
		default:
			return false
		}
		return true
	}},
	{"reboot", 1, func(d *driver) bool {
		if d.rng.IntN(3) != 0 { // rarer than the others
			return false
		}
		d.reboot()
		return true
	}},
	{"drain-all", 1, func(d *driver) bool {
		if d.rng.IntN(2) != 0 {
			return false
		}
		d.drainAll()
		return true
	}},
}

func uid(d *driver) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", d.rng.Uint32(), d.rng.IntN(1<<16), d.rng.IntN(1<<12), d.rng.IntN(1<<12), d.rng.Uint64()&(1<<48-1))
}

// newHolder makes a holder pod's netns with its interface and address;
// one in five claims its cluster with args.cni.pinCluster instead of
// matching a holders rule.
func (d *driver) newHolder() *holder {
	d.nextH++
	cl := d.rng.IntN(len(clusterNamespaces))
	h := &holder{id: d.nextH, cluster: cl, podNS: clusterNamespaces[cl], podUID: uid(d), rt: rtAdding, pin: pinNone}
	h.podName = fmt.Sprintf("holder-%d", h.id)
	if d.rng.IntN(5) == 0 {
		h.podName, h.claim = fmt.Sprintf("claimer-%d", h.id), clusterOf(cl)
	}
	h.cid = fmt.Sprintf("h%d", h.id)
	h.att = h.cid + "." + ifName
	h.netnsName = fmt.Sprintf("npm-%s-%d", d.e.runID, h.id)
	h.netnsPath = filepath.Join("/run/netns", h.netnsName)
	h.ips = []string{d.newIP()}
	d.holders = append(d.holders, h)
	h.nsid = d.e.makeNetns(h.netnsName, h.ips)
	return h
}

// add runs ADD for h, with a failpoint armed when fp is set.
func (d *driver) add(h *holder, fp string) {
	prev, wasUncertain := h.pin, h.uncertain
	r := d.e.cni(h.call("ADD"), fp)
	again := ""
	if h.rt != rtAdding || prev != pinNone || wasUncertain {
		again = " again"
	}
	d.logf("ADD%s %s%s -> %s", again, h, fpNote(fp), r)
	if r.killed {
		h.rt = rtAdding
		h.uncertain, h.allowed = true, nil
		if prev == pinNone || wasUncertain {
			// Whatever record comes of it is not the one the model saw
			// made: no address is known to be recorded.
			h.addIPs = nil
		}
		d.dirty = true
		return
	}
	d.count("I5")
	if r.rc != 0 {
		d.violation("I5", "ADD of holder %s failed: %s", h, r)
		return
	}
	d.repaired = true
	h.rt = rtRunning
	switch {
	case wasUncertain:
		h.allowed = []pinState{pinActive, pinDraining}
	case prev == pinUnpinned:
		h.pin = pinDraining // pinned again from the runtime's netns
	case prev == pinNone:
		h.pin = pinActive
		h.addIPs = slices.Clone(h.ips)
	}
}

func fpNote(fp string) string {
	if fp == "" {
		return ""
	}
	return " [failpoint " + fp + "]"
}

// del runs DEL for h; on success the chain's earlier plugins and the
// runtime tear the netns down.
func (d *driver) del(h *holder, fp string) {
	_, err := os.Lstat(d.e.recordPath(h.att))
	hadRecord := err == nil
	inUse := d.inUse(h)
	d.e.writeCacheEntry(h.cid, h.podNS, h.podName, h.podUID, h.netnsPath, h.ips)
	r := d.e.cni(h.call("DEL"), fp)
	d.logf("DEL %s%s (in use by %v) -> %s", h, fpNote(fp), d.users(h), r)
	if r.killed {
		h.rt = rtDeleting
		h.uncertain, h.allowed = true, nil
		d.dirty = true
		return
	}
	d.repaired = hadRecord
	d.count("I5")
	switch {
	case r.rc == 0:
		// Released, or nothing was pinned: the chain goes on with its
		// DEL. If a client still uses the netns, I1 sees it next.
		h.rt, h.pin, h.uncertain, h.allowed, h.unmounted = rtGone, pinNone, false, nil, false
		d.e.tearDownNetns(h.netnsName)
	case r.code == 11 && inUse && (h.pin == pinUnpinned || h.unmounted):
		// Kept: pinned again from CNI_NETNS or a process inside it,
		// else unpinned.
		h.rt, h.uncertain, h.allowed = rtDeleting, true, []pinState{pinDraining, pinUnpinned}
	case r.code == 11 && inUse:
		h.rt, h.pin, h.uncertain, h.allowed, h.unmounted = rtDeleting, pinDraining, false, nil, false
	case r.code == 11:
		h.rt = rtDeleting
		d.violation("I5", "DEL of %s refused although nothing uses its netns: %s", h, r)
	default:
		h.rt = rtDeleting
		d.violation("I5", "DEL of %s failed with something else than code 11: %s", h, r)
	}
}

// gc runs CNI GC with the attachments the runtime knows: running and
// adding holders, and half of the deleting ones (CRI-O forgets them).
func (d *driver) gc(fp string) {
	var valid []map[string]any
	var names []string
	stale := map[*holder]bool{}
	for _, h := range d.holders {
		if h.rt == rtRunning || h.rt == rtAdding || (h.rt == rtDeleting && d.rng.IntN(2) == 0) {
			valid = append(valid, map[string]any{"containerID": h.cid, "ifname": ifName})
			names = append(names, fmt.Sprintf("h%d", h.id))
		} else {
			stale[h] = true
		}
	}
	// The plugin leaves a teardown its runtime abandoned to the sweeper
	// and netns-pinctl, which run the chain's DEL first: GC keeps it.
	recs := d.records()
	r := d.e.cni(cniCall{verb: "GC", valid: valid}, fp)
	d.logf("GC valid=%v%s -> %s", names, fpNote(fp), r)
	if r.killed {
		d.crashedAll()
		return
	}
	d.count("I5")
	if r.rc != 0 {
		d.violation("I5", "GC failed: %s", r)
		return
	}
	d.repaired = true
	for h := range stale {
		if recs[h.att].Abandoned && h.pin == pinDraining && !h.uncertain {
			continue
		}
		d.collected(h)
	}
}

// collected: h went through a release attempt that is not DEL (GC, the
// operator's gc): kept while in use, released otherwise.
func (d *driver) collected(h *holder) {
	if h.uncertain {
		return // the observation after the step decides
	}
	if h.pin == pinNone {
		return
	}
	switch {
	case !d.inUse(h):
		h.pin = pinNone
	case h.pin == pinUnpinned:
		// Kept; pinned again if a process inside it leads to it.
		h.uncertain, h.allowed = true, []pinState{pinDraining, pinUnpinned}
	default:
		h.pin = pinDraining
	}
}

// crashedAll: an operation that may touch every record was killed.
func (d *driver) crashedAll() {
	for _, h := range d.holders {
		if h.pin != pinNone || h.uncertain {
			h.uncertain, h.allowed = true, nil
		}
	}
	d.dirty = true
}

func (d *driver) check(h *holder) {
	r := d.e.cni(h.call("CHECK"), "")
	d.logf("CHECK %s -> %s", h, r)
	if d.dirty || h.uncertain {
		return
	}
	d.count("I5")
	switch {
	case r.killed:
		d.violation("I5", "CHECK killed without a failpoint")
	case h.pin == pinNone && r.rc == 0:
		d.violation("I5", "CHECK of %s passed, but it has no pin", h)
	case h.pin != pinNone && r.rc != 0:
		d.violation("I5", "CHECK of %s (%s) failed: %s", h, h.pin, r)
	}
}

func (d *driver) cliGC(fp string) {
	// What gc must report as the last word on each held holder the model
	// is sure of, whether repair or the collection settled it.
	want := map[string]string{}
	for _, h := range d.holders {
		if (h.pin == pinDraining || h.pin == pinUnpinned) && !h.uncertain {
			want[h.att] = map[bool]string{true: "keep", false: "release"}[d.inUse(h)]
		}
	}
	r := d.collectAll(fp, []string{"--json", "gc"}, func(*holder) bool { return true })
	if r.killed || r.rc != 0 || d.noStore(r) {
		return
	}
	var findings []struct{ Attachment, Action string }
	if err := json.Unmarshal([]byte(r.stdout), &findings); err != nil {
		d.violation("I5", "netns-pinctl gc --json printed no findings: %v: %s", err, r)
		return
	}
	got := map[string]string{}
	for _, f := range findings {
		got[f.Attachment] = f.Action
	}
	for att, action := range want {
		if got[att] != action {
			d.violation("I5", "netns-pinctl gc reports %q for %s, want %q: %s", got[att], att, action, r)
		}
	}
}

// collectAll runs an operator command that settles every held record that
// selects (gc: all; sweep: those the runtime forgot) and updates the model.
func (d *driver) collectAll(fp string, argv []string, selects func(*holder) bool) result {
	r := d.e.cli(d.e.pinDir, fp, argv...)
	d.logf("netns-pinctl %s%s -> %s", strings.Join(argv, " "), fpNote(fp), r)
	if d.noStore(r) {
		return r
	}
	if r.killed {
		d.crashedAll()
		return r
	}
	d.count("I5")
	if r.rc != 0 {
		d.violation("I5", "netns-pinctl %s failed: %s", strings.Join(argv, " "), r)
		return r
	}
	d.repaired, d.ctlRepaired = true, true
	for _, h := range d.holders {
		if (h.pin == pinDraining || h.pin == pinUnpinned) && !h.uncertain && selects(h) {
			d.collected(h)
		}
	}
	return r
}

// sweep runs one round of the node sweeper (`netns-pinctl sweep --once`): a
// holder the runtime forgot (its netns file is gone) is released once
// nothing uses it; everything else is left to the runtime and to GC.
// Before the first pin there is no stateDir: the sweeper waits, and
// succeeds.
func (d *driver) sweep(fp string) {
	if _, err := os.Stat(d.e.stateDir); err != nil {
		r := d.e.cli(d.e.pinDir, fp, "sweep", "--once")
		d.logf("netns-pinctl sweep --once (nothing pinned yet) -> %s", r)
		d.count("I5")
		if r.rc != 0 && !r.killed {
			d.violation("I5", "netns-pinctl sweep --once failed: %s", r)
		}
		return
	}
	d.collectAll(fp, []string{"sweep", "--once"}, func(h *holder) bool { return h.rt == rtGone })
}

// cliRelease runs `netns-pinctl release <attachment>` without --force: it
// must refuse while the netns is in use and release it otherwise.
func (d *driver) cliRelease(h *holder, fp string) {
	prev := h.pin
	r := d.e.cli(d.e.pinDir, fp, "release", h.att)
	d.logf("netns-pinctl release %s (%s, in use by %v)%s -> %s", h.att, h, d.users(h), fpNote(fp), r)
	if d.noStore(r) {
		return
	}
	if r.killed {
		h.uncertain, h.allowed = true, nil
		d.dirty = true
		return
	}
	d.repaired, d.ctlRepaired = true, true
	d.count("I5")
	switch {
	case h.uncertain:
		// The observation after the step decides.
	case r.rc == 0:
		h.pin = pinNone
	case d.inUse(h):
		// Refused; it may have been marked draining as a DEL would.
		h.uncertain, h.allowed = true, []pinState{prev, pinDraining, pinUnpinned}
	case prev != pinNone:
		d.violation("I5", "release of %s refused although nothing uses it: %s", h, r)
	}
}

// cliForceRelease runs `netns-pinctl release <attachment> --force`, the
// operator's override: the pin goes even while clients use it, so the
// model lets go of those clients too (the operator chose to cut them).
// The links still move off first (I2) and nothing else changes.
func (d *driver) cliForceRelease(h *holder) {
	r := d.e.cli(d.e.pinDir, "", "release", h.att, "--force")
	d.logf("netns-pinctl release %s --force (%s, in use by %v) -> %s", h.att, h, d.users(h), r)
	if d.noStore(r) {
		return
	}
	d.repaired, d.ctlRepaired = true, true
	d.count("I5")
	if r.rc != 0 {
		d.violation("I5", "release --force of %s failed: %s", h, r)
		return
	}
	h.pin = pinNone
	for _, c := range slices.Clone(d.clients) {
		if c.h == h {
			d.stopClient(c)
		}
	}
}

// cliGCDryRun runs `netns-pinctl gc --dry-run`: it says what gc would do and
// changes nothing (I4), whatever state a crash left.
func (d *driver) cliGCDryRun() {
	before := d.snapshot()
	r := d.e.cli(d.e.pinDir, "", "gc", "--dry-run")
	d.logf("netns-pinctl gc --dry-run -> %s", r)
	d.count("I4")
	if after := d.snapshot(); after != before {
		d.violation("I4", "netns-pinctl gc --dry-run changed the store:%s", before.diff(after))
		d.crashedAll() // only when the violation is ignored: let repair decide
	}
	if d.noStore(r) {
		return
	}
	if r.rc != 0 {
		d.violation("I5", "netns-pinctl gc --dry-run failed: %s", r)
	}
}

// cliUninstall runs `netns-pinctl uninstall` against a scratch CNI bin
// folder: while anything is pinned it refuses (exit 1) and changes
// nothing, its binary included (I4); with nothing pinned it runs with
// --dry-run, which changes nothing either (the model keeps its folders).
func (d *driver) cliUninstall() {
	binDir := filepath.Join(d.e.work, "uninstall-bin")
	require.NoError(d.t, os.MkdirAll(binDir, 0o755))
	require.NoError(d.t, os.WriteFile(filepath.Join(binDir, "netns-pin"), []byte("netns-pin"), 0o755))
	args := []string{"uninstall", "--cni-bin-dir", binDir, "--cache-dir", filepath.Join(d.e.work, "no-cni-cache")}
	pinned := len(d.filter(func(h *holder) bool { return h.pin != pinNone || h.uncertain })) > 0
	if !pinned {
		args = append(args, "--dry-run")
	}
	before := d.snapshot()
	r := d.e.cli(d.e.pinDir, "", args...)
	d.logf("netns-pin %s (pinned: %v) -> %s", strings.Join(args, " "), pinned, r)
	d.count("I4")
	if after := d.snapshot(); after != before {
		d.violation("I4", "netns-pin %s changed the store:%s", strings.Join(args, " "), before.diff(after))
		d.crashedAll()
	}
	if _, err := os.Stat(filepath.Join(binDir, "netns-pin")); err != nil {
		d.violation("I4", "netns-pin %s removed the binary: %v (%s)", strings.Join(args, " "), err, r)
	}
	if pinned && (r.rc != 1 || !strings.Contains(r.stdout, "remains: ")) {
		d.violation("I4", "netns-pinctl uninstall with pins did not refuse naming them: %s", r)
	}
}

// cliInUse runs `netns-pinctl inuse <attachment>`: it must report references
// exactly when the model has clients on the netns.
func (d *driver) cliInUse(h *holder) {
	before := d.snapshot()
	r := d.e.cli(d.e.pinDir, "", "--json", "inuse", h.att)
	after := d.snapshot()
	d.logf("netns-pinctl inuse %s (%s, in use by %v) -> %s", h.att, h, d.users(h), r)
	// inuse only looks, as list does.
	d.count("I4")
	if after != before {
		d.violation("I4", "netns-pinctl inuse changed the store:%s", before.diff(after))
		d.crashedAll() // only when the violation is ignored: let repair decide
	}
	if d.noStore(r) {
		return
	}
	if r.rc != 0 || r.killed {
		return // no record: I1 and I2 judge whether that is right
	}
	var reports []struct {
		References []json.RawMessage `json:"references"`
	}
	require.NoError(d.t, json.Unmarshal([]byte(r.stdout), &reports), "inuse --json printed %q", r.stdout)
	d.count("I5")
	if len(reports) != 1 {
		d.violation("I5", "inuse %s: want one report, got %s", h.att, r.stdout)
		return
	}
	if got, want := len(reports[0].References) > 0, d.inUse(h); got != want {
		d.violation("I5", "inuse %s says in use=%v, but the clients are %v: %s", h.att, got, d.users(h), strings.TrimSpace(r.stdout))
	}
}

// cliWrongDir runs an operator command with a wrong --pin-dir (the records
// name theirs) or a wrong --state-dir (pinDir names its own): once anything
// is pinned it must fail, and whatever it does it changes nothing.
func (d *driver) cliWrongDir(flag string) {
	cmds := [][]string{{"list"}, {"gc"}, {"gc", "--dry-run"}, {"inuse", clusterOf(0)}}
	if hs := d.filter(func(h *holder) bool { return h.pin != pinNone }); len(hs) > 0 {
		h := pick(d, hs)
		cmds = append(cmds, []string{"inuse", h.att}, []string{"release", h.att}, []string{"release", h.att, "--force"})
	}
	cmd := pick(d, cmds)
	pinDir, stateDir, wrong := d.e.pinDir, d.e.stateDir, d.e.wrongPinDir
	if flag == "--state-dir" {
		stateDir, wrong = d.e.wrongStateDir, d.e.wrongStateDir
	} else {
		pinDir = wrong
	}
	before := d.snapshot()
	r := d.e.cliAt(pinDir, stateDir, "", cmd...)
	d.logf("netns-pin %s %s %s -> %s", flag, wrong, strings.Join(cmd, " "), r)
	d.count("I4")
	after := d.snapshot()
	if before.records != "" && r.rc == 0 {
		d.violation("I4", "netns-pin %s with a wrong %s succeeded: %s", strings.Join(cmd, " "), flag, strings.TrimSpace(r.stdout))
	}
	if after != before {
		d.violation("I4", "netns-pin %s with a wrong %s changed the store:%s", strings.Join(cmd, " "), flag, before.diff(after))
		d.crashedAll() // only when the violation is ignored: let repair decide
	}
}

// recordUnreadable: one holder's record cannot be used for a while (torn
// by a power loss, or written by a newer netns-pin before a downgrade).
// Meanwhile GC with no valid attachment, the operator's gc and release of
// another holder, and a sweep round may fail but must not unmount, unpin,
// unlink or re-link anything: the unreadable record may be any cluster's
// newest pin, and its clients are unknown. The file is then put back and
// everything goes on as the model says.
func (d *driver) recordUnreadable() bool {
	if d.dirty {
		return false // a pending repair may rightly pin again meanwhile
	}
	hs := d.filter(func(h *holder) bool { return h.pin != pinNone && !h.uncertain && !h.unmounted })
	if len(hs) == 0 {
		return false
	}
	h := pick(d, hs)
	path := d.e.recordPath(h.att)
	saved, err := os.ReadFile(path)
	require.NoError(d.t, err)
	bad := pick(d, []string{string(saved[:len(saved)/2]), `{"format": 99, "writer": "netns-pin 9.0.0", "attachment": "` + h.att + `"}`})
	require.NoError(d.t, os.WriteFile(path, []byte(bad), 0o600))
	d.logf("the record of %s is made unreadable: %.40q...", h, bad)
	defer func() {
		require.NoError(d.t, os.WriteFile(path, saved, 0o600))
		d.logf("the record of %s is put back", h)
	}()
	ops := []func() (string, result){
		func() (string, result) { return "GC, nothing valid", d.e.cni(cniCall{verb: "GC"}, "") },
		func() (string, result) { return "netns-pinctl gc", d.e.cli(d.e.pinDir, "", "gc") },
		func() (string, result) {
			return "netns-pinctl sweep --once", d.e.cli(d.e.pinDir, "", "sweep", "--once")
		},
	}
	if others := d.filter(func(o *holder) bool { return o != h && o.pin != pinNone }); len(others) > 0 {
		o := pick(d, others)
		ops = append(ops, func() (string, result) {
			return "netns-pinctl release " + o.att, d.e.cli(d.e.pinDir, "", "release", o.att)
		})
	}
	for _, op := range ops {
		before := d.snapshot()
		what, r := op()
		d.logf("%s, with the record of %s unreadable -> %s", what, h, r)
		d.count("I4")
		after := d.snapshot()
		before.records, after.records = "", "" // a sweep may mark records abandoned
		if after != before {
			d.violation("I4", "%s changed pins or links while the record of %s was unreadable:%s", what, h, before.diff(after))
			d.crashedAll() // only when the violation is ignored: let repair decide
		}
	}
	return true
}

// delMovedConfig: the network's stateDir, or its pinDir and stateDir, were
// changed since a holder was pinned, and the runtime's DEL of that holder
// comes with the new configuration. It finds no record, but the pin is
// there: it must refuse (code 11) and change nothing, in use or not. (The
// operator then puts the configuration back; the runtime's next DEL is the
// model's del step.)
func (d *driver) delMovedConfig() bool {
	mounts := d.mounts()
	hs := d.filter(func(h *holder) bool {
		return h.pin != pinNone && !h.uncertain && !h.unmounted && mounts.pinned(d.e.pinPath(h.att), h.nsid)
	})
	if len(hs) == 0 {
		return false
	}
	h := pick(d, hs)
	c := h.call("DEL")
	if c.entry == nil {
		c.entry = map[string]any{}
	}
	c.entry["stateDir"] = d.e.wrongStateDir
	what := "stateDir"
	if d.rng.IntN(2) == 0 {
		c.entry["pinDir"], what = d.e.wrongPinDir, "pinDir and stateDir"
	}
	before := d.snapshot()
	r := d.e.cni(c, "")
	d.logf("DEL %s with the network's %s moved (in use by %v) -> %s", h, what, d.users(h), r)
	d.count("I4")
	if r.rc == 0 || r.code != 11 {
		d.violation("I4", "DEL of pinned %s with the %s moved was not refused with code 11: %s", h, what, r)
	}
	if after := d.snapshot(); after != before {
		d.violation("I4", "DEL of %s with the %s moved changed the store:%s", h, what, before.diff(after))
		d.crashedAll() // only when the violation is ignored: let repair decide
	}
	return true
}

// orphanRelease: a pin without a record (its record removed by hand; in
// half the runs in a pinDir that names no owner, as one made by an earlier
// version leaves it), used by a process or not, and the operator's
// `release <name>`, with --force or not. Without --force it must stay
// while the process uses it and go otherwise (repair may release it first
// when pinDir names this stateDir); with --force it goes. Then the process
// leaves and a release lets it go in any case.
func (d *driver) orphanRelease() bool {
	if _, err := os.Stat(d.e.stateDir); err != nil {
		return false // nothing pinned yet: the command line creates nothing
	}
	name := fmt.Sprintf("o%d.%s", d.step, ifName)
	nsName := fmt.Sprintf("npm-%s-o%d", d.e.runID, d.step)
	id := d.e.makeNetns(nsName, []string{d.newIP()})
	defer d.e.tearDownNetns(nsName)
	pin := d.e.pinPath(name)
	require.NoError(d.t, os.WriteFile(pin, nil, 0o444))
	hosttest.MustRun(d.t, "mount", "--bind", filepath.Join("/run/netns", nsName), pin)
	owner := filepath.Join(d.e.pinDir, ".netns-pin-state-dir")
	if saved, err := os.ReadFile(owner); err == nil && d.rng.IntN(2) == 0 {
		require.NoError(d.t, os.Remove(owner))
		defer func() { require.NoError(d.t, os.WriteFile(owner, saved, 0o644)) }()
	}
	var p *proc
	if d.rng.IntN(2) == 0 {
		p = startProc(d.t, pin)
	}
	args := []string{"release", name}
	if d.rng.IntN(3) == 0 {
		args = append(args, "--force")
	}
	r := d.e.cli(d.e.pinDir, "", args...)
	d.repaired, d.ctlRepaired = true, true // the command's repair settles unpinned records too
	_, ownerErr := os.Stat(owner)
	d.logf("pin %s without a record (pinDir owned: %v, used by a process: %v), netns-pin %s -> %s", name, ownerErr == nil, p != nil, strings.Join(args, " "), r)
	d.count("I5")
	kept := d.mounts().pinned(pin, id)
	switch {
	case len(args) == 3 && kept:
		d.violation("I5", "release --force left pin %s without a record mounted: %s", name, r)
	case len(args) == 2 && p != nil && (!kept || r.rc == 0):
		d.violation("I1", "pin %s without a record was released (or its release said so) while a process used it: %s", name, r)
	case len(args) == 2 && p == nil && kept:
		d.violation("I5", "pin %s without a record was kept although nothing uses it: %s", name, r)
	}
	if p != nil {
		p.stop()
	}
	if kept {
		r = d.e.cli(d.e.pinDir, "", "release", name)
		d.logf("netns-pinctl release %s (nothing uses it now) -> %s", name, r)
		if d.mounts().pinned(pin, id) {
			d.violation("I5", "pin %s without a record was kept although nothing uses it any more: %s", name, r)
			unmountAll(d.t, pin)
		}
	}
	if _, err := os.Lstat(pin); err == nil {
		d.violation("I5", "pin file %s is left after its release", name)
		require.NoError(d.t, os.Remove(pin))
	}
	return true
}

// claimForeign: a pod claims, with args.cni.pinCluster, a cluster of
// another namespace; ADD must fail and change nothing.
func (d *driver) claimForeign() {
	ns := d.rng.IntN(len(clusterNamespaces))
	other := (ns + 1 + d.rng.IntN(len(clusterNamespaces)-1)) % len(clusterNamespaces)
	name := fmt.Sprintf("npm-%s-f%d", d.e.runID, d.step)
	ip := d.newIP()
	d.e.makeNetns(name, []string{ip})
	defer hosttest.MustRun(d.t, "ip", "netns", "del", name)
	c := cniCall{verb: "ADD", containerID: fmt.Sprintf("f%d", d.step), netnsPath: filepath.Join("/run/netns", name),
		podNS: clusterNamespaces[ns], podName: fmt.Sprintf("claimer-f%d", d.step), podUID: uid(d),
		claim: clusterOf(other), prevIPs: []string{ip}}
	before := d.snapshot()
	r := d.e.cni(c, "")
	d.logf("ADD %s/%s claiming %s (another namespace's cluster) -> %s", c.podNS, c.podName, c.claim, r)
	d.count("I4")
	after := d.snapshot()
	if r.rc == 0 {
		d.violation("I4", "a claim of another namespace's cluster was accepted")
	}
	if after != before {
		d.violation("I4", "a refused claim changed the store:%s", before.diff(after))
	}
	if r.rc == 0 {
		// Only when the violation is ignored: take it back.
		c.verb = "DEL"
		r := d.e.cni(c, "")
		d.logf("DEL of the accepted claim -> %s", r)
		d.repaired = true
	}
}

// kernelClient maps an rbd image or mounts CephFS through a cluster's
// link: the client lives in the netns the link leads to and the monitors
// see it at one of that netns's addresses.
func (d *driver) kernelClient(kind string) bool {
	if len(d.clients) >= maxClients {
		return false
	}
	link := d.clientPath(d.rng.IntN(len(clusterNamespaces)))
	if link == "" {
		return false
	}
	id, err := host.NSIDOf(link)
	if err != nil {
		d.logf("%s through %s: no netns there", kind, link)
		return true
	}
	h := d.holderByNetns(id)
	if h == nil {
		d.violation("I2", "link %s led to a netns no holder has: %v", link, id)
		return true
	}
	if len(h.ips) == 0 {
		d.logf("%s through %s: %s has no address", kind, link, h)
		return true
	}
	d.nextC++
	c := &client{id: d.nextC, kind: kind, h: h, ip: pick(d, h.ips)}
	if kind == "rbd" {
		c.dir = d.e.rbdMap(c.id, c.ip)
	} else {
		c.dir = d.e.cephfsMount(c.id, c.ip)
	}
	c.ref = d.e.holdNetns(c.id, link)
	d.clients = append(d.clients, c)
	d.logf("%s through %s: %s", kind, link, c)
	return true
}

// clientPath is where a new client of cluster cl enters its netns: one of
// the cluster's links, as ceph-csi's nsenter; for a linkless cluster the
// netns of one of its running, pinned holder pods, as a node plugin makes
// its clients in its own netns ("" when there is none). A link leads only
// to a pin; the node plugin's own netns is pinned from its ADD until its
// DEL, unless an operator released the pin of the running pod by hand,
// after which nothing protects the clients it makes (docs/operating.md).
func (d *driver) clientPath(cl int) string {
	if links := d.e.links(cl); len(links) > 0 {
		return pick(d, links)
	}
	hs := d.filter(func(h *holder) bool {
		return h.cluster == cl && h.rt == rtRunning && h.pin == pinActive && !h.uncertain && !h.unmounted
	})
	if len(hs) == 0 {
		return ""
	}
	return pick(d, hs).netnsPath
}

func (d *driver) clientLeaves(kind string) bool {
	var cs []*client
	for _, c := range d.clients {
		if c.kind == kind {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return false
	}
	c := pick(d, cs)
	d.stopClient(c)
	d.logf("%s leaves", c)
	return true
}

// noStore: before the first pin there is no stateDir, and the command line
// must say so and create nothing.
func (d *driver) noStore(r result) bool {
	if _, err := os.Stat(d.e.stateDir); err == nil {
		return false
	}
	d.count("I5")
	if r.rc == 0 || r.killed {
		d.violation("I5", "a command without a stateDir did not fail: %s", r)
	}
	return true
}

func (d *driver) stopClient(c *client) {
	if c.p != nil {
		c.p.stop()
	}
	if c.dir != "" {
		require.NoError(d.t, os.RemoveAll(c.dir))
	}
	if c.ref != "" {
		unmountAll(d.t, c.ref)
		require.NoError(d.t, os.Remove(c.ref))
	}
	d.clients = slices.DeleteFunc(d.clients, func(o *client) bool { return o == c })
}

// reboot: a new boot id, every pin and pinDir's own mount gone, every
// client and every pod's netns gone.
func (d *driver) reboot() {
	for len(d.clients) > 0 {
		d.stopClient(d.clients[0])
	}
	recs := d.records()
	for _, h := range d.holders {
		if r, ok := recs[h.att]; ok && r.Abandoned && r.Teardown != nil && len(r.Teardown.Cache) > 0 {
			d.owed[h] = true
		}
	}
	entries := d.readDir(filepath.Join(d.e.pinDir, "pins"))
	for _, en := range entries {
		unmountAll(d.t, filepath.Join(d.e.pinDir, "pins", en.Name()))
	}
	unmountAll(d.t, d.e.pinDir)
	for _, h := range d.holders {
		if _, err := os.Lstat(h.netnsPath); err == nil {
			hosttest.MustRun(d.t, "ip", "netns", "del", h.netnsName)
		}
		h.rt, h.pin, h.uncertain, h.allowed, h.unmounted = rtGone, pinNone, false, nil, false
	}
	powerLoss := d.rng.IntN(2) == 0
	if powerLoss {
		d.tearUnsyncedRecords()
	}
	d.boot++
	d.e.writeBootID(d.boot)
	d.dirty = true
	d.logf("reboot (boot %d, power loss %v)", d.boot, powerLoss)
}

// tearUnsyncedRecords plays what a power loss may leave of the records
// written without fsync: empty, or cut short. A record that keeps a
// captured teardown is synced before its DEL answers, and survives whole.
func (d *driver) tearUnsyncedRecords() {
	for _, en := range d.readDir(filepath.Join(d.e.stateDir, "records")) {
		path := filepath.Join(d.e.stateDir, "records", en.Name())
		data := d.readFile(path)
		if strings.Contains(string(data), `"teardown"`) || d.rng.IntN(2) == 0 {
			continue
		}
		keep := pick(d, []int{0, len(data) / 2})
		require.NoError(d.t, os.WriteFile(path, data[:keep], 0o600))
		d.logf("power loss: record %s left with %d of its %d bytes", en.Name(), keep, len(data))
	}
}

// drainAll: every client leaves, the runtime deletes every pod, GC and the
// operator's gc run; then nothing may be left (I3).
func (d *driver) drainAll() {
	for len(d.clients) > 0 {
		d.stopClient(d.clients[0])
	}
	d.logf("drain: every client left")
	for _, h := range d.alive() {
		d.del(h, "")
	}
	d.gc("")
	d.cliGC("")
	d.checkAll()
	d.checkEmpty()
}

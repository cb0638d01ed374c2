package model

// The invariants, checked against the host after every step:
//
//	I1  a netns the model says is in use keeps its pin (a mount of that
//	    nsfs inode at its pin path; an external unmount is allowed until
//	    the next repairing operation, which must pin it again), its
//	    interface and its addresses;
//	I2  once a repairing operation ran: the records are those the model
//	    expects, every record has its pin, every pin its record, and every
//	    link of a cluster leads to its newest active pin, else its newest
//	    draining pin, else does not exist;
//	I3  with every client gone, every holder deleted and GC run, nothing
//	    is left: no mount, record, link or pin file;
//	I4  a refused operation (wrong --pin-dir, a claim of another
//	    namespace's cluster) fails and changes nothing; a pod that is no
//	    holder changes nothing; list, inuse and check change nothing;
//	I5  answers: DEL refuses (code 11) exactly while the netns is in use,
//	    GC and the operator's commands do not fail, inuse reports what the
//	    model knows, gc reports each held holder kept or released as the
//	    model says, CHECK passes exactly for pinned holders;
//	I6  links never flicker: a link that led to the pin of a netns in use
//	    before a step still leads to a pin after it, while that netns is
//	    in use and still pinned, whatever the step was (a crash included):
//	    to the cluster's newest active pin, else its newest draining pin,
//	    once the state is known (I2), and to a live pin of its cluster
//	    while a crash left the state open;
//	I7  a teardown the runtime abandoned before a reboot is finished
//	    whoever comes first after it: once an operation of netns-pinctl
//	    repaired the store, the chain's plugin before netns-pin got the
//	    attachment's DEL and nothing of it is left in teardowns/.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

type recView struct {
	State     string    `json:"state"`
	Created   time.Time `json:"created"`
	Abandoned bool      `json:"abandoned"`
	Teardown  *struct {
		Cache json.RawMessage `json:"cache"`
	} `json:"teardown"`
}

// readDir lists dir; a folder not made yet is empty, any other error
// ends the run (an unread folder would pass every check).
func (d *driver) readDir(dir string) []os.DirEntry {
	d.t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.t.Fatalf("read %s: %v", dir, err)
	}
	return entries
}

// readFile reads a file that readDir listed.
func (d *driver) readFile(path string) []byte {
	d.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		d.t.Fatalf("read %s: %v", path, err)
	}
	return data
}

// records reads every record of the store.
func (d *driver) records() map[string]recView {
	d.t.Helper()
	out := map[string]recView{}
	dir := filepath.Join(d.e.stateDir, "records")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out
	}
	if err != nil {
		d.t.Fatalf("read %s: %v", dir, err)
	}
	for _, en := range entries {
		att, ok := strings.CutSuffix(en.Name(), ".json")
		if !ok || strings.HasPrefix(en.Name(), ".tmp-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			d.t.Fatalf("read record: %v", err)
		}
		var r recView
		if err := json.Unmarshal(data, &r); err != nil {
			if d.dirty && !d.repaired {
				// A power loss tore it; the next repairing operation
				// must drop it (and is checked for that).
				continue
			}
			d.violation("I2", "record %s is no JSON: %v", en.Name(), err)
			continue
		}
		out[att] = r
	}
	return out
}

type mountTable []hosttest.MountEntry

func (d *driver) mounts() mountTable { return mountTable(hosttest.ReadMountinfo(d.t)) }

// pinned reports whether path is a mount of the netns id.
func (m mountTable) pinned(path string, id host.NSID) bool {
	root := fmt.Sprintf("net:[%d]", id.Ino)
	return slices.ContainsFunc(m, func(e hosttest.MountEntry) bool { return e.Mountpoint == path && e.Root == root })
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func (d *driver) checkAll() {
	d.t.Helper()
	recs := d.records()
	mounts := d.mounts()
	if d.repaired {
		// Every repairing operation settles an unpinned record again.
		for _, h := range d.holders {
			if h.pin == pinUnpinned && !h.uncertain {
				h.uncertain, h.allowed = true, []pinState{pinUnpinned, pinDraining, pinNone}
			}
		}
		d.resolve(recs)
		d.dirty = false
	}
	d.checkInUse(mounts)
	if !d.dirty {
		d.checkStore(recs, mounts)
	}
	if d.repaired && d.ctlRepaired {
		d.checkOwed()
	}
}

// checkOwed is I7, after a repairing operation of netns-pinctl.
func (d *driver) checkOwed() {
	for _, h := range slices.SortedFunc(maps.Keys(d.owed), func(a, b *holder) int { return a.id - b.id }) {
		d.count("I7")
		if d.e.chainDels(h.cid) == 0 {
			d.violation("I7", "the chain's DEL of %s, abandoned before the reboot, has not run", h)
		}
		if _, err := os.Lstat(filepath.Join(d.e.stateDir, "teardowns", h.att+".json")); !errors.Is(err, fs.ErrNotExist) {
			d.violation("I7", "the teardown of %s is still in teardowns/ (%v)", h, err)
		}
		delete(d.owed, h)
	}
}

// resolve settles the holders whose state a crash or an external unmount
// left open, from what the repairing operation left on disk.
func (d *driver) resolve(recs map[string]recView) {
	for _, h := range d.holders {
		if !h.uncertain {
			continue
		}
		obs := pinNone
		if r, ok := recs[h.att]; ok {
			obs = pinState(r.State)
		}
		d.count("I2")
		switch {
		case obs != pinNone && obs != pinActive && obs != pinDraining && obs != pinUnpinned:
			d.violation("I2", "after a repairing operation the record of %s is still %q", h, obs)
		case obs == pinNone && d.inUse(h):
			d.violation("I1", "the record of %s is gone while %v use its netns", h, d.users(h))
		case obs == pinUnpinned && !d.inUse(h) && (d.ctlRepaired || !recs[h.att].Abandoned):
			d.violation("I2", "the record of %s is unpinned although nothing uses its netns", h)
		case obs == pinUnpinned && runtimeHolds(h):
			d.violation("I2", "the record of %s is unpinned although the runtime's %s still leads to its netns", h, h.netnsPath)
		case len(h.allowed) > 0 && !slices.Contains(h.allowed, obs):
			d.violation("I2", "the record of %s is %s, want one of %v", h, obs, h.allowed)
		}
		d.logf("    %s resolved: %s", h, obs)
		if obs == pinNone {
			h.addIPs = nil
		}
		h.pin, h.uncertain, h.allowed, h.unmounted = obs, false, nil, false
	}
}

// runtimeHolds reports whether the runtime's netns file of h still is its
// netns: then nothing excuses a lost pin.
func runtimeHolds(h *holder) bool {
	id, err := host.NSIDOf(h.netnsPath)
	return err == nil && id == h.nsid
}

// checkInUse is I1.
func (d *driver) checkInUse(mounts mountTable) {
	for _, c := range d.clients {
		if c.p == nil {
			continue
		}
		select {
		case <-c.p.done:
			d.t.Fatalf("client %s died on its own at step %d (seed %d): the model cannot go on", c, d.step, d.seed)
		default:
		}
	}
	for _, h := range d.holders {
		if !d.inUse(h) {
			continue
		}
		d.count("I1")
		pin := d.e.pinPath(h.att)
		pinned := mounts.pinned(pin, h.nsid)
		if !pinned && !h.unmounted && h.pin != pinUnpinned {
			d.violation("I1", "%s is in use by %v but its netns %v is no longer pinned at %s", h, d.users(h), h.nsid, pin)
		}
		var paths []string
		if pinned {
			paths = append(paths, pin)
		}
		paths = append(paths, h.netnsPath)
		for _, c := range d.clients {
			switch {
			case c.h != h:
			case c.p != nil:
				paths = append(paths, c.p.netnsPath())
			case c.ref != "":
				paths = append(paths, c.ref)
			}
		}
		var st netnsState
		var err error
		reached := false
		for _, p := range paths {
			if st, err = inspectNetns(p, h.nsid); err == nil {
				reached = true
				break
			}
		}
		switch {
		case !reached:
			d.violation("I1", "%s is in use by %v but its netns %v cannot be reached (last error %v)", h, d.users(h), h.nsid, err)
		case !st.hasIf:
			d.violation("I1", "%s is in use by %v but its netns lost %s", h, d.users(h), ifName)
		default:
			for _, ip := range h.ips {
				if !slices.Contains(st.ips, ip) {
					d.violation("I1", "%s is in use by %v but its netns lost address %s (has %v)", h, d.users(h), ip, st.ips)
				}
			}
		}
	}
}

// checkStore is I2.
func (d *driver) checkStore(recs map[string]recView, mounts mountTable) {
	d.count("I2")
	byAtt := map[string]*holder{}
	for _, h := range d.holders {
		byAtt[h.att] = h
		obs := pinNone
		if r, ok := recs[h.att]; ok {
			obs = pinState(r.State)
		}
		if obs != h.pin {
			d.violation("I2", "the record of %s is %s, the model says %s", h, obs, h.pin)
		}
		if h.pin != pinNone && h.pin != pinUnpinned && !mounts.pinned(d.e.pinPath(h.att), h.nsid) {
			d.violation("I2", "%s has a %s record but no pin of %v at %s", h, h.pin, h.nsid, d.e.pinPath(h.att))
		}
	}
	for att, r := range recs {
		if byAtt[att] == nil {
			d.violation("I2", "record %s (%s) belongs to no holder the model knows", att, r.State)
		}
	}
	pins := d.readDir(filepath.Join(d.e.pinDir, "pins"))
	for _, p := range pins {
		if strings.HasPrefix(p.Name(), ".tmp-") {
			continue
		}
		if h := byAtt[p.Name()]; h == nil || h.pin == pinNone {
			d.violation("I2", "pin file %s has no record", p.Name())
		}
	}
	for cl := range clusterNamespaces {
		var cands []*holder
		for _, h := range d.holders {
			if h.cluster == cl && (h.pin == pinActive || h.pin == pinDraining) {
				cands = append(cands, h)
			}
		}
		sort.SliceStable(cands, func(i, j int) bool {
			ci, cj := recs[cands[i].att].Created, recs[cands[j].att].Created
			if !ci.Equal(cj) {
				return ci.Before(cj)
			}
			return cands[i].att < cands[j].att
		})
		var target *holder
		for _, h := range cands {
			if h.pin == pinActive {
				target = h
			}
		}
		if target == nil {
			for _, h := range cands {
				target = h
			}
		}
		for _, l := range d.e.links(cl) {
			d.checkLink(l, target)
		}
	}
}

func (d *driver) checkLink(link string, target *holder) {
	dest, err := os.Readlink(link)
	if target == nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.violation("I2", "link %s exists (-> %q, %v) but its cluster has no pin", link, dest, err)
		}
		return
	}
	if err != nil {
		d.violation("I2", "link %s: %v; want it to lead to %s", link, err, target)
		return
	}
	if !filepath.IsAbs(dest) {
		dest = filepath.Join(filepath.Dir(link), dest)
	}
	if want := d.e.pinPath(target.att); filepath.Clean(dest) != want {
		d.violation("I2", "link %s leads to %s, want %s (%s, the newest %s pin of its cluster)", link, dest, want, target, target.pin)
		return
	}
	if id, err := host.NSIDOf(link); err != nil || id != target.nsid {
		d.violation("I2", "link %s leads to %v (err %v), want the netns %v of %s", link, id, err, target.nsid, target)
	}
}

// checkEmpty is I3.
func (d *driver) checkEmpty() {
	d.count("I3")
	var left []string
	recs := d.readDir(filepath.Join(d.e.stateDir, "records"))
	for _, r := range recs {
		left = append(left, "record "+r.Name())
	}
	pins := d.readDir(filepath.Join(d.e.pinDir, "pins"))
	for _, p := range pins {
		left = append(left, "pin file "+p.Name())
	}
	for _, td := range d.readDir(filepath.Join(d.e.stateDir, "teardowns")) {
		left = append(left, "teardown "+td.Name())
	}
	for _, m := range d.mounts() {
		if under(m.Mountpoint, d.e.work) && (strings.HasPrefix(m.Root, "net:[") || under(m.Mountpoint, filepath.Join(d.e.pinDir, "pins"))) {
			left = append(left, fmt.Sprintf("mount %s of %s", m.Mountpoint, m.Root))
		}
	}
	for cl := range clusterNamespaces {
		for _, l := range d.e.links(cl) {
			if _, err := os.Lstat(l); !errors.Is(err, fs.ErrNotExist) {
				left = append(left, "link "+l)
			}
		}
	}
	if len(left) > 0 {
		d.violation("I3", "after every client left, every holder was deleted and GC ran, there is still: %s", strings.Join(left, "; "))
	}
}

// snapshot is what the store has on the host, to tell whether a refused
// operation changed anything.
type snapshot struct {
	records, pins, mounts, links, owner string
}

// diff says what changed between two snapshots, one line per part.
func (s snapshot) diff(after snapshot) string {
	var b strings.Builder
	for _, p := range []struct{ name, before, after string }{
		{"records", s.records, after.records}, {"pins", s.pins, after.pins},
		{"mounts", s.mounts, after.mounts}, {"links", s.links, after.links}, {"pinDir owner", s.owner, after.owner},
	} {
		if p.before != p.after {
			fmt.Fprintf(&b, "\n  %s before: %s\n  %s after:  %s", p.name, summary(p.before), p.name, summary(p.after))
		}
	}
	return b.String()
}

var stateField = regexp.MustCompile(`"state": "([a-z]+)"`)

// summary shortens records to name(state) and paths to their last part.
func summary(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		name, rest, _ := strings.Cut(l, " ")
		if m := stateField.FindStringSubmatch(rest); m != nil {
			out = append(out, name+"("+m[1]+")")
		} else if l != "" {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, " ")
}

func (d *driver) snapshot() snapshot {
	var s snapshot
	var lines []string
	recs := d.readDir(filepath.Join(d.e.stateDir, "records"))
	for _, r := range recs {
		data := d.readFile(filepath.Join(d.e.stateDir, "records", r.Name()))
		lines = append(lines, r.Name()+" "+strings.Join(strings.Fields(string(data)), " "))
	}
	s.records = strings.Join(lines, "\n")
	lines = nil
	pins := d.readDir(filepath.Join(d.e.pinDir, "pins"))
	for _, p := range pins {
		lines = append(lines, p.Name())
	}
	s.pins = strings.Join(lines, " ")
	lines = nil
	for _, m := range d.mounts() {
		if under(m.Mountpoint, d.e.pinDir) {
			lines = append(lines, strings.TrimPrefix(m.Mountpoint, d.e.work+"/")+"="+m.Root)
		}
	}
	sort.Strings(lines)
	s.mounts = strings.Join(lines, " ")
	lines = nil
	for cl := range clusterNamespaces {
		for _, l := range d.e.links(cl) {
			dest, err := os.Readlink(l)
			if err != nil {
				dest = "absent"
			}
			lines = append(lines, strings.TrimPrefix(l, d.e.work+"/")+"->"+dest)
		}
	}
	s.links = strings.Join(lines, " ")
	// The stateDir that pinDir names as its owner (written by the first pin).
	if data, err := os.ReadFile(filepath.Join(d.e.pinDir, ".netns-pin-state-dir")); err == nil {
		s.owner = strings.TrimSpace(string(data))
	}
	return s
}

// linksToPinsInUse is, before a step, every link that leads to the pin of
// a holder whose netns is in use, by link (I6).
func (d *driver) linksToPinsInUse() map[string]*holder {
	out := map[string]*holder{}
	mounts := d.mounts()
	for _, h := range d.holders {
		if !d.inUse(h) || !mounts.pinned(d.e.pinPath(h.att), h.nsid) {
			continue
		}
		for _, l := range d.e.links(h.cluster) {
			if d.leadsTo(l) == h.att {
				out[l] = h
			}
		}
	}
	return out
}

// leadsTo is the attachment whose pin link leads to, "" when none.
func (d *driver) leadsTo(link string) string {
	dest, err := os.Readlink(link)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(dest) {
		dest = filepath.Join(filepath.Dir(link), dest)
	}
	att, ok := strings.CutPrefix(filepath.Clean(dest), filepath.Join(d.e.pinDir, "pins")+"/")
	if !ok {
		return ""
	}
	return att
}

// checkLinksStayed is I6, after a step, for the links that led to pins in
// use before it (linksToPinsInUse).
func (d *driver) checkLinksStayed(before map[string]*holder) {
	mounts := d.mounts()
	for l, h := range before {
		if !d.inUse(h) || !mounts.pinned(d.e.pinPath(h.att), h.nsid) {
			continue
		}
		d.count("I6")
		att := d.leadsTo(l)
		var to *holder
		for _, o := range d.holders {
			if o.att == att && o.cluster == h.cluster && att != "" {
				to = o
			}
		}
		if to == nil || !mounts.pinned(d.e.pinPath(to.att), to.nsid) {
			dest, err := os.Readlink(l)
			d.violation("I6", "link %s led to the pin of %s, in use by %v and still pinned, and now leads to no pin of its cluster (-> %q, %v)", l, h, d.users(h), dest, err)
		}
	}
}

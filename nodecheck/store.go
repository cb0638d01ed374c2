package nodecheck

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/human"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
	"github.com/netns-pin/netns-pin/netnsstore"
)

type checker struct {
	o    Options
	r    *Report
	snap *netnsstore.Snapshot // nil when the store could not be read
}

func (c *checker) run() {
	pinned := c.dirs()
	if pinned {
		c.store()
	}
	c.inUseRoots()
	if c.o.CephCSIConfig != "" {
		c.cephCSI()
	}
	c.csiPlugins()
	c.sweeper(pinned)
	c.agent()
}

// dirs checks pinDir and stateDir; false when nothing was pinned here
// (no stateDir), which is no fault.
func (c *checker) dirs() bool {
	o := c.o
	_, serr := os.Lstat(o.StateDir)
	if errors.Is(serr, os.ErrNotExist) {
		c.r.add(Finding{Check: "stateDir", Level: Info, Where: o.StateDir,
			What: "nothing was pinned on this node with this configuration yet (no stateDir); the first holder ADD creates it and pinDir, and makes pinDir a shared mount",
			Fix:  "if holders run here, give the network's --conf (or --pin-dir and --state-dir)"})
	} else if serr != nil {
		c.r.add(Finding{Check: "stateDir", Level: Unknown, Where: o.StateDir, What: "cannot look at stateDir: " + serr.Error()})
		return false
	} else if err := netnsstore.CheckTrustedDir(o.StateDir); err != nil {
		c.r.add(Finding{Check: "stateDir", Level: Error, Where: o.StateDir, What: err.Error() + "; every holder ADD and DEL fails",
			Fix: trustFix(err, o.StateDir, "0700")})
	} else {
		c.r.add(Finding{Check: "stateDir", Level: OK, Where: o.StateDir, What: "a root-owned directory that only root may write"})
	}
	pinned := serr == nil

	if _, err := os.Lstat(o.PinDir); err != nil {
		if pinned || !errors.Is(err, os.ErrNotExist) {
			c.r.add(Finding{Check: "pinDir", Level: Error, Where: o.PinDir, What: "pinDir cannot be used: " + err.Error(),
				Fix: "give the pinDir of the network's configuration (--conf); netns-pin creates it at the first holder ADD"})
		}
		return false
	}
	if err := netnsstore.CheckTrustedDir(o.PinDir); err != nil {
		c.r.add(Finding{Check: "pinDir", Level: Error, Where: o.PinDir, What: err.Error() + "; every holder ADD fails",
			Fix: trustFix(err, o.PinDir, "0755")})
	}
	// The test ADD and STATUS make: a pin made here reaches the host's
	// mount namespace.
	if err := nsinfo.PinsReachHost(o.PinDir); err != nil {
		c.r.add(Finding{Check: "pinDir", Level: Error, Where: o.PinDir, What: err.Error()})
	}
	shared, mp, err := netnsstore.PinDirShared(o.PinDir)
	switch {
	case err != nil:
		c.r.add(Finding{Check: "pinDir", Level: Unknown, Where: o.PinDir, What: "cannot tell pinDir's mount propagation: " + err.Error()})
	case shared:
		c.r.add(Finding{Check: "pinDir", Level: OK, Where: o.PinDir, What: "on a shared mount (" + mp + "): pins and releases propagate to the csi node plugins' mount namespaces"})
	case !pinned:
		c.r.add(Finding{Check: "pinDir", Level: Info, Where: o.PinDir, What: "not on a shared mount yet (" + mp + "); the first holder ADD makes it one"})
	default:
		c.r.add(Finding{Check: "pinDir", Level: Error, Where: o.PinDir,
			What: "on a mount that is not shared (" + mp + " is private or a slave): pins made or released here do not propagate to the csi node plugins, which then see an empty file where the netns should be",
			Fix:  fmt.Sprintf("mount --make-rshared %s (netns-pin's ADD makes it shared, so something made it private since; see docs/operating.md), then restart the csi node plugin pods so that they receive the mount", mp)})
	}
	return pinned
}

// store checks records, pins and links against each other and the link
// rule.
func (c *checker) store() {
	if c.o.Open == nil {
		return
	}
	s, err := c.o.Open()
	if err != nil {
		c.r.add(Finding{Check: "store", Level: Unknown, Where: c.o.StateDir, What: "cannot open the store: " + err.Error()})
		return
	}
	defer s.Close()
	snap, err := s.Inspect()
	if err != nil {
		c.r.add(Finding{Check: "store", Level: Unknown, Where: c.o.StateDir, What: "cannot read the store: " + err.Error()})
		return
	}
	c.snap = snap
	now := c.o.Now()
	if snap.OwnerErr != nil {
		c.r.add(Finding{Check: "store", Level: Error, Where: filepath.Join(c.o.PinDir, ".netns-pin-state-dir"), What: snap.OwnerErr.Error() + "; every operation with this configuration refuses",
			Fix: "give the --state-dir (or --conf) of the network that owns these pins; two networks must not share a pinDir"})
	}
	for _, n := range slices.Sorted(maps.Keys(snap.Unreadable)) {
		c.r.add(Finding{Check: "record", Level: Error, Where: filepath.Join(c.o.StateDir, "records", n+".json"),
			What: "record cannot be used: " + snap.Unreadable[n].Error() + "; no pin on this node is released while it exists",
			Fix:  "see netns-pinctl list; a record of a newer format needs that netns-pin release back, a corrupt one the backup of stateDir (docs/operating.md)"})
	}
	for _, f := range snap.Dropped {
		c.r.add(Finding{Check: "record", Level: Warning, Where: filepath.Join(c.o.StateDir, "records", f.Attachment+".json"),
			What: f.Reason + "; the next operation drops it", Fix: "netns-pinctl gc"})
	}
	pins := map[string]netnsstore.PinStatus{}
	for _, p := range snap.Pins {
		pins[p.Attachment] = p
	}
	for _, r := range snap.Records {
		where := fmt.Sprintf("%s (%s, pod %s/%s)", r.PinPath, r.Cluster, r.PodNS, r.PodName)
		p, has := pins[r.Attachment]
		whole := has && p.Mounted && p.Netns == r.NetnsID()
		switch {
		case r.BootID != snap.BootID && !whole:
			c.r.add(Finding{Check: "record", Level: Warning, Where: where, What: "record of an earlier boot; the next operation drops it",
				Fix: "netns-pinctl gc"})
		case r.State == netnsstore.StateUnpinned:
			c.r.add(Finding{Check: "record", Level: Warning, Where: where,
				What: "in use, but its pin was unmounted from outside and nothing reaches the netns to pin it again: " + quoteList(r.References),
				Fix:  "netns-pinctl inuse " + r.Attachment + " lists the clients; once they are gone the next operation releases it"})
		case !whole:
			what := "the pin is missing"
			if has && p.Mounted {
				what = fmt.Sprintf("the pin holds %s, the record says %s", p.Netns, r.NetnsID())
			} else if has {
				what = "the pin is a plain file, not a mount of the netns (unmounted from outside)"
			}
			c.r.add(Finding{Check: "pin", Level: Error, Where: where, What: what + "; the link leads nowhere until it is pinned again",
				Fix: "netns-pinctl gc (repair pins it again from the runtime's netns, or settles the record)"})
		case r.State == netnsstore.StateDraining:
			what := fmt.Sprintf("draining for %s, held by %s", human.Age(now.Sub(r.DrainingSince)), quoteList(r.References))
			if r.Abandoned {
				what += "; the runtime gave up on its teardown, the sweeper finishes it once nothing uses the netns"
			}
			c.r.add(Finding{Check: "record", Level: Warning, Where: where, What: what,
				Fix: "netns-pinctl inuse " + r.Attachment + " says what still uses it; unmap or unmount those clients (or move their pods) and it is released"})
		}
	}
	for _, p := range snap.Pins {
		if p.HasRecord {
			continue
		}
		where := filepath.Join(c.o.PinDir, netnsstore.PinsSubdir, p.Attachment)
		if p.Mounted {
			c.r.add(Finding{Check: "pin", Level: Error, Where: where, What: fmt.Sprintf("pin of %s without a record: it has no links and no release checks its recorded addresses", p.Netns),
				Fix: "netns-pinctl release " + p.Attachment + " (checked with the addresses its netns has now; --force to cut its clients)"})
		} else {
			c.r.add(Finding{Check: "pin", Level: Warning, Where: where, What: "file in pins/ without a record and without a mount",
				Fix: "netns-pinctl gc removes it"})
		}
	}
	c.links()
}

func (c *checker) recordOf(att string) *netnsstore.Record {
	if c.snap != nil {
		if i := slices.IndexFunc(c.snap.Records, func(r *netnsstore.Record) bool { return r.Attachment == att }); i >= 0 {
			return c.snap.Records[i]
		}
	}
	return nil
}

// links checks every link against the link rule and that it leads to a
// network namespace.
func (c *checker) links() {
	fixRelink := "netns-pinctl gc re-points the links of every cluster by the rule"
	okLinks := 0
	for _, l := range c.snap.Links {
		f := Finding{Check: "link", Level: Error, Where: l.Path, Fix: fixRelink}
		dangling, want := danglingReason(l.Path), c.recordOf(l.Want)
		switch {
		case l.Cluster == "":
			f.What, f.Fix = "link into pins/ that no record asks for", "rm "+l.Path+" if no ceph-csi configuration names it; the cluster's next holder ADD makes it again"
			if dangling != "" {
				f.What = "dangling link (" + dangling + "): its pin was released; ceph-csi fails to stat it"
			}
			f.What += " (-> " + l.Target + ")"
		case l.Want == "" && l.Exists:
			f.What = fmt.Sprintf("cluster %s has no active or draining pin, yet the link exists (-> %s)", l.Cluster, l.Target)
		case l.Want == "":
			f.Level, f.What, f.Fix = Warning, fmt.Sprintf("cluster %s has no pin to link: new volumes fail until its holder runs", l.Cluster), "check the cluster's holder pod on this node"
		case !l.Exists:
			f.What = fmt.Sprintf("missing; the link rule says it leads to %s", l.Want)
		case !l.Symlink:
			f.What, f.Fix = "not a symlink: something else stands where the cluster's link belongs, and netns-pin never replaces it", "remove it, then "+fixRelink
		case l.Have != l.Want:
			f.What = fmt.Sprintf("leads to %q, the link rule says %s (cluster %s)", l.Target, l.Want, l.Cluster)
			if dangling != "" {
				f.What += "; it dangles (" + dangling + "): a released pin"
			} else if l.Have != "" && c.recordOf(l.Have) == nil {
				f.What += "; that pin has no record"
			}
		case dangling != "":
			f.What, f.Fix = "leads to "+l.Want+", which is no network namespace ("+dangling+")", "netns-pinctl gc"
		case want != nil && want.State == netnsstore.StateDraining:
			f.Level, f.Fix = Warning, "start the cluster's holder pod on this node (its ADD takes the link)"
			f.What = fmt.Sprintf("cluster %s has no active pin: the link leads to its newest draining pin %s, so new volumes go into a netns being torn down", l.Cluster, l.Want)
		default:
			okLinks++
			continue
		}
		c.r.add(f)
	}
	if okLinks > 0 {
		c.r.add(Finding{Check: "link", Level: OK, Where: c.o.PinDir, What: fmt.Sprintf("%d link(s) lead to their cluster's newest active pin", okLinks)})
	}
}

// danglingReason says why path does not lead to a network namespace ("" when it does).
func danglingReason(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return err.Error()
	}
	if st.Type != unix.NSFS_MAGIC {
		return "a plain file: the pin is not mounted"
	}
	return ""
}

// nsfsID is the identity of the network namespace path leads to.
func nsfsID(path string) (netnsstore.NetnsID, error) {
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return netnsstore.NetnsID{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return netnsstore.NetnsID{}, err
	}
	if sf.Type != unix.NSFS_MAGIC {
		return netnsstore.NetnsID{}, fmt.Errorf("a plain file (inode %d), not a namespace", st.Ino)
	}
	return netnsstore.NetnsID{Dev: st.Dev, Ino: st.Ino}, nil
}

// trustFix is the fix for a pinDir or stateDir that fails the trust rule:
// for the directory itself its owner and mode, for an ancestor (or a
// symlink on the way) that ancestor.
func trustFix(err error, dir, mode string) string {
	var u *netnsstore.UntrustedDirError
	switch {
	case errors.As(err, &u) && strings.HasPrefix(u.Why, "is a symlink"):
		return fmt.Sprintf("give the real path: no symlink may be on the way (%s is one)", u.Path)
	case u != nil && u.Path != filepath.Clean(dir):
		return fmt.Sprintf("chown root %s && chmod go-w %s (an ancestor: anyone who may write it can swap %s)", u.Path, u.Path, dir)
	default:
		return fmt.Sprintf("chown root:root %s && chmod %s %s", dir, mode, dir)
	}
}

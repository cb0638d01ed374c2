package nodecheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/human"
	"github.com/netns-pin/netns-pin/internal/regfile"
	"github.com/netns-pin/netns-pin/netnsstore"
)

const debugfsMagic = 0x64626720 // DEBUGFS_MAGIC, include/uapi/linux/magic.h

// inUseRoots checks that the in-use check can read its roots, and says
// which of its signals are live here (docs/design.md §15).
func (c *checker) inUseRoots() {
	o := c.o
	if _, err := os.ReadDir(o.Proc); err != nil {
		c.r.add(Finding{Check: "inUse", Level: Error, Where: o.Proc, What: "cannot read the proc root: " + err.Error() + "; every in-use check fails, so no pin is ever released",
			Fix: "set inUse.proc to the host's /proc"})
	}
	if _, err := os.ReadDir(o.Sysfs); err != nil {
		c.r.add(Finding{Check: "inUse", Level: Error, Where: o.Sysfs, What: "cannot read the sysfs root: " + err.Error() + "; every in-use check fails, so no pin is ever released",
			Fix: "set inUse.sysfs to the host's /sys"})
	} else if _, err := os.ReadDir(filepath.Join(o.Sysfs, "bus", "rbd", "devices")); err == nil {
		c.r.add(Finding{Check: "inUse", Level: Info, Where: filepath.Join(o.Sysfs, "bus", "rbd"), What: "the kernel's rbd driver is loaded: krbd devices are attributed to pins by their client address"})
	} else if errors.Is(err, os.ErrNotExist) {
		c.r.add(Finding{Check: "inUse", Level: Info, Where: filepath.Join(o.Sysfs, "bus", "rbd"), What: "no rbd bus in sysfs (the rbd module is not loaded): no krbd device exists now; the first rbd map loads it and the check sees it"})
	} else {
		c.r.add(Finding{Check: "inUse", Level: Error, Where: filepath.Join(o.Sysfs, "bus", "rbd", "devices"), What: "cannot read the krbd devices: " + err.Error() + "; every in-use check fails (counts as in use)"})
	}
	block := o.Unattributed != "ignore"
	var st unix.Statfs_t
	mounted := unix.Statfs(o.Debugfs, &st) == nil && st.Type == debugfsMagic
	_, cephErr := os.ReadDir(filepath.Join(o.Debugfs, "ceph"))
	switch {
	case mounted && (cephErr == nil || errors.Is(cephErr, os.ErrNotExist)):
		c.r.add(Finding{Check: "inUse", Level: Info, Where: o.Debugfs, What: "debugfs is mounted: CephFS kernel clients are attributed to pins by their client address"})
	case mounted:
		level, what := Info, "debugfs is mounted but its ceph folder cannot be read ("+cephErr.Error()+"): with unattributed: block every CephFS kernel mount holds every pin"
		if !block {
			level, what = Error, "debugfs is mounted but its ceph folder cannot be read ("+cephErr.Error()+"): with unattributed: ignore every in-use check fails (counts as in use)"
		}
		c.r.add(Finding{Check: "inUse", Level: level, Where: o.Debugfs, What: what, Fix: "make debugfs readable for root (kernel lockdown hides it), or keep unattributed: block"})
	case block:
		c.r.add(Finding{Check: "inUse", Level: Info, Where: o.Debugfs, What: "debugfs is not mounted: CephFS kernel clients cannot be attributed, so each one found in a mount table holds every pin (unattributed: block)",
			Fix: "mount -t debugfs none /sys/kernel/debug to release pins that no CephFS client of theirs uses"})
	default:
		c.r.add(Finding{Check: "inUse", Level: Warning, Where: o.Debugfs, What: "debugfs is not mounted and unattributed is ignore: CephFS kernel clients outside debugfs are not seen at all, and a pin they use can be released under them",
			Fix: "mount -t debugfs none /sys/kernel/debug, or set inUse.unattributed to block"})
	}
}

// cephCSIEntry is what netns-pin reads of one cluster of ceph-csi's
// config.json (internal/util/csiconfig.go).
type cephCSIEntry struct {
	ClusterID string `json:"clusterID"`
	// "rbd", "cephFS", "nfs": encoding/json matches a key to a field's
	// name regardless of case, as it does to a tag.
	RBD, CephFS, NFS struct {
		NetNamespaceFilePath string `json:"netNamespaceFilePath"`
	}
}

// readCephCSIConfig reads config.json, or a ConfigMap (as JSON) that
// carries it under data."config.json".
func readCephCSIConfig(path string) ([]cephCSIEntry, error) {
	data, err := regfile.ReadFile(path, 0, 1<<20)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if json.Unmarshal(data, &cm) == nil && cm.Data["config.json"] != "" {
		data = []byte(cm.Data["config.json"])
	}
	var entries []cephCSIEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("%s is not ceph-csi's config.json (a list of clusters): %w", path, err)
	}
	return entries, nil
}

// csiPath is one netNamespaceFilePath of config.json.
type csiPath struct {
	path, where string
}

func (c *checker) csiPaths() ([]csiPath, error) {
	entries, err := readCephCSIConfig(c.o.CephCSIConfig)
	if err != nil {
		return nil, err
	}
	var out []csiPath
	for _, e := range entries {
		for _, p := range []struct{ kind, path string }{{"rbd", e.RBD.NetNamespaceFilePath}, {"cephFS", e.CephFS.NetNamespaceFilePath}, {"nfs", e.NFS.NetNamespaceFilePath}} {
			if p.path != "" {
				out = append(out, csiPath{filepath.Clean(p.path), fmt.Sprintf("%s clusterID %q %s.netNamespaceFilePath", c.o.CephCSIConfig, e.ClusterID, p.kind)})
			}
		}
	}
	return out, nil
}

// rookOldLink tells a path of Rook's holder layout (v1.9 to v1.15):
// <kubelet>/plugins/<driver>/<cluster namespace>.net.ns.
func rookOldLink(path string) bool {
	return strings.HasSuffix(path, ".net.ns") && strings.HasSuffix(filepath.Base(filepath.Dir(path)), ".csi.ceph.com")
}

// cephCSI checks every netNamespaceFilePath of ceph-csi's config.json.
func (c *checker) cephCSI() {
	paths, err := c.csiPaths()
	if err != nil {
		c.r.add(Finding{Check: "cephCSI", Level: Unknown, Where: c.o.CephCSIConfig, What: "cannot read ceph-csi's configuration: " + err.Error()})
		return
	}
	if len(paths) == 0 {
		c.r.add(Finding{Check: "cephCSI", Level: Info, Where: c.o.CephCSIConfig, What: "no cluster sets netNamespaceFilePath: ceph-csi runs its clients in the csi plugin's own netns"})
		return
	}
	var known []string
	if c.snap != nil {
		for _, l := range c.snap.Links {
			if l.Cluster != "" {
				known = append(known, l.Path)
			}
		}
	}
	for _, p := range paths {
		i := -1
		if c.snap != nil {
			i = slices.IndexFunc(c.snap.Links, func(l netnsstore.LinkStatus) bool { return l.Path == p.path && l.Cluster != "" })
		}
		var nsErr error
		var r *netnsstore.Record
		if i >= 0 {
			_, nsErr = nsfsID(p.path)
			r = c.recordOf(c.snap.Links[i].Have)
		}
		switch {
		case i < 0 && rookOldLink(p.path):
			c.r.add(Finding{Check: "cephCSI", Level: Error, Where: p.where,
				What: strconv.Quote(p.path) + " is Rook's old holder path, and no cluster's links include it: ceph-csi finds nothing there, or a netns of a Rook holder (failed to get stat for ... .net.ns)",
				Fix:  fmt.Sprintf(`add %s to the netns-pin entry's links, or point netNamespaceFilePath at the cluster's link under %s`, strconv.Quote(filepath.Dir(p.path)+"/{{.Namespace}}.net.ns"), c.o.PinDir)})
		case i < 0:
			c.r.add(Finding{Check: "cephCSI", Level: Error, Where: p.where,
				What: strconv.Quote(p.path) + " is no link of a cluster netns-pin knows here (links: " + quoteList(known) + ")",
				Fix:  "set netNamespaceFilePath to the cluster's link, <pinDir>/<namespace>/<name>.net by default"})
		case nsErr != nil:
			c.r.add(Finding{Check: "cephCSI", Level: Error, Where: p.where, What: strconv.Quote(p.path) + " does not lead to a network namespace (" + nsErr.Error() + "): NodeStage fails with \"failed to get stat for\"",
				Fix: "see the link finding above; netns-pinctl gc re-points it"})
		case r == nil:
			c.r.add(Finding{Check: "cephCSI", Level: Error, Where: p.where, What: strconv.Quote(p.path) + " leads to no pin with a record", Fix: "netns-pinctl gc"})
		case r.State == netnsstore.StateDraining:
			c.r.add(Finding{Check: "cephCSI", Level: Warning, Where: p.where, What: fmt.Sprintf("%q leads to the draining pin %s (cluster %s has no active one)", p.path, r.Attachment, r.Cluster),
				Fix: "start the cluster's holder pod on this node"})
		default:
			c.r.add(Finding{Check: "cephCSI", Level: OK, Where: p.where, What: fmt.Sprintf("%q leads to the active pin %s of cluster %s", p.path, r.Attachment, r.Cluster)})
		}
	}
}

// csiPlugins checks, for every csi node plugin process, that each link
// resolves inside its mount namespace to the netns it resolves to here:
// proof that pins propagate into the container end to end.
func (c *checker) csiPlugins() {
	var links []string
	if c.o.CephCSIConfig != "" {
		paths, _ := c.csiPaths()
		for _, p := range paths {
			if !slices.Contains(links, p.path) {
				links = append(links, p.path)
			}
		}
	} else if c.snap != nil {
		for _, l := range c.snap.Links {
			if l.Cluster != "" && l.Want != "" {
				links = append(links, l.Path)
			}
		}
	}
	pids, how, err := c.csiProcesses()
	if err != nil {
		c.r.add(Finding{Check: "csiPlugin", Level: Unknown, Where: c.o.Proc, What: "cannot list processes: " + err.Error()})
		return
	}
	if len(pids) == 0 {
		what := "no csi node plugin process (" + how + ") runs on this node"
		if how == "none named" {
			what = "no csi node plugin named"
		}
		c.r.add(Finding{Check: "csiPlugin", Level: Info, Where: c.o.Proc, What: what + ": the propagation of pins into its mount namespace is not checked",
			Fix: "name the csi node plugin with --csi-container ID (crictl ps --name csi-rbdplugin -q) or --csi-pid PID"})
		return
	}
	for _, pid := range pids {
		comm := strings.TrimSpace(readSmall(filepath.Join(c.o.Proc, strconv.Itoa(pid), "comm")))
		who := fmt.Sprintf("pid %d (%q)", pid, comm) // a process names itself
		if _, err := os.Stat(filepath.Join(c.o.Proc, strconv.Itoa(pid))); err != nil {
			c.r.add(Finding{Check: "csiPlugin", Level: Error, Where: who, What: "no such process", Fix: "give the pid of a running csi node plugin"})
			continue
		}
		okCount := 0
		for _, l := range links {
			hostID, err := nsfsID(l)
			if err != nil {
				continue // reported as a link or ceph-csi finding
			}
			inside := filepath.Join(c.o.Proc, strconv.Itoa(pid), "root", l)
			id, err := nsfsIDWithin(inside, csiProbeTimeout)
			switch {
			case err != nil:
				c.r.add(Finding{Check: "csiPlugin", Level: Error, Where: who + ": " + strconv.Quote(l),
					What: fmt.Sprintf("in its mount namespace %q is not the pinned netns %s (%v): the pin did not propagate into the container, so ceph-csi cannot enter it", l, hostID, err),
					Fix:  "mount the kubelet plugins folder (or pinDir) into the csi node plugin with mountPropagation: Bidirectional, keep pinDir a shared mount, and restart the csi node plugin pod"})
			case id != hostID:
				c.r.add(Finding{Check: "csiPlugin", Level: Error, Where: who + ": " + strconv.Quote(l),
					What: fmt.Sprintf("in its mount namespace %q is %s, on the host %s: it sees a stale pin", l, id, hostID),
					Fix:  "mount the kubelet plugins folder into the csi node plugin with mountPropagation: Bidirectional and restart the pod"})
			default:
				okCount++
			}
		}
		if okCount > 0 {
			c.r.add(Finding{Check: "csiPlugin", Level: OK, Where: who, What: fmt.Sprintf("%d link(s) lead to the same netns in its mount namespace as on the host", okCount)})
		}
	}
}

// csiProcesses is the pids named with --csi-pid, and every process of the
// containers named with --csi-container: one whose cgroup path (which the
// runtime chose) has the container's ID.
func (c *checker) csiProcesses() ([]int, string, error) {
	pids := slices.Clone(c.o.CSIPIDs)
	if len(c.o.CSIContainers) == 0 {
		if len(pids) == 0 {
			return nil, "none named", nil
		}
		return pids, "named", nil
	}
	how := "container " + strings.Join(c.o.CSIContainers, " or ")
	ents, err := os.ReadDir(c.o.Proc)
	if err != nil {
		return nil, how, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || slices.Contains(pids, pid) {
			continue
		}
		cgroup := readSmall(filepath.Join(c.o.Proc, e.Name(), "cgroup"))
		if slices.ContainsFunc(c.o.CSIContainers, func(id string) bool { return strings.Contains(cgroup, id) }) {
			pids = append(pids, pid)
		}
	}
	return pids, how, nil
}

// csiProbeTimeout bounds each look into a csi container's mount namespace
// (a statfs and a stat through /proc/<pid>/root): a FUSE or network mount
// there may never answer, and check must.
const csiProbeTimeout = 5 * time.Second

// nsfsIDInside is nsfsID for a path inside a container (tests replace it
// with one that does not answer).
var nsfsIDInside = nsfsID

func nsfsIDWithin(path string, d time.Duration) (netnsstore.NetnsID, error) {
	type result struct {
		id  netnsstore.NetnsID
		err error
	}
	ch := make(chan result, 1)
	look := nsfsIDInside // read here: the goroutine may outlive the caller
	go func() {
		id, err := look(path)
		ch <- result{id, err}
	}()
	select {
	case r := <-ch:
		return r.id, r.err
	case <-time.After(d):
		return netnsstore.NetnsID{}, fmt.Errorf("no answer within %s (a FUSE or network mount in the container?)", d)
	}
}

// readSmall reads a process's comm or cgroup, "" when it cannot: a
// regular procfs file of at most a page or two, bounded all the same.
func readSmall(path string) string {
	data, _ := regfile.ReadFile(path, 0, 64<<10)
	return string(data)
}

// sweeper checks that the node sweeper runs and ran a round recently.
func (c *checker) sweeper(pinned bool) {
	where := filepath.Join(c.o.StateDir, "sweeper.json")
	st, err := netnsstore.ReadSweepStatus(c.o.StateDir)
	now := c.o.Now()
	switch {
	case !pinned:
		c.r.add(Finding{Check: "sweeper", Level: Info, Where: where, What: "nothing pinned yet: the sweeper waits for stateDir and reports nothing until then"})
		return
	case err != nil:
		c.r.add(Finding{Check: "sweeper", Level: Unknown, Where: where, What: "cannot read the sweeper's status: " + err.Error()})
		return
	case st == nil:
		c.r.add(Finding{Check: "sweeper", Level: Error, Where: where,
			What: "no sweeper has run on this node: a teardown that the runtime gives up on (CRI-O 1.32.8+, Multus thick) is never finished",
			Fix:  "install the netns-pin-installer DaemonSet (deploy/), whose sweep container runs netns-pinctl sweep, with this configuration's --conf"})
		return
	case !st.Stopped.IsZero():
		c.r.add(Finding{Check: "sweeper", Level: Error, Where: where, What: fmt.Sprintf("the sweeper (pid %d) stopped %s ago", st.PID, human.Age(now.Sub(st.Stopped))),
			Fix: "check the sweep container of the netns-pin-installer pod on this node"})
		return
	}
	late := max(3*st.Interval, time.Minute)
	age := now.Sub(st.LastRound)
	switch {
	case age > late:
		c.r.add(Finding{Check: "sweeper", Level: Error, Where: where, What: fmt.Sprintf("the sweeper's last round was %s ago (every %s expected)", human.Age(age), st.Interval),
			Fix: "check the sweep container of the netns-pin-installer pod on this node (stuck on the store's lock, or gone)"})
	case st.Error != "":
		c.r.add(Finding{Check: "sweeper", Level: Warning, Where: where, What: fmt.Sprintf("the sweeper's last round (%s ago) failed: %s", human.Age(age), st.Error),
			Fix: "see its log (the sweep container, or the configuration's logFile)"})
	case st.Interval == 0:
		c.r.add(Finding{Check: "sweeper", Level: OK, Where: where, What: fmt.Sprintf("netns-pinctl sweep --once (pid %d) ran a round %s ago", st.PID, human.Age(age))})
	default:
		c.r.add(Finding{Check: "sweeper", Level: OK, Where: where, What: fmt.Sprintf("running (pid %d, every %s), last round %s ago", st.PID, st.Interval, human.Age(age))})
	}
}

package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/pinstore"
	"github.com/netns-pin/netns-pin/internal/regfile"
	"github.com/netns-pin/netns-pin/netnsstore"
	"github.com/netns-pin/netns-pin/nodecheck"
)

// storeLockFile is the store's lock in stateDir (netnsstore's lock.go):
// uninstall holds it while it looks and removes, so that no ADD pins a
// netns in between.
const storeLockFile = "lock"

// uninstallLockTimeout is how long uninstall waits for the store's lock,
// as long as an ADD or DEL would.
const uninstallLockTimeout = 30 * time.Second

// remain is one thing that keeps netns-pin on the node.
type remain struct {
	// Kind: "record" (a pinned attachment's record), "pin" (a pin under
	// pinDir/pins) or "attachment" (a pod whose runtime or Multus cache
	// still lists netns-pin in its chain: its DEL will run netns-pin) or
	// "finalizer" (a pod of the node that carried netns-pin.io/pin at the
	// node agent's last pass: once deleted, only the agent lets it go).
	Kind string `json:"kind"`
	Name string `json:"name"`
	Pod  string `json:"pod,omitempty"`
	Path string `json:"path"`
}

// uninstallReport is uninstall's result, one JSON object with --json.
type uninstallReport struct {
	DryRun  bool     `json:"dryRun,omitempty"`
	Removed []string `json:"removed"`
	Remains []remain `json:"remains"`
}

// runUninstall is `netns-pinctl uninstall --cni-bin-dir DIR [--dry-run]`:
// the installer's clean removal (docs/operating.md, "Removing
// netns-pin"). Under the store's lock it looks for what still needs
// netns-pin on this node: records, pins, and the CNI result caches of
// cacheDirs (the runtime's and Multus') that still list netns-pin in an
// attachment's chain, since the DEL of such a pod runs netns-pin even
// after the NetworkAttachmentDefinition dropped it. With none, it removes
// netns-pin from the CNI bin folder, stateDir, pinDir and the configured
// logFile; otherwise it removes nothing and names what remains (exit 1).
func runUninstall(c *conf.Config, cf commandFlags, jsonOut bool, stdout, stderr io.Writer) int {
	if len(cf.cacheDirs) > 0 {
		c.CacheDirs = cf.cacheDirs
	}
	rep, err := uninstall(c, cf.cniBinDir, cf.dryRun)
	if err != nil {
		fmt.Fprintln(stderr, "netns-pinctl uninstall:", err)
		return 1
	}
	if jsonOut {
		_ = json.NewEncoder(stdout).Encode(rep)
	} else {
		printUninstall(stdout, rep)
	}
	if len(rep.Remains) > 0 {
		if !jsonOut {
			fmt.Fprintf(stderr, "netns-pinctl uninstall: refused: %d thing(s) on this node still need netns-pin (above); "+
				"remove it from the NetworkAttachmentDefinitions, wait until these pods are gone, then run it again (docs/operating.md, \"Removing netns-pin\")\n",
				len(rep.Remains))
			if slices.ContainsFunc(rep.Remains, func(r remain) bool { return r.Kind == "teardown" }) {
				fmt.Fprintln(stderr, "netns-pinctl uninstall: a teardown abandoned before a reboot still owes the chain's DEL (its IPAM lease): "+
					"the sweeper runs it within its interval, or run netns-pinctl gc")
			}
			if slices.ContainsFunc(rep.Remains, func(r remain) bool { return r.Kind == "finalizer" }) {
				fmt.Fprintf(stderr, "netns-pinctl uninstall: pods of this node carried the finalizer %s at the node agent's last pass: "+
					"take it out of their template (or delete the holder DaemonSet) and wait, with the agent still running, until they are gone; "+
					"the agent lets them go and its next pass drops them from its status. "+
					"If the agent is already gone: put it back, or check with kubectl that none of them is left and remove its status file\n",
					netnsstore.PodFinalizer)
			}
		}
		return 1
	}
	return 0
}

func printUninstall(w io.Writer, rep *uninstallReport) {
	for _, r := range rep.Remains {
		pod := ""
		if r.Pod != "" {
			pod = " pod " + r.Pod
		}
		fmt.Fprintf(w, "remains: %s %s%s (%s)\n", r.Kind, r.Name, pod, r.Path)
	}
	verb := "removed"
	if rep.DryRun {
		verb = "would remove"
	}
	if len(rep.Remains) > 0 {
		verb = "kept"
	}
	if len(rep.Removed) == 0 {
		fmt.Fprintf(w, "%s nothing: netns-pin is not installed here\n", verb)
		return
	}
	for _, p := range rep.Removed {
		fmt.Fprintf(w, "%s %s\n", verb, p)
	}
}

// uninstall does runUninstall's work; Removed lists what was (or, with
// dryRun or remains, would be) removed.
func uninstall(c *conf.Config, cniBinDir string, dryRun bool) (*uninstallReport, error) {
	rep := &uninstallReport{DryRun: dryRun, Removed: []string{}, Remains: []remain{}}
	unlock, err := lockStateDir(c.StateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rep.Remains, err = remains(c); err != nil {
		return nil, err
	}
	targets := []string{filepath.Join(cniBinDir, pluginName), filepath.Join(cniBinDir, "netns-pin-agent")}
	// an install cut short leaves its temporary file
	tmps, _ := filepath.Glob(filepath.Join(cniBinDir, ".netns-pin*.tmp"))
	targets = append(append(targets, tmps...), c.StateDir, c.PinDir)
	if c.LogFile != "" {
		targets = append(targets, c.LogFile)
	}
	for _, p := range targets {
		if _, err := os.Lstat(p); err == nil {
			rep.Removed = append(rep.Removed, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("look at %s: %w", p, err)
		}
	}
	if dryRun || len(rep.Remains) > 0 {
		return rep, nil
	}
	for _, p := range rep.Removed {
		remove := os.RemoveAll
		if p == c.PinDir {
			remove = removePinDir
		}
		if err := remove(p); err != nil {
			return nil, fmt.Errorf("remove %s: %w", p, err)
		}
		if p == c.StateDir {
			// Only a store really removed leaves the registry.
			if err := netnsstore.Unregister(netnsstore.RegistryDir(), c.StateDir); err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

// lockStateDir takes the store's lock when stateDir exists (none: nothing
// was ever pinned there, and nothing is locked).
func lockStateDir(stateDir string) (func(), error) {
	fd, err := unix.Open(filepath.Join(stateDir, storeLockFile), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open the store's lock %s/%s: %w", stateDir, storeLockFile, err)
	}
	if err := netnsstore.FlockWithin(fd, uninstallLockTimeout); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s/%s: %w", stateDir, storeLockFile, err)
	}
	return func() { unix.Close(fd) }, nil
}

// remains lists the records, the pins and the cached attachments whose
// chain names netns-pin.
func remains(c *conf.Config) ([]remain, error) {
	out := []remain{}
	// A record, and a teardown the plugin handed over after a reboot
	// (the chain's DEL that netns-pinctl's next gc, release or sweep runs).
	for _, f := range []struct{ kind, sub string }{{"record", "records"}, {"teardown", netnsstore.TeardownsSubdir}} {
		kind, dir := f.kind, filepath.Join(c.StateDir, f.sub)
		names, err := dirNames(dir)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if strings.HasPrefix(n, ".tmp-") {
				continue // a write cut short, not a record; removed with stateDir
			}
			r := remain{Kind: kind, Name: strings.TrimSuffix(n, ".json"), Path: filepath.Join(dir, n)}
			var rec struct {
				PodNS   string `json:"podNamespace"`
				PodName string `json:"podName"`
			}
			if data, err := regfile.ReadFile(r.Path, unix.O_NOFOLLOW, 1<<20); err == nil && json.Unmarshal(data, &rec) == nil && rec.PodName != "" {
				r.Pod = rec.PodNS + "/" + rec.PodName
			}
			out = append(out, r)
		}
	}
	pinsDir := filepath.Join(c.PinDir, netnsstore.PinsSubdir)
	names, err := dirNames(pinsDir)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		out = append(out, remain{Kind: "pin", Name: n, Path: filepath.Join(pinsDir, n)})
	}
	found, err := finalizerPods(c.StateDir)
	if err != nil {
		return nil, err
	}
	out = append(out, found...)
	for _, dir := range c.CacheDirs {
		found, err := cachedAttachments(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// defaultAgentStatusDir is the node agent's status folder unless it is
// told another (cmd/netns-pin-agent --status-dir).
var defaultAgentStatusDir = conf.DefaultStateDir + "-agent"

// finalizerPods lists the pods the node agent last saw carrying the
// finalizer, from its status folder beside stateDir and beside the default
// stateDir (where the agent writes it unless told otherwise), once when
// they are one. Removed before they are gone, the agent would leave each
// of them Terminating once deleted.
func finalizerPods(stateDir string) ([]remain, error) {
	var out []remain
	for _, dir := range slices.Compact([]string{strings.TrimSuffix(stateDir, "/") + "-agent", defaultAgentStatusDir}) {
		pods, err := nodecheck.FinalizerPods(dir)
		if err != nil {
			return nil, err
		}
		for _, p := range pods {
			out = append(out, remain{Kind: "finalizer", Name: netnsstore.PodFinalizer, Pod: p, Path: nodecheck.AgentStatusFile(dir)})
		}
	}
	return out, nil
}

// dirNames lists a folder, sorted; a missing folder is empty.
func dirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name()) // sorted, as os.ReadDir returns them
	}
	return names, nil
}

// cachedAttachments finds, in a CNI cache folder, the attachments whose
// chain lists netns-pin: libcni's result cache (<dir>/results/<network>-
// <containerID>-<ifname>, what a runtime's DEL and Multus' delegates'
// DELs read the configuration from) and Multus' own cache of a pod's
// delegates (<dir>/<containerID>, what Multus' DEL calls). An unreadable
// or undecodable file is not a reference; a folder that cannot be listed
// is an error.
func cachedAttachments(dir string) ([]remain, error) {
	var out []remain
	results := filepath.Join(dir, "results")
	names, err := dirNames(results)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		p := filepath.Join(results, n)
		data, v, ok := cacheJSON(p)
		if !ok || !namesNetnsPin(v, 0) {
			continue
		}
		r := remain{Kind: "attachment", Name: n, Path: p}
		var entry struct {
			CNIArgs [][]string `json:"cniArgs"`
		}
		if json.Unmarshal(data, &entry) == nil {
			args := map[string]string{}
			for _, kv := range entry.CNIArgs {
				if len(kv) == 2 {
					args[kv[0]] = kv[1]
				}
			}
			if args["K8S_POD_NAME"] != "" {
				r.Pod = args["K8S_POD_NAMESPACE"] + "/" + args["K8S_POD_NAME"]
			}
		}
		out = append(out, r)
	}
	if names, err = dirNames(dir); err != nil {
		return nil, err
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if _, v, ok := cacheJSON(p); ok && namesNetnsPin(v, 0) {
			out = append(out, remain{Kind: "attachment", Name: "container " + n + " (Multus delegates)", Path: p})
		}
	}
	return out, nil
}

// cacheJSON reads and decodes a cache entry; false when it cannot.
func cacheJSON(path string) ([]byte, any, bool) {
	data, err := regfile.ReadFile(path, unix.O_NOFOLLOW, pinstore.MaxCacheEntry)
	var v any
	ok := err == nil && json.Unmarshal(data, &v) == nil
	return data, v, ok
}

// namesNetnsPin reports whether v holds a plugin entry of type netns-pin,
// also inside the base64 of a configuration as libcni ("config") and
// Multus ("Bytes") cache them.
func namesNetnsPin(v any, depth int) bool {
	if depth > 8 {
		return false
	}
	deeper := func(e any) bool { return namesNetnsPin(e, depth+1) }
	switch v := v.(type) {
	case map[string]any:
		return v["type"] == pluginName || slices.ContainsFunc(slices.Collect(maps.Values(v)), deeper)
	case []any:
		return slices.ContainsFunc(v, deeper)
	case string:
		if len(v) < 16 {
			return false
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(b) == 0 || (b[0] != '{' && b[0] != '[') {
			return false
		}
		var inner any
		return json.Unmarshal(b, &inner) == nil && namesNetnsPin(inner, depth+1)
	}
	return false
}

// removePinDir removes pinDir, whose pins folder is empty: its links and
// folders, then the folder itself, unmounting the bind mount of pinDir
// onto itself that netns-pin makes to share it (docs/design.md, "Mount
// propagation") when the folder is still a mount point.
func removePinDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	for range 8 {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		if err := unmountTrusted(dir); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("rmdir %s: still a mount point", dir)
}

// unmountTrusted detaches the topmost mount at dir through /proc/self/fd
// of dir opened by the trust rule of pinDir (netnsstore.OpenTrustedDir),
// never by a path that a writable ancestor could redirect.
func unmountTrusted(dir string) error {
	fd, err := netnsstore.OpenTrustedDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Unmount("/proc/self/fd/"+strconv.Itoa(fd), unix.MNT_DETACH)
}

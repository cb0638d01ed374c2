package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/human"
	"github.com/netns-pin/netns-pin/internal/pinstore"
	"github.com/netns-pin/netns-pin/inuse"
	"github.com/netns-pin/netns-pin/netnsstore"
	"github.com/netns-pin/netns-pin/nodecheck"
)

const cliUsage = `usage: netns-pinctl [flags] <command> [args] [flags]

commands:
  list                          pinned netns, their state, age and why they are held
  inuse <cluster|attachment>    what still uses a pinned netns
  gc [--dry-run]                repair leftovers (crashes, reboots) and release
                                draining pins that nothing uses any more
  release <attachment> --force  release a pin now; without --force only when
                                nothing uses it, else says what it would cut
  sweep [--interval 10s|--once] node loop until SIGTERM: finish the teardowns
                                that a runtime abandoned, once nothing uses
                                their netns (JSON log on stderr or logFile);
                                metrics: netns-pin-agent serves them
  check [--ceph-csi-config FILE] [--csi-pid PID] [--csi-container ID]
                                is this node set up right: pinDir, links,
                                pins, in-use roots, ceph-csi's paths, the csi
                                plugins' view, the sweeper (exit 0/1/2)
  version                       print the version and the commit
  install --cni-bin-dir DIR     copy the CNI plugin (netns-pin) beside this
                                binary into the CNI bin folder, atomically
  host-exec -- COMMAND [ARGS]   run netns-pinctl COMMAND in the host's mount
                                namespace (from the installer's container)
  uninstall --cni-bin-dir DIR [--dry-run]
                                remove netns-pin from this node (binaries,
                                pinDir, stateDir, logFile) once no record,
                                pin or cached attachment needs it; else
                                name what remains (exit 1)

flags:
`

// runCLI is the operator's command line. Output is for people unless --json. Flags go before or
// after the command, as people type them: `netns-pinctl list --json` lists
// as JSON, and no flag is ever ignored.
func runCLI(argv []string, stdout, stderr io.Writer) int {
	g := globalFlags{paths: map[string]string{}}
	fs := flag.NewFlagSet("netns-pinctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.define(fs)
	fs.Usage = func() { fmt.Fprint(stderr, cliUsage); fs.PrintDefaults() }
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if g.json && !jsonCommands[cmd] {
		fmt.Fprintf(stderr, "netns-pinctl: --json: %s prints no JSON (list, inuse, gc, check and uninstall do)\n", cmd)
		return 2
	}
	if cmd == "version" {
		if len(rest) > 0 {
			fmt.Fprintln(stderr, "usage: netns-pinctl version")
			return 2
		}
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	// The installer's commands read no network configuration and open no
	// store: they run in the installer image (static binaries only, no
	// shell) before anything is configured on the node.
	switch cmd {
	case "install":
		return runInstall(&g, rest, stdout, stderr)
	case "host-exec":
		return runHostExec(&g, rest, stdout, stderr)
	}
	cf, ok := parseCommand(cmd, rest, &g, stderr)
	if !ok {
		return 2
	}
	if g.json && !jsonCommands[cmd] {
		fmt.Fprintf(stderr, "netns-pinctl: --json: %s prints no JSON (list, inuse, gc, check and uninstall do)\n", cmd)
		return 2
	}
	c, err := conf.LoadFile(g.conf, g.paths)
	if err != nil {
		fmt.Fprintln(stderr, "netns-pinctl:", err)
		return 1
	}
	switch cmd {
	case "sweep":
		if cf.metrics != "" {
			// The node's metrics are the node agent's, which needs no privilege.
			fmt.Fprintln(stderr, "netns-pinctl: --metrics-address: the node's metrics are served by netns-pin-agent (deploy/agent-daemonset.yaml), not by the sweeper; drop the flag")
			return 2
		}
		// Without a network's configuration or folders, every store the
		// node registered is swept, whatever pinDir and stateDir it has.
		return runSweep(c, cf.interval, cf.once, !g.configured())
	case "check":
		return runCheck(c, cf, g.json, stdout, stderr)
	case "uninstall":
		return runUninstall(c, cf, g.json, stdout, stderr)
	}
	// Never create the folders from the command line: no stateDir means
	// nothing was ever pinned with this configuration.
	if _, err := os.Stat(c.StateDir); err != nil {
		fmt.Fprintf(stderr, "netns-pinctl: nothing pinned here: %v (wrong --state-dir or --conf?)\n", err)
		return 1
	}
	pinstore.LimitMemory()
	// What a command changes (a repair, a release, a forced release, an
	// abandoned teardown it finishes) goes to the network's log like the
	// plugin's own changes: the node keeps one account of its pins.
	log, closeLog := pinstore.NewLogger(c, "component", "cli", "command", cmd)
	defer closeLog()
	s, err := openStore(c, log, pinstore.ActorOf(cmd))
	if err != nil {
		fmt.Fprintln(stderr, "netns-pinctl:", err)
		return 1
	}
	defer s.Close()
	switch cmd {
	case "list":
		err = cliList(s, stdout, g.json)
	case "inuse":
		err = cliInUse(s, cf.args[0], stdout, g.json)
	case "gc":
		err = cliGC(s, cf.dryRun, stdout, g.json)
	case "release":
		err = cliRelease(s, cf.args[0], cf.force, stdout)
	}
	if err != nil {
		reportCLIError(stderr, err)
		return 1
	}
	return 0
}

// jsonCommands are the commands that print JSON with --json; any other
// refuses the flag rather than ignore it.
var jsonCommands = map[string]bool{"list": true, "inuse": true, "gc": true, "check": true, "uninstall": true}

type globalFlags struct {
	conf  string
	paths map[string]string // conf.PathSetting.Key -> value ("" when not given)
	json  bool
}

// configured: --conf or a path flag was given.
func (g *globalFlags) configured() bool {
	return g.conf != "" || slices.ContainsFunc(slices.Collect(maps.Values(g.paths)), func(v string) bool { return v != "" })
}

// define adds the global flags to fs, bound to g's fields with their
// current values as defaults, so that a second flag set (the command's)
// keeps what the first one parsed.
func (g *globalFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&g.conf, "conf", g.conf, "read the plugin entry (pinDir, stateDir, inUse, cacheDirs, logFile, logLevel) from this conflist, NetworkAttachmentDefinition config or plugin entry")
	for _, ps := range conf.PathSettings {
		fs.Func(ps.Flag, ps.Key+" (default "+ps.Default+")", func(v string) error { g.paths[ps.Key] = v; return nil })
	}
	fs.BoolVar(&g.json, "json", g.json, "print JSON for machines")
}

type commandFlags struct {
	args     []string
	dryRun   bool // gc
	force    bool // release
	interval time.Duration
	once     bool   // sweep
	metrics  string // sweep --metrics-address
	// check
	cephCSIConfig string
	csiPIDs       []int
	csiContainers []string
	// uninstall
	cniBinDir string
	cacheDirs []string
}

// commandUsage is each command's synopsis, printed when it is misused.
var commandUsage = map[string]string{
	"list":      "netns-pinctl list",
	"inuse":     "netns-pinctl inuse <cluster (namespace/name) | attachment>",
	"gc":        "netns-pinctl gc [--dry-run]",
	"release":   "netns-pinctl release <attachment> [--force]",
	"sweep":     "netns-pinctl sweep [--interval 10s | --once] [--metrics-address HOST:PORT]",
	"check":     "netns-pinctl check [--ceph-csi-config FILE] [--csi-pid PID]... [--csi-container ID]...",
	"uninstall": "netns-pinctl uninstall --cni-bin-dir DIR [--dry-run] [--cache-dir DIR]...",
}

// parseCommand reads the command's flags and arguments in any order, with
// the global flags allowed among them. false, after printing the usage,
// when the command is unknown or misused.
func parseCommand(cmd string, rest []string, g *globalFlags, stderr io.Writer) (commandFlags, bool) {
	cf := commandFlags{interval: 10 * time.Second}
	usage, known := commandUsage[cmd]
	if !known {
		fmt.Fprint(stderr, cliUsage)
		return cf, false
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage:", usage, "[global flags]") }
	g.define(fs)
	wantArgs := 0
	switch cmd {
	case "inuse":
		wantArgs = 1
	case "gc":
		fs.BoolVar(&cf.dryRun, "dry-run", false, "report what would change, change nothing")
	case "release":
		wantArgs = 1
		fs.BoolVar(&cf.force, "force", false, "release even while Ceph clients use the netns (their I/O will hang)")
	case "sweep":
		fs.DurationVar(&cf.interval, "interval", cf.interval, "time between rounds")
		fs.BoolVar(&cf.once, "once", false, "run one round and exit (1 if it failed)")
		fs.StringVar(&cf.metrics, "metrics-address", "", "refused: netns-pin-agent serves the metrics")
	case "uninstall":
		fs.StringVar(&cf.cniBinDir, "cni-bin-dir", "", "the CNI bin folder netns-pin was installed into (required)")
		fs.BoolVar(&cf.dryRun, "dry-run", false, "report what would be removed and what remains, remove nothing")
		fs.Func("cache-dir", "a CNI cache folder to look for attachments through netns-pin (repeatable; default the configuration's cacheDirs)", func(v string) error {
			if !filepath.IsAbs(v) {
				return fmt.Errorf("not an absolute path: %q", v)
			}
			cf.cacheDirs = append(cf.cacheDirs, filepath.Clean(v))
			return nil
		})
	case "check":
		fs.StringVar(&cf.cephCSIConfig, "ceph-csi-config", "", "ceph-csi's config.json (or its ConfigMap as JSON): check every netNamespaceFilePath")
		fs.Func("csi-pid", "a csi node plugin process (repeatable)", func(v string) error {
			pid, err := strconv.Atoi(v)
			if err != nil || pid <= 0 {
				return fmt.Errorf("not a pid: %q", v)
			}
			cf.csiPIDs = append(cf.csiPIDs, pid)
			return nil
		})
		fs.Func("csi-container", "the csi node plugin's container ID, as crictl ps prints it (repeatable): its processes, by their cgroup", func(v string) error {
			if len(v) < 12 || strings.Trim(v, "0123456789abcdef") != "" {
				return fmt.Errorf("not a container ID (12 to 64 hex digits): %q", v)
			}
			cf.csiContainers = append(cf.csiContainers, v)
			return nil
		})
	}
	for {
		if err := fs.Parse(rest); err != nil {
			return cf, false
		}
		if fs.NArg() == 0 {
			break
		}
		cf.args, rest = append(cf.args, fs.Arg(0)), fs.Args()[1:]
	}
	if len(cf.args) != wantArgs || cf.interval <= 0 || (cmd == "uninstall" && cf.cniBinDir == "") {
		fs.Usage()
		return cf, false
	}
	return cf, true
}

// reportCLIError prints a failed command's error, with a hint where one
// helps.
func reportCLIError(stderr io.Writer, err error) {
	fmt.Fprintln(stderr, "netns-pinctl:", err)
	switch {
	case errors.Is(err, netnsstore.ErrOtherPinDir):
		fmt.Fprintln(stderr, "netns-pinctl: give the --pin-dir of those records, or --conf with the network's configuration")
	case errors.Is(err, netnsstore.ErrOtherStateDir):
		fmt.Fprintln(stderr, "netns-pinctl: give the --state-dir of those pins, or --conf with the network's configuration")
	}
}

// inspect is what list and inuse read: the store as Inspect sees it under
// the lock, changing nothing (no repair: a record that needs settling is
// shown as such), with an error naming each record that cannot be used.
func inspect(s *netnsstore.Store) (*netnsstore.Snapshot, error) {
	snap, err := s.Inspect()
	if err != nil {
		return nil, err
	}
	if snap.OwnerErr != nil {
		return nil, snap.OwnerErr
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(snap.Unreadable)) {
		errs = append(errs, snap.Unreadable[n])
	}
	return snap, errors.Join(errs...)
}

// settlesNote is how list and inuse show a record the next operation
// changes.
func settlesNote(snap *netnsstore.Snapshot, r *netnsstore.Record) string {
	if why := snap.Settles(r); why != "" {
		return "settles at the next operation: " + why
	}
	return ""
}

func cliList(s *netnsstore.Store, w io.Writer, asJSON bool) error {
	// The readable records, then the error about those that are not: a
	// record that cannot be read blocks every release and must show.
	snap, err := inspect(s)
	if snap == nil || err != nil && len(snap.Records) == 0 {
		return err
	}
	rs := snap.Records
	if asJSON {
		type listed struct {
			*netnsstore.Record
			Settles string `json:"settles,omitempty"`
		}
		out := []any{}
		// A record but the content of its captured libcni cache entry (the
		// chain's configuration, CNI_ARGS and capability arguments, which
		// may carry pod annotations): only the file it came from is named,
		// and the pod by its namespace, name and UID alone.
		for _, r := range rs {
			c := *r
			if r.Teardown != nil {
				td := *r.Teardown
				td.Cache = nil
				c.Teardown = &td
			}
			out = append(out, listed{&c, settlesNote(snap, &c)})
		}
		for _, f := range snap.Dropped {
			out = append(out, struct {
				Attachment string `json:"attachment"`
				Settles    string `json:"settles"`
			}{f.Attachment, droppedNote(f)})
		}
		return errors.Join(json.NewEncoder(w).Encode(out), err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// What held the pin when a release was last refused: a list shows the
	// records, not a check (inuse runs one). An active pin was never
	// asked to go, which is not the same as "nothing holds it".
	fmt.Fprintln(tw, "CLUSTER\tATTACHMENT\tPOD\tSTATE\tAGE\tNETNS\tIPS\tHELD AT LAST DEL")
	for _, r := range rs {
		held := "not asked yet (netns-pinctl inuse checks now)"
		if r.State != "active" {
			held = "-"
		}
		if len(r.References) > 0 {
			held = r.References[0]
			if len(r.References) > 1 {
				held += fmt.Sprintf(" (+%d more)", len(r.References)-1)
			}
		}
		state := r.State
		if r.Abandoned {
			state += " (abandoned by the runtime)"
		}
		if note := settlesNote(snap, r); note != "" {
			state += " (" + note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Attachment, r.PodNS, r.PodName, state,
			human.Age(time.Since(r.Created)), r.NetnsID(), strings.Join(r.IPs, ","), held)
	}
	for _, f := range snap.Dropped {
		fmt.Fprintf(tw, "-\t%s\t-\tunreadable (%s)\t-\t-\t-\t-\n", f.Attachment, droppedNote(f))
	}
	return errors.Join(tw.Flush(), err)
}

// droppedNote is how list shows a record that a power loss tore in an
// earlier boot, which the next operation drops (netnsstore.Snapshot.Dropped).
func droppedNote(f netnsstore.Finding) string {
	return "settles at the next operation: dropped, " + f.Reason
}

type inUseReport struct {
	Attachment string            `json:"attachment"`
	Cluster    string            `json:"cluster"`
	Pod        string            `json:"pod"`
	State      string            `json:"state"`
	Settles    string            `json:"settles,omitempty"`
	References []inuse.Reference `json:"references"`
}

// referencesNow is the in-use check of r on what a DEL would check (the
// pin or the runtime's netns, the addresses recorded and present, the
// in-use settings of r's pin as well as c's), changing nothing.
func referencesNow(s *netnsstore.Store, r *netnsstore.Record) ([]inuse.Reference, error) {
	uses, err := s.UsesNow(r)
	if err != nil {
		return nil, err
	}
	refs := make([]inuse.Reference, 0, len(uses))
	for _, u := range uses {
		ref, ok := u.Detail.(inuse.Reference)
		if !ok {
			return nil, fmt.Errorf("in-use check of %s: %q comes without its details", r.Attachment, u.What)
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

func cliInUse(s *netnsstore.Store, what string, w io.Writer, asJSON bool) (err error) {
	snap, listErr := inspect(s)
	if snap == nil || listErr != nil && len(snap.Records) == 0 {
		return listErr
	}
	// Records that cannot be read are reported after what could be checked.
	defer func() { err = errors.Join(err, listErr) }()
	var reports []inUseReport
	for _, r := range snap.Records {
		if r.Attachment != what && r.Cluster != what {
			continue
		}
		refs, err := referencesNow(s, r)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Attachment, err)
		}
		reports = append(reports, inUseReport{r.Attachment, r.Cluster, r.PodNS + "/" + r.PodName, r.State, settlesNote(snap, r), refs})
	}
	if len(reports) == 0 {
		return fmt.Errorf("no pinned attachment or cluster %q (see netns-pinctl list)", what)
	}
	if asJSON {
		return json.NewEncoder(w).Encode(reports)
	}
	for _, rep := range reports {
		state := rep.State
		if rep.Settles != "" {
			state += " (" + rep.Settles + ")"
		}
		fmt.Fprintf(w, "%s  cluster %s  pod %s  %s: ", rep.Attachment, rep.Cluster, rep.Pod, state)
		if len(rep.References) == 0 {
			fmt.Fprintln(w, "not in use")
			continue
		}
		fmt.Fprintf(w, "in use by %d:\n", len(rep.References))
		for _, ref := range rep.References {
			fmt.Fprintf(w, "  - %s\n", ref.String())
		}
	}
	return nil
}

func cliGC(s *netnsstore.Store, dryRun bool, w io.Writer, asJSON bool) error {
	findings, err := s.Sweep(dryRun)
	if asJSON {
		return cmp.Or(json.NewEncoder(w).Encode(findings), err)
	}
	verb := map[string]string{netnsstore.ActionDrop: "dropped", netnsstore.ActionRelease: "released",
		netnsstore.ActionKeep: "kept", netnsstore.ActionRepin: "pinned again", netnsstore.ActionSettle: "checked",
		netnsstore.ActionForeignLink: "foreign link"}
	if dryRun {
		verb = map[string]string{netnsstore.ActionDrop: "would drop", netnsstore.ActionRelease: "would release",
			netnsstore.ActionKeep: "would keep", netnsstore.ActionRepin: "would pin again", netnsstore.ActionSettle: "would check",
			netnsstore.ActionForeignLink: "foreign link"}
	}
	if len(findings) == 0 {
		fmt.Fprintln(w, "nothing to collect")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range findings {
		why := f.Reason
		if len(f.References) > 0 {
			why += ": " + strings.Join(f.References, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", verb[f.Action], f.Attachment, f.Cluster, why)
	}
	return cmp.Or(tw.Flush(), err)
}

func cliRelease(s *netnsstore.Store, attachment string, force bool, w io.Writer) error {
	released := func(r *netnsstore.Record, err error) error {
		switch {
		case err != nil:
			return err
		case r == nil:
			return fmt.Errorf("no pinned attachment %q (see netns-pinctl list)", attachment)
		case r.Cluster == "":
			fmt.Fprintf(w, "released %s (a pin without a record)\n", attachment)
		default:
			fmt.Fprintf(w, "released %s (cluster %s)\n", attachment, r.Cluster)
		}
		return nil
	}
	if force {
		// Say what the release cuts before cutting it.
		r, err := s.Get(attachment)
		var refs []inuse.Reference
		if err == nil && r != nil {
			refs, err = referencesNow(s, r)
		}
		if err != nil {
			fmt.Fprintf(w, "forcing release of %s without knowing what uses it: %v\n", attachment, err)
		}
		if len(refs) > 0 {
			what := make([]string, len(refs))
			for i, ref := range refs {
				what[i] = ref.String()
			}
			fmt.Fprintf(w, "forcing release of %s while in use by: %s\n", attachment, strings.Join(what, "; "))
		}
		return released(s.ForceRelease(attachment))
	}
	r, err := s.Release(attachment, nil)
	if iu := (*netnsstore.InUseError)(nil); errors.As(err, &iu) {
		return fmt.Errorf("%s is still in use by %s; releasing it would cut their I/O (it would hang until reboot). Use --force to release anyway",
			attachment, strings.Join(iu.References, "; "))
	}
	return released(r, err)
}

// runCheck is `netns-pinctl check`: exit 0 when the node is set up right, 1
// when something is wrong, 2 when something could not be looked at.
func runCheck(c *conf.Config, cf commandFlags, asJSON bool, stdout, stderr io.Writer) int {
	rep := nodecheck.Run(nodecheck.Options{
		PinDir: c.PinDir, StateDir: c.StateDir,
		Sysfs: c.InUse.Sysfs, Debugfs: c.InUse.Debugfs, Proc: c.InUse.Proc, Unattributed: c.InUse.Unattributed,
		CephCSIConfig: cf.cephCSIConfig, CSIPIDs: cf.csiPIDs, CSIContainers: cf.csiContainers,
		Open: func() (*netnsstore.Store, error) {
			return netnsstore.Open(c.PinDir, c.StateDir, netnsstore.Options{Writer: Version})
		},
	})
	write := rep.WriteTable
	if asJSON {
		write = rep.WriteJSON
	}
	if err := write(stdout); err != nil {
		fmt.Fprintln(stderr, "netns-pinctl:", err)
		return nodecheck.ExitUnknown
	}
	return rep.ExitCode()
}

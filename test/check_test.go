package e2e

// `netns-pinctl check` on real namespaces, pins, links and mount namespaces:
// a node set up right passes, and each way of setting it up wrong fails
// with the finding that names it, in the table and in --json alike
// (docs/design.md §16, docs/operating.md "Checking a node").

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// checkFinding is one finding of `netns-pinctl check --json`.
type checkFinding struct {
	Check, Level, What, Where, Fix string
}

type checkReport struct {
	Result   string
	Findings []checkFinding
}

// checkRun is one run of check, as a table and as JSON.
type checkRun struct {
	code  int
	table string
	rep   checkReport
}

// runCheck runs `netns-pinctl --conf <conflist> check args...` twice, for
// people and with --json, and requires both to exit alike.
func runCheck(t *testing.T, c *chain, args ...string) checkRun {
	t.Helper()
	conflist := filepath.Join(c.netconfDir, c.name+".conflist")
	argv := append([]string{"--conf", conflist, "check"}, args...)
	table := pinCLI(c, argv...)
	js := pinCLI(c, append(argv, "--json")...)
	run := checkRun{code: exitCode(t, table), table: table.Stdout}
	require.NoError(t, json.Unmarshal([]byte(js.Stdout), &run.rep), "check --json: %s", js)
	require.Equal(t, run.code, exitCode(t, js), "check and check --json exit alike\n%s\n%s", table, js)
	t.Logf("netns-pinctl check %s -> %d\n%s", strings.Join(args, " "), run.code, run.table)
	return run
}

// exitCode is the exit status of a command that ran to its end.
func exitCode(t *testing.T, r host.CmdResult) int {
	t.Helper()
	if r.Err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, r.Err, &ee, "%s", r)
	return ee.ExitCode()
}

// find returns the findings of level at check whose where and what
// contain the given texts.
func (r checkRun) find(check, level, where, what string) []checkFinding {
	var out []checkFinding
	for _, f := range r.rep.Findings {
		if f.Check == check && f.Level == level && strings.Contains(f.Where, where) && strings.Contains(f.What, what) {
			out = append(out, f)
		}
	}
	return out
}

// requireFinding requires a finding in the JSON and the same line in the
// table, with a fix.
func (r checkRun) requireFinding(t *testing.T, check, level, where, what string) checkFinding {
	t.Helper()
	fs := r.find(check, level, where, what)
	require.NotEmpty(t, fs, "no %s finding of %s at %q saying %q in:\n%s", level, check, where, what, r.table)
	f := fs[0]
	if level == "error" {
		require.NotEmpty(t, f.Fix, "an error says how to fix it: %+v", f)
		require.Contains(t, r.table, f.Fix, "the table shows the fix")
	}
	require.Contains(t, r.table, f.What, "the table shows the finding")
	return f
}

func (r checkRun) errors() []checkFinding {
	var out []checkFinding
	for _, f := range r.rep.Findings {
		if f.Level == "error" || f.Level == "unknown" {
			out = append(out, f)
		}
	}
	return out
}

// csiProcess is a stand-in for a csi node plugin: a process with its own
// command name in a mount namespace of its own, made with the given
// propagation (slave: as a container with a Bidirectional or
// HostToContainer volume receives the host's mounts; private: as one that
// receives nothing).
type csiProcess struct {
	name string
	pid  int
}

func startCSIProcess(t *testing.T, c *chain, propagation string) csiProcess {
	t.Helper()
	name := "csi-" + host.RandHex(6)
	exe := filepath.Join(c.work, name)
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	data, err := os.ReadFile(sleep)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(exe, data, 0o755))
	cmd := exec.Command("unshare", "--mount", "--propagation", propagation, "--", exe, "600")
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { assert.NoError(t, host.Stop(cmd)) })
	self, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	pid := cmd.Process.Pid
	require.True(t, host.Poll(30*time.Second, 10*time.Millisecond, func() bool {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		return strings.TrimSpace(string(comm)) == name && mnt != "" && mnt != self
	}), "the csi stand-in runs in a mount namespace of its own")
	return csiProcess{name: name, pid: pid}
}

// writeCephCSIConfig writes a ceph-csi config.json with one cluster whose
// rbd and cephFS netNamespaceFilePath are the given paths.
func writeCephCSIConfig(t *testing.T, c *chain, rbd, cephFS string) string {
	t.Helper()
	entry := map[string]any{"clusterID": "my-cluster", "monitors": []string{"192.0.2.10:3300"}}
	if rbd != "" {
		entry["rbd"] = map[string]any{"netNamespaceFilePath": rbd}
	}
	if cephFS != "" {
		entry["cephFS"] = map[string]any{"netNamespaceFilePath": cephFS, "subvolumeGroup": "csi"}
	}
	path := filepath.Join(c.work, "config-"+host.RandHex(4)+".json")
	require.NoError(t, os.WriteFile(path, []byte(mustJSON([]any{entry})), 0o644))
	return path
}

// healthyNode is a chain with two holder generations of the cluster (the
// second pinned after the csi stand-in started, so that only propagation
// brings its pin there), a running sweeper, and a ceph-csi config.json
// that names the cluster's link.
type healthyNode struct {
	c      *chain
	old    *attachment
	holder *attachment
	csi    csiProcess
	config string
	sweep  *sweeper
}

func newHealthyNode(t *testing.T, csiPropagation string) healthyNode {
	t.Helper()
	c := newChain(t, chainSpec{})
	old := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	old.mustAdd(t)
	csi := startCSIProcess(t, c, csiPropagation)
	holder := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	holder.mustAdd(t)
	assertLinkTo(t, c.defaultLink(), holder)
	sw := startSweeper(t, c)
	status := filepath.Join(c.stateDir, "sweeper.json")
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		_, err := os.Stat(status)
		return err == nil
	}), "the sweeper writes its status")
	return healthyNode{c: c, old: old, holder: holder, csi: csi, sweep: sw, config: writeCephCSIConfig(t, c, c.defaultLink(), c.defaultLink())}
}

func (n healthyNode) check(t *testing.T, extra ...string) checkRun {
	t.Helper()
	return runCheck(t, n.c, append([]string{"--csi-pid", fmt.Sprint(n.csi.pid)}, extra...)...)
}

func TestCheckPassesOnAHealthyNode(t *testing.T) {
	n := newHealthyNode(t, "slave")
	r := n.check(t, "--ceph-csi-config", n.config)
	require.Equal(t, 0, r.code, "a node set up right passes: %v", r.errors())
	require.Equal(t, "ok", r.rep.Result)
	require.Empty(t, r.errors())
	r.requireFinding(t, "pinDir", "ok", n.c.pinDir, "shared mount")
	r.requireFinding(t, "link", "ok", n.c.pinDir, "1 link(s)")
	r.requireFinding(t, "cephCSI", "ok", "rbd.netNamespaceFilePath", "active pin "+n.holder.attachmentName())
	r.requireFinding(t, "cephCSI", "ok", "cephFS.netNamespaceFilePath", "active pin "+n.holder.attachmentName())
	r.requireFinding(t, "csiPlugin", "ok", fmt.Sprintf("pid %d (%q)", n.csi.pid, n.csi.name), "same netns")
	r.requireFinding(t, "sweeper", "ok", "sweeper.json", "running")
	require.NotEmpty(t, r.find("inUse", "info", "", ""), "check says which in-use signals are live")
	// By pid, and without a ceph-csi configuration (the links of the
	// store's clusters are checked in the stand-in).
	r = runCheck(t, n.c, "--csi-pid", fmt.Sprint(n.csi.pid))
	require.Equal(t, 0, r.code, "%v", r.errors())
	r.requireFinding(t, "csiPlugin", "ok", fmt.Sprintf("pid %d", n.csi.pid), "1 link(s) lead to the same netns")

	// The old holder is released: still healthy, nothing dangles.
	require.NoError(t, n.old.del())
	r = n.check(t, "--ceph-csi-config", n.config)
	require.Equal(t, 0, r.code, "%v", r.errors())
}

func TestCheckFindsAPrivatePinDir(t *testing.T) {
	n := newHealthyNode(t, "slave")
	hosttest.MustRun(t, "mount", "--make-private", n.c.pinDir)
	r := n.check(t)
	require.Equal(t, 1, r.code)
	require.Equal(t, "problems", r.rep.Result)
	f := r.requireFinding(t, "pinDir", "error", n.c.pinDir, "not shared")
	assert.Contains(t, f.Fix, "mount --make-rshared "+n.c.pinDir)
}

func TestCheckFindsADanglingLink(t *testing.T) {
	n := newHealthyNode(t, "slave")
	stray := filepath.Join(n.c.pinDir, "other-ns", "gone.net")
	require.NoError(t, os.MkdirAll(filepath.Dir(stray), 0o755))
	require.NoError(t, os.Symlink("../pins/e2e-gone.eth0", stray))
	r := n.check(t)
	require.Equal(t, 1, r.code)
	f := r.requireFinding(t, "link", "error", stray, "dangling link")
	assert.Contains(t, f.Fix, "rm "+stray)
}

func TestCheckFindsALinkToAReleasedPin(t *testing.T) {
	n := newHealthyNode(t, "slave")
	require.NoError(t, n.old.del())
	assertReleased(t, n.old, n.old.netns.Path)
	// The sweeper's next round settles the store and re-points the link by
	// the rule (the fix the finding names): stopped first, so that both
	// runs of check see what it must find.
	n.sweep.stop(t)
	// The link put back at the released pin, as a hand-made link or a
	// restored backup would.
	link := n.c.defaultLink()
	tmp := link + ".tmp"
	require.NoError(t, os.Symlink("../pins/"+n.old.attachmentName(), tmp))
	require.NoError(t, os.Rename(tmp, link))
	r := n.check(t, "--ceph-csi-config", n.config)
	require.Equal(t, 1, r.code)
	f := r.requireFinding(t, "link", "error", link, "the link rule says "+n.holder.attachmentName())
	assert.Contains(t, f.What, "a released pin")
	assert.Contains(t, f.Fix, "netns-pinctl gc")
	r.requireFinding(t, "cephCSI", "error", "rbd.netNamespaceFilePath", "does not lead to a network namespace")

	// gc puts it right, and check says so (with its sweeper running again).
	gc := pinCLI(n.c, "--conf", filepath.Join(n.c.netconfDir, n.c.name+".conflist"), "gc")
	require.NoError(t, gc.Err, "%s", gc)
	sw := startSweeper(t, n.c)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		var st struct {
			PID       int       `json:"pid"`
			LastRound time.Time `json:"lastRound"`
		}
		b, err := os.ReadFile(filepath.Join(n.c.stateDir, "sweeper.json"))
		return err == nil && json.Unmarshal(b, &st) == nil && st.PID == sw.cmd.Process.Pid && !st.LastRound.IsZero()
	}), "the sweeper started again has not finished a round")
	r = n.check(t, "--ceph-csi-config", n.config)
	require.Equal(t, 0, r.code, "%v", r.errors())
}

func TestCheckFindsCephCSIPathsThatLeadNowhere(t *testing.T) {
	n := newHealthyNode(t, "slave")
	missing := filepath.Join(n.c.pinDir, clusterNS, "no-such-cluster.net")
	rook := "/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/" + clusterNS + ".net.ns"
	config := writeCephCSIConfig(t, n.c, missing, rook)
	r := n.check(t, "--ceph-csi-config", config)
	require.Equal(t, 1, r.code)
	r.requireFinding(t, "cephCSI", "error", "rbd.netNamespaceFilePath", strconv.Quote(missing)+" is no link of a cluster netns-pin knows")
	f := r.requireFinding(t, "cephCSI", "error", "cephFS.netNamespaceFilePath", "Rook's old holder path")
	assert.Contains(t, f.Fix, `/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/{{.Namespace}}.net.ns`, "the fix is the links entry to add")

	// A configuration that cannot be read: could not look.
	r = n.check(t, "--ceph-csi-config", filepath.Join(n.c.work, "absent.json"))
	require.Equal(t, 2, r.code, "%v", r.errors())
	require.Equal(t, "incomplete", r.rep.Result)
	r.requireFinding(t, "cephCSI", "unknown", "absent.json", "cannot read")
}

func TestCheckFindsACSIPluginThatCannotSeeThePin(t *testing.T) {
	n := newHealthyNode(t, "private")
	r := n.check(t, "--ceph-csi-config", n.config)
	require.Equal(t, 1, r.code)
	f := r.requireFinding(t, "csiPlugin", "error", fmt.Sprintf("pid %d (%q): %q", n.csi.pid, n.csi.name, n.c.defaultLink()), "did not propagate")
	assert.Contains(t, f.Fix, "mountPropagation: Bidirectional")
}

func TestCheckFindsNoSweeper(t *testing.T) {
	c := newChain(t, chainSpec{})
	a := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	a.mustAdd(t)
	r := runCheck(t, c)
	require.Equal(t, 1, r.code)
	r.requireFinding(t, "sweeper", "error", "sweeper.json", "no sweeper has run")

	// A sweeper that stopped says so.
	sw := startSweeper(t, c)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join(c.stateDir, "sweeper.json"))
		return err == nil
	}))
	sw.stop(t)
	r = runCheck(t, c)
	require.Equal(t, 1, r.code)
	r.requireFinding(t, "sweeper", "error", "sweeper.json", "stopped")
}

func TestCheckFindsAPinWithoutARecord(t *testing.T) {
	n := newHealthyNode(t, "slave")
	require.NoError(t, os.Remove(n.old.recordPath()))
	r := n.check(t)
	require.Equal(t, 1, r.code)
	r.requireFinding(t, "pin", "error", n.old.pinPath(), "without a record")
	// and a record whose pin is gone, with the sweeper stopped: its round
	// would repair the record before check looks
	n.sweep.stop(t)
	hosttest.MustRun(t, "umount", "-l", n.holder.pinPath())
	r = n.check(t)
	r.requireFinding(t, "pin", "error", n.holder.pinPath(), "plain file")
}

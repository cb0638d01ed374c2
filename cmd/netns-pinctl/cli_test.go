package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// cliStore pins one holder netns in a temporary pinDir/stateDir (root:
// real namespaces and bind mounts) and returns the CLI flags that select it.
func cliStore(t *testing.T) (*netnsstore.Store, []string) {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "this test makes network namespaces and mounts: run it as root")
	root := hosttest.NewWorkDir(t, "netns-pin-cli-")
	s, err := netnsstore.Open(filepath.Join(root, "pins"), filepath.Join(root, "state"), netnsstore.Options{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	n := hosttest.NewNetns(t, "npcli")
	_, err = s.Pin(netnsstore.Record{ContainerID: "c1", IfName: "net1", Network: "ceph-public", Cluster: "rook-ceph/my-cluster",
		PodNS: "rook-ceph", PodName: "csi-holder-a", NetnsPath: n.Path, Links: []string{filepath.Join(s.PinDir, "rook-ceph/my-cluster.net")}})
	require.NoError(t, err)
	return s, []string{"--pin-dir", s.PinDir, "--state-dir", s.StateDir}
}

func runCLIT(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runCLI(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestCLIListInUseReleaseGC(t *testing.T) {
	s, flags := cliStore(t)
	link := filepath.Join(s.PinDir, "rook-ceph/my-cluster.net")

	out, _, code := runCLIT(t, append(flags, "list")...)
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^CLUSTER\s+ATTACHMENT\s+POD\s+STATE\s+AGE`, out)
	assert.Regexp(t, `(?m)^rook-ceph/my-cluster\s+c1\.net1\s+rook-ceph/csi-holder-a\s+active\s+\d+s`, out)
	assert.Contains(t, out, "HELD AT LAST DEL")
	assert.Contains(t, out, "not asked yet (netns-pinctl inuse checks now)", "an active pin is not shown as held by nothing")

	out, _, code = runCLIT(t, append(flags, "inuse", "rook-ceph/my-cluster")...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "not in use")

	// A real process inside the pinned netns, as ceph-csi starts ceph-fuse;
	// it has entered the netns when StartInNetns returns.
	proc := hosttest.StartInNetns(t, link, "sleep", "600")

	out, _, code = runCLIT(t, append(flags, "--json", "inuse", "c1.net1")...)
	require.Equal(t, 0, code)
	var reports []inUseReport
	require.NoError(t, json.Unmarshal([]byte(out), &reports))
	require.Len(t, reports, 1)
	require.Len(t, reports[0].References, 1)
	assert.Contains(t, reports[0].References[0].String(), itoa(proc.Process.Pid))

	_, errOut, code := runCLIT(t, append(flags, "release", "c1.net1")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "still in use by process "+itoa(proc.Process.Pid))
	assert.Contains(t, errOut, "--force")
	assert.FileExists(t, filepath.Join(s.PinDir, "pins/c1.net1"))

	out, _, code = runCLIT(t, append(flags, "gc", "--dry-run")...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "would keep", "the refused release left it draining, and it is still in use")

	out, _, code = runCLIT(t, append(flags, "list")...)
	require.Equal(t, 0, code)
	assert.Regexp(t, `draining\s+.*process `+itoa(proc.Process.Pid)+` \(sleep\)`, out, "a draining pin shows what held it at the refusal")

	out, _, code = runCLIT(t, append(flags, "release", "c1.net1", "--force")...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "forcing release of c1.net1 while in use by: process "+itoa(proc.Process.Pid))
	assert.Contains(t, out, "released c1.net1")
	assert.NoFileExists(t, filepath.Join(s.PinDir, "pins/c1.net1"))

	_, errOut, code = runCLIT(t, append(flags, "release", "c1.net1")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no pinned attachment")
}

func TestCLIGCReleasesDrainingPinOnceUnused(t *testing.T) {
	s, flags := cliStore(t)
	busy, err := netnsstore.Open(s.PinDir, s.StateDir, netnsstore.Options{InUse: func(*netnsstore.Record, string) ([]netnsstore.Use, error) {
		return []netnsstore.Use{{What: "rbd0 p/i client1 10.0.0.1"}}, nil
	}})
	require.NoError(t, err)
	defer busy.Close()
	_, err = busy.Release("c1.net1", nil)
	var inUse *netnsstore.InUseError
	require.ErrorAs(t, err, &inUse)

	out, _, code := runCLIT(t, append(flags, "gc", "--dry-run")...)
	require.Equal(t, 0, code)
	assert.Regexp(t, `would release\s+c1\.net1`, out)
	assert.FileExists(t, filepath.Join(s.PinDir, "pins/c1.net1"), "dry run changes nothing")

	out, _, code = runCLIT(t, append(flags, "gc")...)
	require.Equal(t, 0, code)
	assert.Regexp(t, `released\s+c1\.net1`, out)
	assert.NoFileExists(t, filepath.Join(s.PinDir, "pins/c1.net1"))

	out, _, code = runCLIT(t, append(flags, "gc")...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "nothing to collect")
}

func TestCLIUsageErrors(t *testing.T) {
	_, errOut, code := runCLIT(t, "bogus")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "usage:")
	_, errOut, code = runCLIT(t, "--conf", "/nonexistent/conf", "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "/nonexistent/conf")
	out, _, code := runCLIT(t, "version")
	assert.Equal(t, 0, code)
	assert.Equal(t, versionLine()+"\n", out)
	assert.Regexp(t, `^netns-pinctl \S+`, out, "its name and version")
	_, errOut, code = runCLIT(t, "version", "--json")
	assert.Equal(t, 2, code, "no flag is ignored")
	assert.Contains(t, errOut, "usage: netns-pinctl version")
}

func itoa(i int) string { return strconv.Itoa(i) }

// Flags go before or after the command, and none is ever ignored: a flag
// after `list` used to be dropped, so `list --state-dir <other>` listed the
// default store. Extra arguments are usage errors.
func TestCLIFlagsAnywhereAndNoneIgnored(t *testing.T) {
	s, flags := cliStore(t)
	for _, args := range [][]string{
		append([]string{"list", "--json"}, flags...),
		append(append([]string{"list"}, flags[:2]...), append([]string{"--json"}, flags[2:]...)...),
		append(flags, "--json", "list"),
	} {
		out, errOut, code := runCLIT(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		var recs []netnsstore.Record
		require.NoError(t, json.Unmarshal([]byte(out), &recs), "%v prints JSON", args)
		require.Len(t, recs, 1)
	}
	out, errOut, code := runCLIT(t, append(flags, "inuse", "c1.net1", "--json")...)
	require.Equal(t, 0, code, errOut)
	var reports []inUseReport
	require.NoError(t, json.Unmarshal([]byte(out), &reports))
	out, errOut, code = runCLIT(t, append(flags, "gc", "--json", "--dry-run")...)
	require.Equal(t, 0, code, errOut)
	assert.True(t, json.Valid([]byte(out)), "%s", out)

	_, errOut, code = runCLIT(t, "list", "--state-dir", filepath.Join(t.TempDir(), "nothing-here"))
	assert.Equal(t, 1, code, "the flag after the command is used")
	assert.Contains(t, errOut, "nothing pinned here")

	for _, args := range [][]string{
		{"list", "extra"}, {"inuse"}, {"inuse", "a", "b"}, {"gc", "now"}, {"release"},
		{"release", "c1.net1", "c2.net1"}, {"list", "--force"}, {"sweep", "--interval", "0s"}, {"gc", "--bogus"},
	} {
		_, errOut, code := runCLIT(t, append(flags, args...)...)
		assert.Equal(t, 2, code, "%v", args)
		assert.Contains(t, errOut, "usage: netns-pinctl "+args[0], "%v", args)
	}
	// A flag the command does not use is refused, never ignored.
	for _, args := range [][]string{{"release", "c1.net1", "--json"}, {"--json", "release", "c1.net1"}, {"--json", "version"}, {"version", "--json"}, {"sweep", "--once", "--json"}} {
		_, errOut, code := runCLIT(t, append(flags, args...)...)
		assert.Equal(t, 2, code, "%v: %s", args, errOut)
		assert.Regexp(t, `--json: \w+ prints no JSON|usage: netns-pinctl version`, errOut, "%v", args)
	}
	assert.FileExists(t, filepath.Join(s.PinDir, "pins/c1.net1"), "nothing was released")
}

func TestCLIConfReadsTheConflist(t *testing.T) {
	s, _ := cliStore(t)
	conflist := filepath.Join(t.TempDir(), "ceph-public.conflist")
	data := `{"cniVersion":"1.0.0","name":"ceph-public","plugins":[{"type":"macvlan","master":"eth1"},` +
		`{"type":"netns-pin","pinDir":"` + s.PinDir + `","stateDir":"` + s.StateDir + `"}]}`
	require.NoError(t, os.WriteFile(conflist, []byte(data), 0o600))
	out, errOut, code := runCLIT(t, "--conf", conflist, "--json", "list")
	require.Equal(t, 0, code, errOut)
	var recs []netnsstore.Record
	require.NoError(t, json.Unmarshal([]byte(out), &recs))
	require.Len(t, recs, 1)
	assert.Equal(t, "c1.net1", recs[0].Attachment)
	assert.Equal(t, "rook-ceph/my-cluster", recs[0].Cluster)

	_, errOut, code = runCLIT(t, "--state-dir", filepath.Join(t.TempDir(), "nothing-here"), "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "nothing pinned here")
}

// A record that cannot be read shows in list and inuse even beside
// readable ones (exit 1, naming it), and release --force refuses while it
// exists: the links it may own are not touched.
func TestCLIUnreadableRecordBesideGoodOnes(t *testing.T) {
	s, flags := cliStore(t)
	link := filepath.Join(s.PinDir, "rook-ceph/my-cluster.net")
	bad := filepath.Join(s.StateDir, "records", "c9.net1.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"format": 99, "writer": "9.9.9", "attachment": "c9.net1"}`), 0o600))

	out, errOut, code := runCLIT(t, append(flags, "list")...)
	assert.Equal(t, 1, code)
	assert.Regexp(t, `(?m)^rook-ceph/my-cluster\s+c1\.net1`, out, "the readable record is listed")
	assert.Contains(t, errOut, "c9.net1", "and the unreadable one named")
	// the rollback rule (docs/operating.md, "Upgrades and rollbacks"): a
	// record of a newer format names the release the node needs back
	assert.Contains(t, errOut, "record c9.net1: record of a newer format 99, written by netns-pin 9.9.9; this netns-pin (dev) reads formats up to 2: it needs netns-pin 9.9.9 or later")

	_, errOut, code = runCLIT(t, append(flags, "--json", "list")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "c9.net1")

	out, errOut, code = runCLIT(t, append(flags, "inuse", "c1.net1")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "not in use")
	assert.Contains(t, errOut, "c9.net1")

	out, errOut, code = runCLIT(t, append(flags, "release", "c1.net1", "--force")...)
	assert.Equal(t, 1, code, "stdout: %s", out)
	assert.Contains(t, errOut, "c9.net1")
	target, err := os.Readlink(link)
	require.NoError(t, err, "the link stays")
	assert.Equal(t, "../pins/c1.net1", target)
	_, err = host.NSIDOf(filepath.Join(s.PinDir, "pins", "c1.net1"))
	assert.NoError(t, err, "the pin stays a netns")
}

// After a power loss, list shows a record that the power loss tore in the
// earlier boot as what the next operation drops, beside the others, and
// exits 0: it blocks no release. check warns. Neither changes anything.
func TestCLIListAfterAPowerLoss(t *testing.T) {
	s, flags := cliStore(t)
	_, err := s.Pin(netnsstore.Record{ContainerID: "c2", IfName: "net1", Network: "ceph-public", Cluster: "rook-ceph/other",
		PodNS: "rook-ceph", PodName: "csi-holder-b", NetnsPath: hosttest.NewNetns(t, "npcli").Path})
	require.NoError(t, err)
	pin := filepath.Join(s.PinDir, "pins", "c2.net1")
	require.NoError(t, unix.Unmount(pin, unix.MNT_DETACH))
	record := filepath.Join(s.StateDir, "records", "c2.net1.json")
	require.NoError(t, os.WriteFile(record, nil, 0o600))
	marker := filepath.Join(s.StateDir, "boot-id")
	earlier := []byte("11111111-2222-3333-4444-555555555555\n" + s.PinDir + "\n")
	require.NoError(t, os.WriteFile(marker, earlier, 0o600))

	out, errOut, code := runCLIT(t, append(flags, "list")...)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Regexp(t, `(?m)^rook-ceph/my-cluster\s+c1\.net1`, out)
	assert.Regexp(t, `(?m)^-\s+c2\.net1\s+-\s+unreadable \(settles at the next operation: dropped, record left empty or torn by a power loss in the earlier boot 11111111-2222-3333-4444-555555555555\)`, out)

	out, errOut, code = runCLIT(t, append(flags, "--json", "list")...)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 2)
	assert.Equal(t, "c1.net1", listed[0]["attachment"])
	assert.Equal(t, map[string]any{"attachment": "c2.net1",
		"settles": "settles at the next operation: dropped, record left empty or torn by a power loss in the earlier boot 11111111-2222-3333-4444-555555555555"}, listed[1])

	out, _, _ = runCLIT(t, append(flags, "check")...)
	assert.Regexp(t, `(?m)^warning\s+record\s+\S+/c2\.net1\.json\s+record left empty or torn by a power loss in the earlier boot 11111111-2222-3333-4444-555555555555; the next operation drops it`, out, "a warning, not an error")

	data, err := os.ReadFile(marker)
	require.NoError(t, err)
	assert.Equal(t, earlier, data, "list and check change nothing")
	assert.FileExists(t, record)
	assert.FileExists(t, pin)

	_, errOut, code = runCLIT(t, append(flags, "gc")...)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.NoFileExists(t, record, "the next operation drops it")
	assert.NoFileExists(t, pin)
}

// sweep --once that cannot open the store exits 1.
func TestCLISweepOnceFailsWhenTheStoreCannotOpen(t *testing.T) {
	s, flags := cliStore(t)
	require.NoError(t, os.Chmod(s.StateDir, 0o777)) // untrusted: Open refuses
	t.Cleanup(func() { _ = os.Chmod(s.StateDir, 0o700) })
	_, errOut, code := runCLIT(t, append(flags, "sweep", "--once")...)
	assert.Equal(t, 1, code, "stderr: %s", errOut)
}

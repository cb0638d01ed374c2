package e2e

// One test per way an ordinary event used to release a netns that a client
// still used (docs/design.md §8). Each runs the real plugin binary, in real
// network namespaces, with real client processes, through cnitool or
// libcni; only the kernel's rbd sysfs files are a fixture. These tests need
// root.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// client is a process that entered a holder's netns through a path (the
// link, as ceph-csi does), like ceph-fuse or rbd-nbd would.
type client struct {
	cmd *exec.Cmd
}

// startClient runs exe (default sleep) inside the netns at path and waits
// until it is in it.
func startClient(t *testing.T, path string, want host.NSID, exe string) *client {
	t.Helper()
	if exe == "" {
		exe = "sleep"
	}
	require.Equal(t, want, hosttest.StatNS(t, path))
	return &client{cmd: hosttest.StartInNetns(t, path, exe, "600")}
}

// stop ends the client and reaps it, so that it is gone from /proc.
func (c *client) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, host.Stop(c.cmd))
}

// pinCLI runs netns-pinctl, the operator's commands.
func pinCLI(c *chain, args ...string) host.CmdResult {
	return host.RunCmd(host.CmdTimeout, nil, nil, c.env.ctl, args...)
}

// assertKeptInUse checks what a refused DEL must leave: code 11, the netns
// pinned at its pin path, its interface and address, the link into it.
func assertKeptInUse(t *testing.T, a *attachment, err error, ip net.IP) {
	t.Helper()
	require.Error(t, err, "DEL must be refused while a client uses the netns")
	assert.Equal(t, types.ErrTryAgainLater, cniErrorCode(err), "refusal is code 11: %v", err)
	assertNetnsKept(t, a, ip)
}

// assertNetnsKept checks that a's netns is pinned at its pin path with its
// interface and address, and that its IPAM lease stays.
func assertNetnsKept(t *testing.T, a *attachment, ip net.IP) {
	t.Helper()
	assert.Equal(t, a.netns.ID, hosttest.StatNS(t, a.pinPath()), "the pin holds the netns")
	assert.Len(t, mountsAt(t, a.pinPath()), 1, "the pin is mounted")
	assert.True(t, containsIP(nsenterAddrs(t, a.pinPath()), ip), "the netns keeps its interface and %s", ip)
	assert.FileExists(t, a.c.leasePath(ip), "the IPAM lease stays")
}

// Hole: an operator command run with another --pin-dir than the network's
// (here: the default) but the same stateDir did not find the pin, dropped
// the record unchecked, and the holder's next DEL succeeded under a live
// client. Such a command now refuses and changes nothing.
func TestHoleCommandWithAnotherPinDir(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))
	cl := startClient(t, c.defaultLink(), ns.ID, "")

	wrong := filepath.Join(c.work, "wrong-pin-dir")
	require.NoError(t, os.Mkdir(wrong, 0o755))
	for _, cmd := range [][]string{{"list"}, {"gc"}, {"gc", "--dry-run"}, {"inuse", cluster}, {"release", a.attachmentName()}} {
		r := pinCLI(c, append([]string{"--pin-dir", wrong, "--state-dir", c.stateDir}, cmd...)...)
		require.Error(t, r.Err, "%v with another pinDir must refuse", cmd)
		assert.Contains(t, r.Stderr, "pinDir "+c.pinDir, "%v names the records' pinDir", cmd)
		assert.Contains(t, r.Stderr, wrong, "%v names the pinDir it was given", cmd)
		assert.Contains(t, r.Stderr, "--pin-dir", "%v says how to run it", cmd)
	}
	assert.Equal(t, "active", readRecord(t, a.recordPath()).str("state"), "the record is untouched")

	assertKeptInUse(t, a, a.del(), ip)
	cl.stop(t)
	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
}

// Hole: two networks sharing one stateDir with different pinDirs undid each
// other's pins on every ADD and DEL. The second network now refuses.
func TestHoleTwoNetworksShareAStateDir(t *testing.T) {
	c1 := newChain(t, chainSpec{})
	c2 := newChain(t, chainSpec{stateDir: c1.stateDir})
	ns1, ns2 := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
	a1 := c1.newAttachment(t, ns1, holderArgs(), false)
	ip := sandboxIP(t, a1.mustAdd(t))
	cl := startClient(t, c1.defaultLink(), ns1.ID, "")

	a2 := c2.newAttachment(t, ns2, holderArgs(), false)
	_, err := a2.add(t)
	require.Error(t, err, "ADD on a network whose stateDir holds another pinDir's pins")
	assert.Contains(t, err.Error(), "made under pinDir "+c1.pinDir)
	assert.Contains(t, err.Error(), c2.pinDir)
	assert.Empty(t, mountsAt(t, a2.pinPath()))

	assertKeptInUse(t, a1, a1.del(), ip)
	cl.stop(t)
	require.NoError(t, a1.del())
	assertReleased(t, a1, ns1.Path)
}

// Hole: two networks sharing one pinDir with different stateDirs (or an
// operator's command with another --state-dir) saw each other's pins as pins
// without a record, checked them with the addresses their netns had now,
// and released one that a krbd client used from the address it had at ADD.
func TestHoleTwoNetworksShareAPinDir(t *testing.T) {
	fx := newRBDFixture(t)
	c1 := newChain(t, chainSpec{inUse: fx.inUse()})
	c2 := newChain(t, chainSpec{inUse: fx.inUse(), pinDir: c1.pinDir})
	ns1, ns2 := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
	a1 := c1.newAttachment(t, ns1, holderArgs(), false)
	ip := sandboxIP(t, a1.mustAdd(t))
	fx.mapDevice(t, "0", ip, "csi-vol-1")
	// The address the client connected from goes, another comes; the
	// holder is deleted and its runtime's netns with it: only the pin is
	// left to hold the netns.
	hosttest.MustRun(t, "ip", "-n", ns1.Name, "addr", "flush", "dev", "eth0")
	hosttest.MustRun(t, "ip", "-n", ns1.Name, "addr", "add", "10.251.0.9/24", "dev", "eth0")
	err := a1.del()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rbd0 replicapool/csi-vol-1")
	ns1.Delete(t)

	a2 := c2.newAttachment(t, ns2, holderArgs(), false)
	_, err = a2.add(t)
	require.Error(t, err, "ADD on a network whose pinDir holds another stateDir's pins")
	assert.Contains(t, err.Error(), "belongs to stateDir "+c1.stateDir)
	assert.Empty(t, mountsAt(t, a2.pinPath()))
	other := t.TempDir()
	for _, cmd := range [][]string{{"list"}, {"gc"}, {"gc", "--dry-run"}, {"release", a1.attachmentName()}, {"inuse", a1.attachmentName()}} {
		r := pinCLI(c2, append([]string{"--pin-dir", c1.pinDir, "--state-dir", other}, cmd...)...)
		assert.Error(t, r.Err, "%s", r)
		assert.Contains(t, r.Stderr, "belongs to stateDir "+c1.stateDir, "%s", r)
		assert.Contains(t, r.Stderr, "give the --state-dir of those pins", "%s", r)
	}
	assert.Equal(t, a1.netns.ID, hosttest.StatNS(t, a1.pinPath()), "the pin holds the netns")

	fx.unmapDevice(t, "0")
	r := pinCLI(c1, "--conf", filepath.Join(c1.netconfDir, c1.name+".conflist"), "gc")
	require.NoError(t, r.Err, "%s", r)
	assert.Contains(t, r.Stdout, "released")
	assertReleased(t, a1)
}

// Hole: when the network's stateDir (or its pinDir and stateDir) changed
// after a holder was pinned, the holder's DEL found no record in the new
// stateDir and succeeded at once: the runtime then removed the interface
// of a netns that a client still used. A DEL without a record now also
// looks for a pin of the attachment, and refuses while one exists.
func TestHoleStateDirChangedSinceAdd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec2 func(c1 *chain) chainSpec
	}{
		{"stateDir", func(c1 *chain) chainSpec { return chainSpec{pinDir: c1.pinDir, bridge: c1.spec.bridge} }},
		{"pinDir and stateDir", func(c1 *chain) chainSpec { return chainSpec{bridge: c1.spec.bridge} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1 := newChain(t, chainSpec{})
			ns := hosttest.NewNetns(t, "npe2e")
			a := c1.newAttachment(t, ns, holderArgs(), false)
			ip := sandboxIP(t, a.mustAdd(t))
			cl := startClient(t, c1.defaultLink(), ns.ID, "")

			// The network's configuration is edited: the runtime's DEL of
			// the holder comes with the new one.
			c2 := newChain(t, tc.spec2(c1))
			b := c2.newAttachment(t, ns, a.args, false)
			b.containerID, b.noCleanDel = a.containerID, true
			err := b.del()
			assertKeptInUse(t, a, err, ip)
			assert.Contains(t, err.Error(), a.pinPath())

			cl.stop(t)
			require.NoError(t, a.del(), "the DEL with the configuration that pinned it releases")
			assertReleased(t, a, ns.Path)
			require.NoError(t, b.del(), "and then the new configuration's DEL finds nothing")
		})
	}
}

// Hole: a pin unmounted behind the plugin's back (a cleanup script, a node
// shell, a lazy umount) made its record look stale; it was dropped without a
// check and DEL succeeded. Now DEL reaches the netns through CNI_NETNS,
// finds the client, pins it again and refuses.
func TestHolePinUnmountedFromOutside(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), true)
	ip := sandboxIP(t, a.mustAdd(t))
	cl := startClient(t, c.defaultLink(), ns.ID, "")

	hosttest.MustRun(t, "umount", "-l", a.pinPath())
	require.Empty(t, mountsAt(t, a.pinPath()))
	assertKeptInUse(t, a, libcniDel(t, a), ip)
	assertLinkTo(t, c.defaultLink(), a)
	assert.Equal(t, "draining", readRecord(t, a.recordPath()).str("state"))

	// Unmounted again, and now the runtime's own handle is gone too: only
	// the client holds the netns. list only looks and says so; any
	// operation finds it through the client's /proc/<pid>/ns/net and pins
	// it again.
	hosttest.MustRun(t, "umount", "-l", a.pinPath())
	ns.Delete(t)
	r := pinCLI(c, "--pin-dir", c.pinDir, "--state-dir", c.stateDir, "list")
	require.NoError(t, r.Err, "%s", r)
	assert.Regexp(t, `draining \(settles at the next operation: its pin is no longer a mount of its netns\)`, r.Stdout)
	assert.Empty(t, mountsAt(t, a.pinPath()), "list pins nothing again")
	r = pinCLI(c, "--pin-dir", c.pinDir, "--state-dir", c.stateDir, "gc")
	require.NoError(t, r.Err, "%s", r)
	assert.Equal(t, a.netns.ID, hosttest.StatNS(t, a.pinPath()), "pinned again from the client's netns")
	assert.True(t, containsIP(nsenterAddrs(t, a.pinPath()), ip), "the interface and %s live on", ip)

	cl.stop(t)
	r = a.cnitoolRun("del")
	require.NoError(t, r.Err, "%s", r)
	assertReleased(t, a)
}

// libcniDel runs DEL of a's chain through libcni even when a runs through
// cnitool, to see the CNI error code.
func libcniDel(t *testing.T, a *attachment) error {
	t.Helper()
	saved := a.cnitool
	a.cnitool = false
	defer func() { a.cnitool = saved }()
	return a.del()
}

// Hole: when the holder's addresses changed after ADD (a re-lease, an
// operator, IPv6 temporary addresses), DEL replaced the recorded ones, and
// a krbd device mapped from the ADD-time address was no longer "ours".
func TestHoleAddressChangedAfterAdd(t *testing.T) {
	fx := newRBDFixture(t)
	c := newChain(t, chainSpec{inUse: fx.inUse()})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))
	fx.mapDevice(t, "0", ip, "csi-vol-1")

	// The address the client connected from goes; another comes.
	dev := "eth0"
	hosttest.MustRun(t, "ip", "-n", ns.Name, "addr", "flush", "dev", dev)
	hosttest.MustRun(t, "ip", "-n", ns.Name, "addr", "add", "10.251.0.7/24", "dev", dev)
	err := a.del()
	require.Error(t, err)
	assert.Equal(t, types.ErrTryAgainLater, cniErrorCode(err))
	assert.Contains(t, err.Error(), "rbd0 replicapool/csi-vol-1")
	rec := readRecord(t, a.recordPath())
	assert.True(t, rec.hasIP(ip), "the record keeps the ADD-time address")
	assert.True(t, rec.hasIP(net.ParseIP("10.251.0.7")), "and adds today's")

	fx.unmapDevice(t, "0")
	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
}

// Hole: a pod of a cniArgsNamespaces namespace could claim another
// namespace's cluster with args.cni.pinCluster, become its newest pin, and
// have that cluster's links lead into a netns it controls.
func TestHoleClaimOfAnotherNamespacesCluster(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	holder := c.newAttachment(t, ns, holderArgs(), false)
	holder.mustAdd(t)

	tenant := newChain(t, chainSpec{pinDir: c.pinDir, stateDir: c.stateDir, holders: []map[string]any{},
		cniArgsNamespaces: []string{"tenant"}, pinCluster: cluster})
	tns := hosttest.NewNetns(t, "npe2e")
	ta := tenant.newAttachment(t, tns, podArgs("tenant", "evil"), false)
	_, err := ta.add(t)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `a pod may claim only a cluster of its own namespace "tenant"`)
	assertLinkTo(t, c.defaultLink(), holder)
	_, err = os.Lstat(ta.recordPath())
	assert.True(t, os.IsNotExist(err), "no record for the refused claim")
	assert.Empty(t, mountsAt(t, ta.pinPath()))
}

// Hole: containerd's go-cni takes a teardown error containing "not found"
// for success (and "no such file or directory" with an empty netns path),
// Multus with retryDeleteOnError drops its cache on the latter; reference
// texts come from the machine. A client whose name and an image whose name
// carry those words still yield a refusal that says neither.
func TestHoleRefusalTextNeverReadsAsSuccess(t *testing.T) {
	fx := newRBDFixture(t)
	c := newChain(t, chainSpec{version: "1.1.0", inUse: fx.inUse()})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))
	fx.mapDevice(t, "0", ip, "No Such File Or Directory")
	exe := filepath.Join(t.TempDir(), "not found")
	require.NoError(t, os.Symlink("/bin/sleep", exe))
	cl := startClient(t, c.defaultLink(), ns.ID, exe)

	err := a.del()
	var te *types.Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, types.ErrTryAgainLater, uint(te.Code))
	words := regexp.MustCompile(`(?i)not\s+found|no\s+such\s+file\s+or\s+directory`)
	assert.False(t, words.MatchString(te.Msg), "msg: %s", te.Msg)
	assert.False(t, words.MatchString(te.Details), "details: %s", te.Details)
	assert.False(t, strings.Contains(err.Error(), "not found"), "go-cni's test on the whole error: %v", err)
	assert.Contains(t, te.Details, fmt.Sprintf("process %d", cl.cmd.Process.Pid), "the client is still named")
	assertKeptInUse(t, a, err, ip)

	cl.stop(t)
	fx.unmapDevice(t, "0")
	require.NoError(t, a.del())
}

// Hole: an error looking for the record (anything but "no such file") was
// taken for "never pinned", and DEL succeeded.
func TestHoleRecordLookupErrorIsNotNoRecord(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))

	records := filepath.Join(c.stateDir, "records")
	aside := filepath.Join(c.stateDir, "records-aside")
	require.NoError(t, os.Rename(records, aside))
	require.NoError(t, os.Symlink("records", records)) // ELOOP for any lookup below it
	assertKeptInUse(t, a, a.del(), ip)

	require.NoError(t, os.Remove(records))
	require.NoError(t, os.Rename(aside, records))
	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
}

// Hole: a record that cannot be read was skipped, so its pin looked like an
// orphan and the links its pin served could be removed. While one exists,
// nothing is released; once it is mended, everything proceeds.
func TestHoleUnreadableRecordBlocksReleases(t *testing.T) {
	c := newChain(t, chainSpec{})
	nsOld, nsNew := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
	old := c.newAttachment(t, nsOld, holderArgs(), false)
	ipOld := sandboxIP(t, old.mustAdd(t))
	cur := c.newAttachment(t, nsNew, holderArgs(), false)
	cur.mustAdd(t)
	assertLinkTo(t, c.defaultLink(), cur)

	good, err := os.ReadFile(cur.recordPath())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cur.recordPath(), []byte("{torn"), 0o600))
	err = old.del()
	assertKeptInUse(t, old, err, ipOld)
	assert.Contains(t, err.Error(), "cannot be used")
	assert.Equal(t, cur.netns.ID, hosttest.StatNS(t, cur.pinPath()), "the unreadable record's pin stays")
	assertLinkTo(t, c.defaultLink(), cur)

	require.NoError(t, os.WriteFile(cur.recordPath(), good, 0o600))
	require.NoError(t, old.del())
	assertReleased(t, old, nsOld.Path)
	assertLinkTo(t, c.defaultLink(), cur)
}

// Hole: --pin-dir and --state-dir bypassed the configuration's validation.
func TestHoleOperatorFlagsAreValidated(t *testing.T) {
	c := newChain(t, chainSpec{})
	for _, tc := range []struct{ args []string }{
		{[]string{"--pin-dir", "relative/pins", "list"}},
		{[]string{"--pin-dir", "/srv/x", "--state-dir", "/srv/x/state", "list"}},
		{[]string{"--proc", "proc", "list"}},
	} {
		r := pinCLI(c, tc.args...)
		require.Error(t, r.Err, "%v", tc.args)
		assert.Regexp(t, `pinDir|inUse\.proc`, r.Stderr, "%v names the setting", tc.args)
	}
}

// A record of format 1 (no "format", no "pinDir", written only by
// development builds) or of a newer format is never guessed at: it blocks
// every release, the command line and DEL name why, and the record is left
// as it is; put back as this release wrote it, the pin is released.
func TestRecordOfAnotherFormat(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))
	current, err := os.ReadFile(a.recordPath())
	require.NoError(t, err)

	// the checked-in sample of format 1 with this attachment's values
	rec := readRecord(t, a.recordPath())
	sample, err := os.ReadFile("testdata/record-format1.json")
	require.NoError(t, err)
	old := strings.NewReplacer(
		"ATTACHMENT", a.attachmentName(), "CONTAINERID", a.containerID, "NETWORK", c.name,
		"NETNSPATH", ns.Path, "PINPATH", a.pinPath(), `"NETNSDEV"`, rec.str("netnsDev"), `"NETNSINO"`, rec.str("netnsIno"),
		"IP", ip.String(), "LINK", c.defaultLink(), "BOOTID", rec.str("bootID"), "PODNAME", rec.str("podName"),
	).Replace(string(sample))
	var newer map[string]any
	require.NoError(t, json.Unmarshal(current, &newer))
	newer["format"], newer["writer"] = 99, "9.9.9"
	newerData, err := json.Marshal(newer)
	require.NoError(t, err)

	for _, tc := range []struct {
		name, data, want string
	}{
		{"format 1", old, "format 0, which no release of netns-pin writes"},
		{"newer", string(newerData), "written by netns-pin 9.9.9"},
	} {
		require.NoError(t, os.WriteFile(a.recordPath(), []byte(tc.data), 0o600))
		r := pinCLI(c, "--pin-dir", c.pinDir, "--state-dir", c.stateDir, "list")
		assert.Contains(t, r.Stderr, tc.want, tc.name)
		r = pinCLI(c, "--pin-dir", c.pinDir, "--state-dir", c.stateDir, "gc")
		require.Error(t, r.Err, "%s: gc releases nothing: %s", tc.name, r)
		err := a.del()
		assertKeptInUse(t, a, err, ip)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		data, rerr := os.ReadFile(a.recordPath())
		require.NoError(t, rerr)
		assert.Equal(t, tc.data, string(data), "%s: the record is left as it is", tc.name)
	}

	require.NoError(t, os.WriteFile(a.recordPath(), current, 0o600))
	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
	var st unix.Stat_t
	assert.ErrorIs(t, unix.Lstat(c.defaultLink(), &st), unix.ENOENT)
}

// Hole: the roots of the in-use check could be pointed anywhere. An
// operator's `release` or `gc` with --sysfs, --debugfs or --proc at a folder
// that is not the kernel's (a typo, a container's /host/sys that is not
// there) saw no rbd device, no CephFS client or no process, and released a
// netns they used. Each pin now keeps the in-use settings it was made with,
// and every check also looks with those.
func TestHoleInUseRootsThatAreNotTheKernels(t *testing.T) {
	for _, tc := range []struct {
		root, want string
		client     func(t *testing.T, fx rbdFixture, a *attachment, ip net.IP) (stop func())
	}{
		{"--sysfs", "rbd0 replicapool/csi-vol-1", func(t *testing.T, fx rbdFixture, _ *attachment, ip net.IP) func() {
			fx.mapDevice(t, "0", ip, "csi-vol-1")
			return func() { fx.unmapDevice(t, "0") }
		}},
		{"--debugfs", "client4161", func(t *testing.T, fx rbdFixture, _ *attachment, ip net.IP) func() {
			dir := filepath.Join(fx.debugfs, "ceph", "fsid-1.client4161")
			require.NoError(t, cephfixture.DebugfsClient(fx.debugfs, "fsid-1", 4161, cephfixture.CephFSStatus(4161, ip.String())))
			return func() { require.NoError(t, os.RemoveAll(dir)) }
		}},
		{"--proc", "(sleep)", func(t *testing.T, _ rbdFixture, a *attachment, _ net.IP) func() {
			cl := startClient(t, a.c.defaultLink(), a.netns.ID, "")
			return func() { cl.stop(t) }
		}},
	} {
		t.Run(tc.root, func(t *testing.T) {
			fx := newRBDFixture(t)
			c := newChain(t, chainSpec{inUse: fx.inUse()})
			ns := hosttest.NewNetns(t, "npe2e")
			a := c.newAttachment(t, ns, holderArgs(), false)
			ip := sandboxIP(t, a.mustAdd(t))
			stop := tc.client(t, fx, a, ip)
			assertKeptInUse(t, a, a.del(), ip)

			empty := t.TempDir()
			conflist := filepath.Join(c.netconfDir, c.name+".conflist")
			for _, dir := range []string{empty, filepath.Join(empty, "missing"), "/", "/tmp"} {
				flags := []string{"--conf", conflist, tc.root, dir}
				r := pinCLI(c, append(flags, "release", a.attachmentName())...)
				assert.Error(t, r.Err, "release must refuse: %s", r)
				if tc.root == "--proc" {
					// Without a /proc nothing can be checked: every
					// command fails and says where it looked.
					for _, cmd := range [][]string{{"gc"}, {"inuse", a.attachmentName()}} {
						r = pinCLI(c, append(flags, cmd...)...)
						assert.Error(t, r.Err, "%s", r)
						assert.Contains(t, r.Stderr, filepath.Join(dir, "thread-self"), "%s", r)
					}
				} else {
					assert.Contains(t, r.Stdout+r.Stderr, tc.want, "%s", r)
					r = pinCLI(c, append(flags, "gc")...)
					assert.NoError(t, r.Err, "%s", r)
					assert.Regexp(t, `kept +`+a.attachmentName()+`.*`+regexp.QuoteMeta(tc.want), r.Stdout, "%s", r)
					r = pinCLI(c, append(flags, "inuse", a.attachmentName())...)
					assert.NoError(t, r.Err, "%s", r)
					assert.Contains(t, r.Stdout, tc.want, "inuse reports the pin's reference: %s", r)
				}
				assertNetnsKept(t, a, ip)
				require.FileExists(t, a.recordPath())
			}
			assertKeptInUse(t, a, a.del(), ip)

			stop()
			require.NoError(t, a.del())
			assertReleased(t, a, ns.Path)
		})
	}
}

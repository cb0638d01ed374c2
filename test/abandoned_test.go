package e2e

// When the runtime gives up on a refused DEL, the sweeper (netns-pin
// sweep) finishes the teardown once nothing uses the netns, IPAM included;
// when the runtime keeps retrying, the sweeper leaves the record to it.
// These tests need root.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// countingCNIPath is a CNI_PATH with every plugin of the suite's, where
// host-local first appends "<command> <container id>" to the returned log:
// the lease must be given back exactly once, by whoever finishes.
func countingCNIPath(t *testing.T) (dir, calls string) {
	t.Helper()
	e := requireEnv(t)
	dir = filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	entries, err := os.ReadDir(e.cniPath)
	require.NoError(t, err)
	for _, en := range entries {
		if en.Name() != "host-local" {
			require.NoError(t, os.Symlink(filepath.Join(e.cniPath, en.Name()), filepath.Join(dir, en.Name())))
		}
	}
	calls = filepath.Join(filepath.Dir(dir), "host-local.calls")
	script := fmt.Sprintf("#!/bin/sh\necho \"$CNI_COMMAND $CNI_CONTAINERID\" >> %s\nexec %s \"$@\"\n", calls, filepath.Join(e.cniPath, "host-local"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "host-local"), []byte(script), 0o755))
	return dir, calls
}

func hostLocalDels(t *testing.T, calls, containerID string) int {
	t.Helper()
	data, err := os.ReadFile(calls)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(data), "DEL "+containerID+"\n")
}

// sweeper runs `netns-pinctl --conf <conflist> sweep` for a chain; its JSON
// log goes to the chain's logFile.
type sweeper struct {
	cmd  *exec.Cmd
	done chan error
}

func startSweeper(t *testing.T, c *chain) *sweeper {
	t.Helper()
	conflist := filepath.Join(c.netconfDir, c.name+".conflist")
	cmd := exec.Command(c.env.ctl, "--conf", conflist, "sweep", "--interval", "100ms")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	sw := &sweeper{cmd: cmd, done: make(chan error, 1)}
	go func() { sw.done <- cmd.Wait() }()
	t.Cleanup(func() { sw.stop(t) })
	return sw
}

// stop sends SIGTERM and requires a clean exit.
func (sw *sweeper) stop(t *testing.T) {
	if sw.cmd.ProcessState != nil {
		return
	}
	if err := sw.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("SIGTERM to the sweeper: %v", err)
	}
	select {
	case err := <-sw.done:
		assert.NoError(t, err, "sweeper exits 0 on SIGTERM")
	case <-time.After(10 * time.Second):
		t.Errorf("sweeper did not stop on SIGTERM (kill: %v)", sw.cmd.Process.Kill())
	}
}

// logLines counts the lines of the chain's log that contain all of words.
func logLines(t *testing.T, c *chain, words ...string) int {
	t.Helper()
	f, err := os.Open(c.logFile)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(sc.Text(), w)
		}
		if ok {
			n++
		}
	}
	return n
}

// waitRounds waits until the sweeper has run n more rounds.
func waitRounds(t *testing.T, c *chain, n int) {
	t.Helper()
	start := logLines(t, c, `"msg":"sweep round"`)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		return logLines(t, c, `"msg":"sweep round"`) >= start+n
	}), "the sweeper runs rounds")
}

// CRI-O 1.32.8+/1.33.4+/1.34+ (cri-o PR #9372, server/sandbox_network.go
// networkStop), replayed with cnitool (result cache in /var/lib/cni/results)
// step by step as CRI-O v1.34.11 was measured to act with netns-pin last in
// the chain (docs/operating.md, "Runtime matrix"):
//
//  1. RunPodSandbox: ADD, then CHECK right after it.
//  2. The first StopPodSandbox: one DEL, refused (code 11); CRI-O deletes
//     the sandbox's result file /var/lib/cni/results/<net>-<id>-<if> and
//     marks the network stopped; removing its netns bind mount fails with
//     EBUSY, so the runtime's netns file stays mounted.
//  3. The kubelet's second StopPodSandbox: no DEL; CRI-O unmounts and
//     removes its netns file and succeeds.
//  4. RemovePodSandbox (`crictl rmp`) succeeds: no CNI call.
//
// The sweeper must leave the record while the runtime's netns path still
// exists, even once nothing uses the netns (a retrying runtime would DEL
// again through it), and finish the teardown once the path is gone and
// nothing uses the netns: the chain's DEL (the veth goes, host-local frees
// the lease, once), then the pin.
func TestSweeperFinishesWhatCRIOAbandoned(t *testing.T) {
	cniPath, calls := countingCNIPath(t)
	c := newChain(t, chainSpec{cniPath: cniPath})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), true)
	conflist := filepath.Join(c.netconfDir, c.name+".conflist")

	// 1. ADD, CHECK.
	res := a.mustAdd(t)
	ip := sandboxIP(t, res)
	veth := hostVeth(t, res, c.spec.bridge)
	require.NoError(t, a.check(), "CHECK right after ADD")
	cl := startClient(t, c.defaultLink(), ns.ID, "")

	// 2. The first stop: one DEL, refused; the result file goes; the
	// netns file stays mounted (EBUSY).
	r := a.cnitoolRun("del")
	require.Error(t, r.Err, "the one DEL CRI-O sends is refused")
	rec := readRecord(t, a.recordPath())
	require.Equal(t, "draining", rec.str("state"))
	td, _ := rec["teardown"].(map[string]any)
	require.NotNil(t, td, "the refusal captured what a teardown needs")
	cacheFile := filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", c.name, a.containerID, ifName))
	assert.Equal(t, cacheFile, td["cacheFile"])
	require.NoError(t, os.Remove(cacheFile))
	a.noCleanDel = true // CRI-O never sends DEL again
	require.Len(t, mountsAt(t, ns.Path), 1, "the runtime's netns file is still mounted after the first stop")

	sw := startSweeper(t, c)
	waitRounds(t, c, 3)
	assert.NotEqual(t, "true", readRecord(t, a.recordPath()).str("abandoned"), "the runtime's netns path exists: not abandoned")
	assertNetnsKept(t, a, ip)

	// The client goes while the runtime's netns file is still there:
	// nothing uses the netns, but the sweeper leaves it (the path exists).
	cl.stop(t)
	waitRounds(t, c, 3)
	rec = readRecord(t, a.recordPath())
	assert.Equal(t, "draining", rec.str("state"), "the sweeper does not finish while the runtime's netns path exists")
	assert.NotEqual(t, "true", rec.str("abandoned"))
	assertNetnsKept(t, a, ip)
	assert.True(t, host.LinkExists(veth), "the veth stays")
	assert.Equal(t, 0, hostLocalDels(t, calls, a.containerID))

	// A new client comes through the link (ceph-csi maps a volume: the
	// link leads to the cluster's only pin, draining).
	cl = startClient(t, c.defaultLink(), ns.ID, "")

	// 3. The second stop: no DEL; the netns file is unmounted and removed.
	ns.Delete(t)
	// 4. rmp: no CNI call.
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		return readRecord(t, a.recordPath()).str("abandoned") == "true"
	}), "the sweeper sees that the runtime's netns path is gone")
	waitRounds(t, c, 3)
	assertNetnsKept(t, a, ip)
	assert.True(t, host.LinkExists(veth), "the veth stays while the client does")
	assert.Equal(t, 0, hostLocalDels(t, calls, a.containerID))
	list := pinCLI(c, "--conf", conflist, "list")
	assert.Contains(t, list.Stdout, "draining (abandoned by the runtime)")

	cl.stop(t)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		_, err := os.Lstat(a.recordPath())
		return os.IsNotExist(err)
	}), "the sweeper finishes the teardown once the client is gone")
	assertReleased(t, a)
	assertNoLink(t, c.defaultLink())
	assert.False(t, host.LinkExists(veth), "the chain's bridge plugin removed the veth")
	assert.NoFileExists(t, c.leasePath(ip), "host-local gave the address back")
	assert.Equal(t, 1, hostLocalDels(t, calls, a.containerID), "the lease is freed once")
	// The record goes first and the log line after it: wait for the line.
	finished := []string{`"msg":"finished abandoned teardown"`, a.attachmentName(), `"ipamReleased":true`, `"draining":`}
	require.True(t, host.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		return logLines(t, c, finished...) > 0
	}), "the sweeper logs the finished teardown")
	assert.Equal(t, 1, logLines(t, c, finished...))
	sw.stop(t)
}

// deviceHeldHolder is a holder pinned through cnitool (its libcni cache in
// /var/lib/cni), host-local's DELs counted, an rbd device mapped from its
// address (a kernel client: no process reaches the netns), and the one DEL
// CRI-O sends refused.
type deviceHeldHolder struct {
	c     *chain
	a     *attachment
	ns    *hosttest.NetnsHandle
	fx    rbdFixture
	ip    net.IP
	calls string
}

func newDeviceHeldHolder(t *testing.T) deviceHeldHolder {
	t.Helper()
	h := deviceHeldHolder{fx: newRBDFixture(t)}
	var cniPath string
	cniPath, h.calls = countingCNIPath(t)
	h.c = newChain(t, chainSpec{cniPath: cniPath, inUse: h.fx.inUse()})
	h.ns = hosttest.NewNetns(t, "npe2e")
	h.a = h.c.newAttachment(t, h.ns, holderArgs(), true)
	h.ip = sandboxIP(t, h.a.mustAdd(t))
	h.fx.mapDevice(t, "0", h.ip, "csi-vol-1")
	require.Error(t, h.a.cnitoolRun("del").Err, "the one DEL CRI-O sends is refused")
	require.Equal(t, "draining", readRecord(t, h.a.recordPath()).str("state"))
	return h
}

// Hole: a holder whose runtime gave up and whose pin was then unmounted
// from outside, while only a kernel client (an rbd device, no process)
// kept the netns, was released by the repair at the start of the next
// operation once the device went, before any sweeper round could mark it
// abandoned: the chain's DEL never ran and host-local kept the address for
// ever. Repair now marks such a record abandoned itself, so whichever
// operation releases it runs the chain's DEL first.
func TestRepairFinishesAbandonedTeardownOfLostPin(t *testing.T) {
	h := newDeviceHeldHolder(t)
	c, a, fx, ip, calls := h.c, h.a, h.fx, h.ip, h.calls

	// CRI-O gives up; then a cleanup script unmounts the pin. Nothing can
	// reach the netns any more, but the device still uses it.
	h.ns.Delete(t)
	require.NoError(t, os.Remove(filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", c.name, a.containerID, ifName))))
	a.noCleanDel = true
	hosttest.MustRun(t, "umount", "-l", a.pinPath())
	require.Empty(t, mountsAt(t, a.pinPath()))
	gc := func() string {
		t.Helper()
		r := pinCLI(c, "--conf", filepath.Join(c.netconfDir, c.name+".conflist"), "gc")
		require.NoError(t, r.Err, "%s", r)
		return r.Stdout
	}
	assert.Regexp(t, `kept +`+a.attachmentName()+` .*still in use: rbd0 replicapool/csi-vol-1`, gc())
	rec := readRecord(t, a.recordPath())
	assert.Equal(t, "unpinned", rec.str("state"), "kept: the device uses the netns")
	assert.Equal(t, "true", rec.str("abandoned"), "the runtime's handle is gone")
	assert.FileExists(t, c.leasePath(ip))
	assert.Zero(t, hostLocalDels(t, calls, a.containerID))

	fx.unmapDevice(t, "0")
	assert.Regexp(t, `released +`+a.attachmentName()+` .*no longer in use`, gc(), "gc reports what its repair released")
	assert.NoFileExists(t, a.recordPath(), "released once unused")
	assert.NoFileExists(t, c.leasePath(ip), "host-local gave the address back")
	assert.Equal(t, 1, hostLocalDels(t, calls, a.containerID), "the chain's DEL ran once")
	assert.Equal(t, 1, logLines(t, c, `"msg":"finished abandoned teardown"`, a.attachmentName(), `"ipamReleased":true`))
}

// Hole: with no sweep round yet (or no sweeper deployed), an operator's
// gc or release (forced or not) of a holder whose runtime gave up released
// the pin without the chain's DEL: host-local kept the address. They now
// mark the record abandoned first, as the sweeper would, and free the lease
// once.
func TestOperatorFinishesAnAbandonedTeardown(t *testing.T) {
	for _, cmd := range []string{"gc", "release", "release --force"} {
		t.Run(cmd, func(t *testing.T) {
			h := newDeviceHeldHolder(t)
			h.ns.Delete(t)
			require.NoError(t, os.Remove(filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", h.c.name, h.a.containerID, ifName))))
			h.a.noCleanDel = true
			h.fx.unmapDevice(t, "0")

			args := []string{"--conf", filepath.Join(h.c.netconfDir, h.c.name+".conflist"), strings.Fields(cmd)[0]}
			if strings.HasPrefix(cmd, "release") {
				args = append(args, h.a.attachmentName())
				args = append(args, strings.Fields(cmd)[1:]...)
			}
			r := pinCLI(h.c, args...)
			require.NoError(t, r.Err, "%s", r)
			assert.NoFileExists(t, h.a.recordPath())
			assert.NoFileExists(t, h.c.leasePath(h.ip), "host-local gave the address back")
			assert.Equal(t, 1, hostLocalDels(t, h.calls, h.a.containerID), "the chain's DEL ran once")
			assert.Equal(t, 1, logLines(t, h.c, `"msg":"finished abandoned teardown"`, h.a.attachmentName(), `"ipamReleased":true`))
		})
	}
}

// A runtime that removed its netns file after a refused DEL but does call
// DEL again (the sweeper or repair marked the record abandoned meanwhile):
// its DEL releases, the runtime's own chain goes on with the DEL of the
// plugins before netns-pin, and netns-pin leaves that to it, so the lease
// is given back once.
func TestRuntimeRetryAfterAbandonFreesOnce(t *testing.T) {
	h := newDeviceHeldHolder(t)
	c, a, fx, ip, calls := h.c, h.a, h.fx, h.ip, h.calls
	h.ns.Delete(t)
	r := pinCLI(c, "--conf", filepath.Join(c.netconfDir, c.name+".conflist"), "sweep", "--once")
	require.NoError(t, r.Err, "%s", r)
	require.Equal(t, "true", readRecord(t, a.recordPath()).str("abandoned"))

	fx.unmapDevice(t, "0")
	r = a.cnitoolRun("del")
	require.NoError(t, r.Err, "%s", r)
	assert.NoFileExists(t, a.recordPath())
	assert.NoFileExists(t, c.leasePath(ip))
	assert.Equal(t, 1, hostLocalDels(t, calls, a.containerID), "the lease is freed once, by the runtime's chain")
	assert.Zero(t, logLines(t, c, "finished abandoned teardown"))
}

// A runtime that keeps retrying (containerd: its netns stays until the
// teardown succeeds): the sweeper leaves the record to it, the runtime's
// next DEL releases, and the lease is freed exactly once.
func TestSweeperLeavesRetryingRuntimesAlone(t *testing.T) {
	cniPath, calls := countingCNIPath(t)
	c := newChain(t, chainSpec{cniPath: cniPath})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))
	cl := startClient(t, c.defaultLink(), ns.ID, "")
	require.Error(t, a.del())

	startSweeper(t, c)
	cl.stop(t)
	waitRounds(t, c, 3)
	rec := readRecord(t, a.recordPath())
	assert.Equal(t, "draining", rec.str("state"), "the sweeper leaves a retrying runtime's record")
	assert.NotEqual(t, "true", rec.str("abandoned"))
	assert.FileExists(t, c.leasePath(ip))

	require.NoError(t, a.del(), "the runtime's retry releases")
	assertReleased(t, a, ns.Path)
	assert.NoFileExists(t, c.leasePath(ip))
	waitRounds(t, c, 2)
	assert.Equal(t, 1, hostLocalDels(t, calls, a.containerID), "the lease is freed once")
	assert.Zero(t, logLines(t, c, "finished abandoned teardown"))
}

// onBoot runs name with args as on a node rebooted since: in a mount
// namespace of its own where /proc/sys/kernel/random/boot_id reads bootID
// (/proc made private there first, so the host's boot id stays), every
// other mount as the host has it (a pin made there is the host's: pinDir
// is a shared mount).
func onBoot(t *testing.T, bootID string, env []string, name string, args ...string) host.CmdResult {
	t.Helper()
	file := filepath.Join(t.TempDir(), "boot_id")
	require.NoError(t, os.WriteFile(file, []byte(bootID+"\n"), 0o444))
	script := `mount --make-rprivate /proc && mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"`
	return host.RunCmd(host.CmdTimeout, env, nil, "unshare", append([]string{"--mount", "--propagation", "unchanged", "sh", "-c", script, file, name}, args...)...)
}

// Hole: a teardown the runtime abandoned (CRI-O), still held by a kernel
// client when the node rebooted. On the new boot the first operation on
// the store was a holder pod's ADD, whose repair dropped the record as any
// record of an earlier boot, without the chain's DEL that the plugin
// cannot run: host-local kept the old address for ever. The plugin now
// hands the record over to netns-pinctl, whose next gc runs the chain's
// DEL, once.
func TestAbandonedTeardownOfAnEarlierBootFreesItsLease(t *testing.T) {
	h := newDeviceHeldHolder(t)
	c, a, calls := h.c, h.a, h.calls
	conflist := filepath.Join(c.netconfDir, c.name+".conflist")
	h.ns.Delete(t)
	require.NoError(t, os.Remove(filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", c.name, a.containerID, ifName))))
	a.noCleanDel = true
	r := pinCLI(c, "--conf", conflist, "sweep", "--once")
	require.NoError(t, r.Err, "%s", r)
	require.Equal(t, "true", readRecord(t, a.recordPath()).str("abandoned"))

	// The reboot: the client and the pin's mount die with the boot; the
	// lease file of host-local does not.
	h.fx.unmapDevice(t, "0")
	hosttest.MustRun(t, "umount", "-l", a.pinPath())
	newBoot := "6d0e4c1a-0001-4b7e-9c3d-" + host.RandHex(6)

	// The new boot's first operation: the next holder's ADD.
	ns2 := hosttest.NewNetns(t, "npe2e")
	a2 := c.newAttachment(t, ns2, holderArgs(), true)
	e := c.env
	r = onBoot(t, newBoot, []string{"CNI_PATH=" + e.cniPath, "NETCONFPATH=" + c.netconfDir, "CNI_IFNAME=" + ifName, "CNI_ARGS=" + cniArgsString(a2.args)},
		e.cnitool, "add", c.name, ns2.Path)
	require.NoError(t, r.Err, "the new holder's ADD: %s", r)
	handedOver := filepath.Join(c.stateDir, "teardowns", a.attachmentName()+".json")
	assert.NoFileExists(t, a.recordPath(), "the record of the earlier boot is dropped")
	assert.NoFileExists(t, a.pinPath())
	assert.FileExists(t, handedOver, "its teardown is handed over to netns-pinctl")
	assert.FileExists(t, c.leasePath(h.ip), "the plugin ran no other plugin")
	assert.Zero(t, hostLocalDels(t, calls, a.containerID))
	assert.Equal(t, "active", readRecord(t, a2.recordPath()).str("state"))

	r = onBoot(t, newBoot, nil, c.env.ctl, "--conf", conflist, "gc")
	require.NoError(t, r.Err, "%s", r)
	assert.NoFileExists(t, handedOver)
	assert.NoFileExists(t, c.leasePath(h.ip), "host-local gave the address back")
	assert.Equal(t, 1, hostLocalDels(t, calls, a.containerID), "the chain's DEL ran once")
	assert.Equal(t, 1, logLines(t, c, `"msg":"finished abandoned teardown"`, a.attachmentName(), `"handedOverByThePlugin":true`))
	r = onBoot(t, newBoot, nil, c.env.ctl, "--conf", conflist, "gc")
	require.NoError(t, r.Err, "%s", r)
	assert.Equal(t, 1, hostLocalDels(t, calls, a.containerID), "and only once")
}

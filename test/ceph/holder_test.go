package ceph

// A holder restart under live I/O, on a real cluster, with netns-pin and
// with the Rook-style holder it replaces (docs/design.md §1, §15.4, §17).

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// row is one design's line in the comparison table.
type row struct {
	design  string
	removal string
	s       stats
	during  int // operations completed after the holder's removal began
}

var (
	rowsMu sync.Mutex
	rows   = map[string]row{}
)

func setRow(r row) {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	rows[r.design] = r
}

// stepper logs numbered, timed steps.
type stepper struct {
	t     *testing.T
	start time.Time
}

func newStepper(t *testing.T) *stepper { return &stepper{t: t, start: time.Now()} }

func (s *stepper) step(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("[%5.1fs] == %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// TestHolderRestartUnderLiveIO runs the same story against both designs and
// compares what the client saw: with netns-pin the mount that lives through
// the holder's replacement and removal completes every operation; with a
// Rook-style holder the client stalls or fails as soon as the holder goes.
func TestHolderRestartUnderLiveIO(t *testing.T) {
	e, c := requireSetup(t)
	pinRange, rookRange := splitRange(t, c.rangeStart, c.rangeEnd)

	t.Run("netns-pin", func(t *testing.T) { netnsPinHolderRestart(t, e, c, pinRange) })
	t.Run("rook-style", func(t *testing.T) { rookStyleHolderRestart(t, e, c, rookRange) })

	rowsMu.Lock()
	pin, okPin := rows["netns-pin"]
	rook, okRook := rows["Rook-style"]
	rowsMu.Unlock()

	var b strings.Builder
	b.WriteString("\n| holder design | what happened to the holder | operations | failed | checksum mismatches | stalled (> " + stallLimit.String() + ") | longest stall |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range []row{pin, rook} {
		if r.design == "" {
			continue
		}
		longest := r.s.Longest.Round(10 * time.Millisecond).String()
		if r.s.Hung {
			longest += " (still blocked: hung)"
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%d after removal began) | %d | %d | %d | %s |\n",
			r.design, r.removal, r.s.Ops, r.during, r.s.Failures, r.s.Mismatches, r.s.Stalled, longest)
	}
	t.Log(b.String())

	require.True(t, okPin && okRook, "both designs must run to compare them (netns-pin: %v, Rook-style: %v)", okPin, okRook)
	assert.Zero(t, pin.s.Failures+pin.s.Mismatches+pin.s.Stalled, "netns-pin: the client must not see a failed, corrupt or stalled operation: %s", pin.s)
	assert.Positive(t, rook.s.Failures+rook.s.Mismatches+rook.s.Stalled, "Rook-style: removing the holder should fail or stall the client: %s", rook.s)
}

// netnsPinHolderRestart: holder A pinned by netns-pin; a ceph-fuse client
// through the link; A's DEL refused with code 11 naming it; holder B takes
// the link and serves a new mount; A's netns name deleted and its DEL
// retried while I/O goes on; once the client unmounts, A's DEL releases the
// pin and its netns goes; rados bench through the link.
func netnsPinHolderRestart(t *testing.T, e env, c *cluster, ipRange [2]string) {
	st := newStepper(t)
	work := hosttest.NewWorkDir(t, "netns-pin-ceph-e2e-")
	ch := newChain(t, e, c, work, true, ipRange[0], ipRange[1])
	root := subvolume(t, c, "netns-pin-"+host.RandHex(6))
	link := ch.link()

	st.step("holder A (rook-ceph/csi-holder-a): ip netns add, cnitool add [bridge + host-local, netns-pin]")
	nsA := hosttest.NewNetns(t, "npc-holder-a")
	a := ch.newAttachment(t, nsA, "csi-holder-a")
	a.add(t)
	vethA := a.hostVeth(t)
	require.Equal(t, nsA.ID, hosttest.StatNS(t, a.pinPath()), "pin of holder A")
	require.Equal(t, nsA.ID, hosttest.StatNS(t, link), "%s must lead to holder A's netns", link)
	t.Logf("holder A: %s, veth %s, pinned at %s, link %s", a.ip(), vethA, a.pinPath(), link)

	st.step("client 1: nsenter --net=%s -- ceph-fuse %s -r %s", link, filepath.Join(work, "mnt1"), root)
	m1 := mountCephFuse(t, c, link, filepath.Join(work, "mnt1"), root)
	require.Equal(t, nsA.ID, m1.netnsID(t), "ceph-fuse (pid %d) must run in holder A's netns", m1.pid)
	w1 := startWorkload(t, "mount 1", filepath.Join(m1.dir, "w1"))
	s1 := w1.waitOps(t, stats{}, 25, 60*time.Second, "before the holder restart")
	t.Logf("client 1: ceph-fuse pid %d in %s; workload: %s", m1.pid, nsA.ID, s1)

	st.step("1. DEL of holder A while ceph-fuse uses its netns: refused with CNI code 11")
	r := a.cnitool("del")
	require.Error(t, r.Err, "cnitool del of holder A must fail while ceph-fuse runs in its netns:\n%s", r)
	t.Logf("cnitool del: %v: %s", r.Err, errorLine(r.Stderr))
	requireNamesProcess(t, r.Stderr, m1.pid, "ceph-fuse")
	err := a.delLibcni(t)
	require.Error(t, err, "libcni DelNetworkList of holder A")
	require.EqualValues(t, types.ErrTryAgainLater, cniCode(err), "CNI error code of the refused DEL: %v", err)
	var te *types.Error
	require.True(t, errors.As(err, &te))
	assert.Contains(t, te.Msg, clusterRef, "msg names the cluster")
	assert.Contains(t, te.Msg, clusterNS+"/csi-holder-a", "msg names the holder pod")
	assert.Contains(t, te.Details, fmt.Sprintf("process %d (ceph-fuse", m1.pid), "details list the reference")
	t.Logf("libcni: code %d, msg %q, details %q", te.Code, te.Msg, te.Details)
	assert.Equal(t, "draining", a.record(t)["state"], "record of holder A after a refused DEL")
	require.Equal(t, nsA.ID, hosttest.StatNS(t, a.pinPath()), "holder A stays pinned")
	require.True(t, host.LinkExists(vethA), "holder A's veth %s must stay while the DEL is refused", vethA)

	st.step("2. holder B (rook-ceph/csi-holder-b) comes up and takes the link; client 2 mounts through it")
	nsB := hosttest.NewNetns(t, "npc-holder-b")
	b := ch.newAttachment(t, nsB, "csi-holder-b")
	b.add(t)
	require.Equal(t, nsB.ID, hosttest.StatNS(t, link), "%s must lead to the new holder B", link)
	require.Equal(t, nsA.ID, hosttest.StatNS(t, a.pinPath()), "holder A stays pinned")
	m2 := mountCephFuse(t, c, link, filepath.Join(work, "mnt2"), root)
	id2 := m2.netnsID(t)
	require.Equal(t, nsB.ID, id2, "a new mount through the link must land in holder B's netns")
	require.Equal(t, hosttest.StatNS(t, b.pinPath()), id2, "client 2's netns must be holder B's pin")
	require.NotEqual(t, nsA.ID, id2)
	w2 := startWorkload(t, "mount 2", filepath.Join(m2.dir, "w2"))
	s2 := w2.waitOps(t, stats{}, 10, 60*time.Second, "on the second mount")
	t.Logf("holder B: %s; client 2: ceph-fuse pid %d in %s (client 1 in %s); workload 2: %s", b.ip(), m2.pid, id2, m1.netnsID(t), s2)

	st.step("3. holder A goes away as the runtime removes it: ip netns del %s, DEL retried", nsA.Name)
	removal := w1.snapshot()
	nsA.Delete(t)
	s1 = removal
	for try := 1; try <= 3; try++ {
		s1 = w1.waitOps(t, s1, 25, 60*time.Second, fmt.Sprintf("before DEL retry %d", try))
		r := a.cnitool("del")
		require.Error(t, r.Err, "DEL retry %d of holder A must still be refused:\n%s", try, r)
		requireNamesProcess(t, r.Stderr, m1.pid, "ceph-fuse")
	}
	err = a.delLibcni(t)
	require.EqualValues(t, types.ErrTryAgainLater, cniCode(err), "retried DEL: %v", err)
	require.Equal(t, nsA.ID, hosttest.StatNS(t, a.pinPath()), "holder A stays pinned after its name is gone")
	require.True(t, host.LinkExists(vethA), "holder A's veth %s must stay while its client runs", vethA)
	addrs := hosttest.MustRun(t, "nsenter", "--net="+a.pinPath(), "--", "ip", "-br", "addr", "show", "dev", ifName)
	require.Contains(t, addrs, a.ip()+"/", "holder A's address must stay in its pinned netns")
	s1 = w1.waitOps(t, s1, 50, 60*time.Second, "after holder A's removal")
	t.Logf("client 1 after 3 refused DEL retries: %s", s1)

	st.step("4. client 1 unmounts: the next DEL of holder A releases the pin and the netns goes")
	require.True(t, w1.stop(30*time.Second), "workload 1 did not stop")
	final := w1.snapshot()
	t.Logf("workload 1 (lived through the restart): %s", final)
	require.Zero(t, final.Failures, "failed operations on mount 1: %v", final.Errors)
	require.Zero(t, final.Mismatches, "checksum mismatches on mount 1: %v", final.Errors)
	require.Zero(t, final.Stalled, "stalled operations on mount 1")
	n := w1.verifyThrough(t, filepath.Join(m2.dir, "w1"))
	t.Logf("read the %d files of workload 1 back through client 2 (holder B's netns): checksums match", n)
	setRow(row{design: "netns-pin", s: final, during: final.Ops - removal.Ops,
		removal: "DEL refused (code 11) while in use; holder B took the link; `ip netns del`; DEL retried 3x"})
	m1.unmount(t)
	r = a.cnitool("del")
	require.NoError(t, r.Err, "DEL of holder A once nothing uses it:\n%s", r)
	assert.NoFileExists(t, a.pinPath(), "pin of holder A after its DEL")
	assert.NoFileExists(t, a.recordPath(), "record of holder A after its DEL")
	require.Equal(t, nsB.ID, hosttest.StatNS(t, link), "the link stays on holder B")
	assert.Empty(t, hosttest.NsfsMountsOf(t, nsA.ID.Ino), "nsfs mounts of holder A's netns %s after its DEL", nsA.ID)
	gone := host.Poll(30*time.Second, 50*time.Millisecond, func() bool { return !host.LinkExists(vethA) })
	require.True(t, gone, "holder A's veth %s still exists 30s after the DEL: its netns did not go away", vethA)
	t.Logf("holder A released: no pin, no record, no nsfs mount of %s, veth %s gone with the netns", nsA.ID, vethA)
	s2 = w2.waitOps(t, w2.snapshot(), 10, 60*time.Second, "after holder A's release")
	t.Logf("client 2 untouched: %s", s2)

	st.step("5. rados bench through the link (holder B's netns)")
	runName := "netns-pin-" + host.RandHex(6)
	args := append([]string{"--net=" + link, "--", "rados"}, c.clientArgs()...)
	args = append(args, "-p", c.pool, "bench", "2", "write", "-b", "65536", "-t", "4", "--max-objects", "2000", "--run-name", runName)
	r = host.RunCmd(2*time.Minute, nil, nil, "nsenter", args...)
	require.NoError(t, r.Err, "rados bench through %s:\n%s", link, r)
	writes := regexp.MustCompile(`(?m)^Total writes made:\s+(\d+)`).FindStringSubmatch(r.Stdout)
	require.NotNil(t, writes, "rados bench output:\n%s", r.Stdout)
	nw, err := strconv.Atoi(writes[1])
	require.NoError(t, err)
	require.Positive(t, nw, "rados bench wrote nothing:\n%s", r.Stdout)
	bw := regexp.MustCompile(`(?m)^Bandwidth \(MB/sec\):\s+(\S+)`).FindStringSubmatch(r.Stdout)
	t.Logf("rados bench: %d writes of 64 KiB, %s MB/s (memstore %s bytes)", nw, bw[1], c.memstore)

	st.step("wrap up: client 2 unmounts, DEL of holder B releases the last pin")
	require.True(t, w2.stop(30*time.Second), "workload 2 did not stop")
	final2 := w2.snapshot()
	t.Logf("workload 2: %s", final2)
	require.Zero(t, final2.Failures+final2.Mismatches+final2.Stalled, "mount 2: %v", final2.Errors)
	m2.unmount(t)
	r = b.cnitool("del")
	require.NoError(t, r.Err, "DEL of holder B:\n%s", r)
	_, err = os.Lstat(link)
	assert.True(t, os.IsNotExist(err), "the link must go with the cluster's last pin: %v", err)
	nsB.Delete(t)
	assert.Empty(t, hosttest.NsfsMountsOf(t, nsB.ID.Ino), "nsfs mounts of holder B's netns after its DEL and ip netns del")
}

// rookStyleHolderRestart: the design netns-pin replaces. A holder process
// in the pod's netns and a symlink to /proc/<pid>/ns/net; ceph-fuse through
// the symlink; the holder removed as the runtime removes a pod.
func rookStyleHolderRestart(t *testing.T, e env, c *cluster, ipRange [2]string) {
	st := newStepper(t)
	work := hosttest.NewWorkDir(t, "netns-pin-ceph-e2e-")
	ch := newChain(t, e, c, work, false, ipRange[0], ipRange[1])
	root := subvolume(t, c, "rook-"+host.RandHex(6))

	st.step("Rook-style holder: ip netns add, cnitool add [bridge + host-local] (no netns-pin), `sleep` in the netns")
	nsR := hosttest.NewNetns(t, "npc-rook-holder")
	a := ch.newAttachment(t, nsR, "csi-cephfsplugin-holder-my-cluster-x")
	a.add(t)
	veth := a.hostVeth(t)
	holder := exec.Command("nsenter", "--net="+nsR.Path, "--", "sleep", "infinity")
	require.NoError(t, holder.Start())
	holderExited := make(chan struct{})
	go func() { _ = holder.Wait(); close(holderExited) }()
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		<-holderExited
	})
	nsLink := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	require.True(t, host.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		id, err := host.NSIDOf(nsLink)
		return err == nil && id == nsR.ID
	}), "holder process %d did not enter %s", holder.Process.Pid, nsR.Name)
	// what the holder's container ran: ln -s /proc/$$/ns/net <kubelet>/plugins/<driver>/<ns>.net.ns
	symlink := filepath.Join(work, "plugins", "rook-ceph.cephfs.csi.ceph.com", clusterNS+".net.ns")
	require.NoError(t, os.MkdirAll(filepath.Dir(symlink), 0o755))
	require.NoError(t, os.Symlink(nsLink, symlink))
	t.Logf("holder: %s, veth %s, sleep pid %d, %s -> %s", a.ip(), veth, holder.Process.Pid, symlink, nsLink)

	st.step("client: nsenter --net=%s -- ceph-fuse %s -r %s", symlink, filepath.Join(work, "mnt"), root)
	m := mountCephFuse(t, c, symlink, filepath.Join(work, "mnt"), root)
	require.Equal(t, nsR.ID, m.netnsID(t), "ceph-fuse must run in the holder's netns")
	w := startWorkload(t, "rook mount", filepath.Join(m.dir, "w"))
	s := w.waitOps(t, stats{}, 25, 60*time.Second, "before the holder goes")
	t.Logf("client: ceph-fuse pid %d; workload: %s", m.pid, s)

	st.step("the holder goes as the runtime removes a pod: kill the holder, cnitool del (veth + IP), ip netns del")
	removal := w.snapshot()
	removedAt := time.Now()
	require.NoError(t, holder.Process.Signal(syscall.SIGTERM))
	select {
	case <-holderExited:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder did not exit on SIGTERM")
	}
	r := a.cnitool("del")
	require.NoError(t, r.Err, "cnitool del of the Rook-style holder:\n%s", r)
	nsR.Delete(t)
	require.False(t, host.LinkExists(veth), "cnitool del must have removed the veth %s", veth)
	r = host.RunCmd(10*time.Second, nil, nil, "nsenter", "--net="+symlink, "--", "true")
	require.Error(t, r.Err, "a new client through the dead symlink must fail")
	t.Logf("new client through %s: %s", symlink, strings.TrimSpace(r.Stderr))

	st.step("measure the client's I/O for up to %s after the removal", stallLimit+20*time.Second)
	var now stats
	host.Poll(stallLimit+20*time.Second, 50*time.Millisecond, func() bool {
		now = w.snapshot()
		return now.Failures+now.Mismatches > removal.Failures+removal.Mismatches || now.Stalled > removal.Stalled
	})
	final := w.snapshot()
	t.Logf("Rook-style client %.1fs after the holder's removal began: %s; errors: %v", time.Since(removedAt).Seconds(), final, final.Errors)
	setRow(row{design: "Rook-style", s: final, during: final.Ops - removal.Ops,
		removal: "holder process killed; `cnitool del` (veth + IP gone); `ip netns del`"})

	st.step("clean up the dead client: kill -9 ceph-fuse, umount -l, evict its MDS session")
	w.stop(0)
	m.kill(t)
	require.True(t, w.stop(30*time.Second), "the workload is still blocked after ceph-fuse was killed")
	evictClient(t, c, m.dir)
	assert.Positive(t, final.Failures+final.Mismatches+final.Stalled, "the Rook-style client did not notice its holder's removal: %s", final)
}

// errorLine is cnitool's error line (cobra prints the usage after it).
func errorLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "Error: ") {
			return l
		}
	}
	return strings.TrimSpace(stderr)
}

// requireNamesProcess checks that a DEL error names the process: "process
// <pid> (<comm>)".
func requireNamesProcess(t *testing.T, msg string, pid int, comm string) {
	t.Helper()
	re := regexp.MustCompile(`process (\d+) \(([^,)]+)[,)]`)
	for _, m := range re.FindAllStringSubmatch(msg, -1) {
		if p, _ := strconv.Atoi(m[1]); p == pid && m[2] == comm {
			return
		}
	}
	t.Fatalf("the DEL error does not name process %d (%s):\n%s", pid, comm, msg)
}

// splitRange splits the cluster's client address range in two halves, one
// per chain (each host-local has its own store).
func splitRange(t *testing.T, start, end string) (pin, rook [2]string) {
	t.Helper()
	s, err := netip.ParseAddr(start)
	require.NoError(t, err)
	e, err := netip.ParseAddr(end)
	require.NoError(t, err)
	n := 0
	for a := s; a.Compare(e) < 0; a = a.Next() {
		n++
	}
	require.GreaterOrEqual(t, n, 8, "client range %s-%s too small", start, end)
	mid := s
	for range n / 2 {
		mid = mid.Next()
	}
	return [2]string{s.String(), mid.String()}, [2]string{mid.Next().String(), e.String()}
}

package kube

// Scenario 3: the rollout of scenario 2 with a real Ceph cluster
// (hack/ceph/up.sh) and a ceph-fuse mount made through the cluster's link,
// under continuous verified I/O.

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// cephSubnetPrefix keeps the Ceph cluster of this suite apart from
// test/ceph's (10.96.0) and from this cluster's own ranges.
const cephSubnetPrefix = "10.97.192"

// cephCluster is a cluster of hack/ceph/up.sh, up for one test.
type cephCluster struct {
	env map[string]string
}

func startCeph(t *testing.T, repo string) *cephCluster {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "netns-pin-kube-ceph.")
	require.NoError(t, err)
	t.Cleanup(func() {
		r := host.RunCmd(3*time.Minute, nil, nil, filepath.Join(repo, "hack", "ceph", "down.sh"), dir)
		assert.NoError(t, r.Err, "hack/ceph/down.sh:\n%s", r)
	})
	start := time.Now()
	r := host.RunCmd(15*time.Minute, []string{"CEPH_SUBNET_PREFIX=" + cephSubnetPrefix, "CEPH_MEMSTORE_MB=1024"}, nil,
		filepath.Join(repo, "hack", "ceph", "up.sh"), dir)
	require.NoError(t, r.Err, "hack/ceph/up.sh:\n%s", r)
	t.Logf("Ceph cluster up in %s", time.Since(start).Round(time.Millisecond))
	env, err := host.ReadEnvFile(filepath.Join(dir, "env"), "CEPH_CONF", "CEPH_CLIENT", "CEPH_KEYRING",
		"CEPH_BRIDGE", "CEPH_SUBNET", "CEPH_CLIENT_RANGE_START", "CEPH_CLIENT_RANGE_END")
	require.NoError(t, err)
	return &cephCluster{env: env}
}

// mountThroughLink starts ceph-fuse the way ceph-csi does,
// `nsenter --net=<netNamespaceFilePath> -- ceph-fuse ...`, in the
// foreground, and waits for the mount.
// The channel is closed when ceph-fuse has exited.
func (cc *cephCluster) mountThroughLink(t *testing.T, link, dir string) <-chan struct{} {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cmd := exec.Command("nsenter", "--net="+link, "--", "ceph-fuse", "-f", dir,
		"-c", cc.env["CEPH_CONF"], "-n", cc.env["CEPH_CLIENT"], "--keyring", cc.env["CEPH_KEYRING"])
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		_ = cmd.Process.Kill()
		<-exited
	})
	ok := host.Poll(90*time.Second, 100*time.Millisecond, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		return fuseMounted(dir)
	})
	require.True(t, ok && fuseMounted(dir), "ceph-fuse did not mount %s through %s:\n%s", dir, link, out.String())
	return exited
}

func fuseMounted(dir string) bool {
	ms, err := host.ReadMountinfo(host.SelfMountinfo, mountinfo.SingleEntryFilter(dir))
	return err == nil && slices.ContainsFunc(ms, func(m *mountinfo.Info) bool { return m.FSType == "fuse.ceph-fuse" })
}

// ioLoop writes a file with fresh random bytes, fsyncs it, reads it back
// and compares, over and over, until stopped; it counts failed operations
// and measures the longest.
type ioLoop struct {
	dir      string
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	ops      int
	failures []string
	longest  time.Duration
}

func startIO(dir string) *ioLoop {
	l := &ioLoop{dir: dir, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *ioLoop) run() {
	defer close(l.done)
	tick := time.NewTicker(20 * time.Millisecond) // leaves CPU to the cluster
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		start := time.Now()
		err := verifiedWrite(filepath.Join(l.dir, fmt.Sprintf("f%02d", i%16)))
		d := time.Since(start)
		l.mu.Lock()
		l.ops++
		if err != nil {
			l.failures = append(l.failures, fmt.Sprintf("op %d after %s: %v", i, d.Round(time.Millisecond), err))
		}
		l.longest = max(l.longest, d)
		l.mu.Unlock()
	}
}

func verifiedWrite(path string) error {
	data := make([]byte, 16<<10)
	_, _ = rand.Read(data)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(data))
	}
	return nil
}

// finish stops the loop and returns operations, failures and the longest.
func (l *ioLoop) finish() (int, []string, time.Duration) {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops, l.failures, l.longest
}

func TestRolloutWithCephFuseUnderIO(t *testing.T) {
	c := requireCluster(t)
	cc := startCeph(t, c.repo)
	suffix := host.RandHex(5)
	// the storage network is the Ceph cluster's bridge, with the client
	// addresses up.sh leaves free
	nad := c.nad(t, "network-attachment-definition.yaml", "ceph-public-"+suffix, func(main, _ map[string]any) {
		main["master"] = cc.env["CEPH_BRIDGE"]
		ipam := main["ipam"].(map[string]any)
		ipam["range"] = cc.env["CEPH_SUBNET"]
		ipam["range_start"] = cc.env["CEPH_CLIENT_RANGE_START"]
		ipam["range_end"] = cc.env["CEPH_CLIENT_RANGE_END"]
		delete(ipam, "exclude")
	})
	h := c.newHolderSetOn(t, suffix, nad)
	old := h.waitHolder(t)
	h.requireLinkTo(t, old)

	mnt := filepath.Join(c.env["KUBE_DIR"], "ceph-mnt-"+suffix)
	fuseExited := cc.mountThroughLink(t, h.link, mnt)
	require.NoError(t, os.MkdirAll(filepath.Join(mnt, "io-"+suffix), 0o755))
	io := startIO(filepath.Join(mnt, "io-"+suffix))

	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next := h.waitHolder(t, old.pod.Metadata.UID)
	h.requireLinkTo(t, next)
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		return len(c.eventsOf(t, old.pod, "FailedKillPod")) > 0
	}), "the old holder is not draining (no FailedKillPod) while ceph-fuse uses it")
	evs := c.eventsOf(t, old.pod, "FailedKillPod")
	assert.Contains(t, evs[0].Message, "ceph-fuse", "the event names the Ceph client: %s", evs[0].Message)
	// let the kubelet retry a few times under I/O: every retry counts, in
	// whichever event it lands (the refusal names one of ceph-fuse's
	// connections as an example, and a reconnect changes it, which starts
	// another event)
	retries := func() int {
		n := 0
		for _, ev := range c.eventsOf(t, old.pod, "FailedKillPod") {
			n += ev.Count
		}
		return n
	}
	n := retries()
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool { return retries() >= n+2 }),
		"the kubelet did not retry the old holder's teardown under I/O")
	ops, failures, longest := io.finish()
	t.Logf("ceph-fuse through the link across the rollout: %d verified operations, %d failed, longest %s",
		ops, len(failures), longest.Round(time.Millisecond))
	assert.Empty(t, failures, "failed operations")
	assert.Greater(t, ops, 50)

	// ceph-fuse unmounts (ceph-csi's NodeUnstage): the old holder goes
	require.NoError(t, syscall.Unmount(mnt, 0), "umount %s", mnt)
	select {
	case <-fuseExited:
	case <-time.After(30 * time.Second):
		t.Fatal("ceph-fuse still runs 30 s after umount")
	}
	c.requireReleased(t, h.selector, old.pod, old.sb, time.Second, "the old holder was not released once ceph-fuse left")
}

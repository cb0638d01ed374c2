package ceph

// Ceph clients started the way ceph-csi starts them: nsenter --net=<path> --.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// fuseMount is a ceph-fuse process (in the foreground, so its PID is known)
// and its mount point in the host mount namespace.
type fuseMount struct {
	c      *cluster
	dir    string
	conn   string // FUSE connection: the mount's device number (fusectl name)
	netns  string // the --net path it was started with
	pid    int
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// mountCephFuse runs `nsenter --net=<netnsPath> -- ceph-fuse -f <dir> -r
// <root> ...`: like ceph-csi's ExecuteCommandWithNSEnter, nsenter enters only
// the network namespace, so the mount is made in (and visible to) the host
// mount namespace. `ip netns exec` would make it in a private one. It
// returns once the mount is there. Cleanup unmounts it (umount, or kill -9
// and umount -l when the client no longer answers).
func mountCephFuse(t *testing.T, c *cluster, netnsPath, dir, root string) *fuseMount {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	m := &fuseMount{c: c, dir: dir, netns: netnsPath, log: dir + ".log", exited: make(chan struct{})}
	logf, err := os.Create(m.log)
	require.NoError(t, err)
	defer logf.Close()
	args := append([]string{"--net=" + netnsPath, "--", "ceph-fuse", "-f", dir, "-r", root}, c.clientArgs()...)
	m.cmd = exec.Command("nsenter", args...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, m.cmd.Start(), "nsenter ... ceph-fuse")
	m.pid = m.cmd.Process.Pid // nsenter execs ceph-fuse: same PID
	go func() {
		m.err = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() { m.cleanup(t) })

	ok := host.Poll(60*time.Second, 50*time.Millisecond, func() bool {
		return m.hasExited() || mountedAt(t, dir) == "fuse.ceph-fuse"
	})
	if m.hasExited() {
		t.Fatalf("ceph-fuse %s exited before mounting: %v\n%s", dir, m.err, m.readLog())
	}
	require.True(t, ok, "ceph-fuse did not mount %s within 60s:\n%s", dir, m.readLog())
	require.Equal(t, "ceph-fuse", procComm(m.pid), "pid %d is not ceph-fuse (nsenter did not exec it?)", m.pid)
	dev := mountAt(t, dir).Dev
	major, minor, ok := strings.Cut(dev, ":")
	require.True(t, ok && major == "0", "FUSE mount %s on device %q, want an anonymous device 0:N", dir, dev)
	m.conn = minor
	return m
}

func (m *fuseMount) hasExited() bool {
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

func (m *fuseMount) readLog() string {
	b, err := os.ReadFile(m.log)
	if err != nil {
		return err.Error()
	}
	return host.Tail(string(b), 20)
}

// netnsID is the network namespace the client process runs in.
func (m *fuseMount) netnsID(t *testing.T) host.NSID {
	t.Helper()
	return hosttest.StatNS(t, fmt.Sprintf("/proc/%d/ns/net", m.pid))
}

// unmount unmounts (what kubelet/ceph-csi do on NodeUnstage) and waits for
// ceph-fuse to exit.
func (m *fuseMount) unmount(t *testing.T) {
	t.Helper()
	require.NoError(t, m.umount(t, 30*time.Second), "umount %s", m.dir)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("ceph-fuse (pid %d) still runs 30s after umount %s", m.pid, m.dir)
	}
	require.Empty(t, mountedAt(t, m.dir), "%s still mounted", m.dir)
}

// umount calls umount(2) (umount(8) would statfs the mount first, which
// blocks forever on a client that cannot answer) in the background. When it
// does not return within d, the FUSE connection is aborted, which ends it,
// and an error says so.
func (m *fuseMount) umount(t *testing.T, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- syscall.Unmount(m.dir, 0) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
	}
	abortFuse(t, m.conn)
	select {
	case err := <-done:
		return fmt.Errorf("umount %s blocked for %s; returned %v once the FUSE connection was aborted", m.dir, d, err)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("umount %s still blocked %s after the FUSE connection was aborted", m.dir, d+10*time.Second)
	}
}

// kill ends a client that may no longer answer. SIGKILL alone is not
// enough: a thread of ceph-fuse can block uninterruptibly on a page that a
// writer on the mount holds locked while it waits for ceph-fuse's answer (a
// FUSE deadlock; the process then never exits). So, as an operator would:
// abort the FUSE connection (fusectl: blocked calls return ECONNABORTED),
// SIGKILL ceph-fuse, and lazily unmount.
func (m *fuseMount) kill(t *testing.T) {
	t.Helper()
	if !m.hasExited() {
		abortFuse(t, m.conn)
		_ = m.cmd.Process.Kill()
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("ceph-fuse (pid %d) still runs 30s after its FUSE connection was aborted and SIGKILL", m.pid)
		}
	}
	if mountedAt(t, m.dir) != "" {
		if err := syscall.Unmount(m.dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("umount -l %s: %v", m.dir, err)
		}
	}
}

// abortFuse writes to /sys/fs/fuse/connections/<conn>/abort, through a
// private mount of fusectl (it is not mounted everywhere).
func abortFuse(t *testing.T, conn string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "netns-pin-fusectl-")
	if err != nil {
		t.Errorf("abort FUSE connection %s: %v", conn, err)
		return
	}
	defer os.Remove(dir)
	if err := syscall.Mount("fusectl", dir, "fusectl", 0, ""); err != nil {
		t.Errorf("mount -t fusectl: %v", err)
		return
	}
	defer func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, conn, "abort"), []byte("1"), 0o200); err != nil && !os.IsNotExist(err) {
		t.Errorf("abort FUSE connection %s: %v", conn, err)
	}
}

func (m *fuseMount) cleanup(t *testing.T) {
	if m.hasExited() && mountedAt(t, m.dir) == "" {
		return
	}
	if !m.hasExited() {
		if err := m.umount(t, 10*time.Second); err == nil {
			select {
			case <-m.exited:
				return
			case <-time.After(15 * time.Second):
			}
		} else {
			t.Logf("cleanup: %v", err)
		}
	}
	t.Logf("cleanup: kill -9 ceph-fuse %d, umount -l %s", m.pid, m.dir)
	m.kill(t)
	evictClient(t, m.c, m.dir)
}

// subvolume creates a CephFS subvolume (what ceph-csi provisions for a PVC)
// and returns its path; cleanup removes it.
func subvolume(t *testing.T, c *cluster, name string) string {
	t.Helper()
	r := c.admin(60*time.Second, "fs", "subvolume", "create", c.fs, name)
	require.NoError(t, r.Err, "%s", r)
	t.Cleanup(func() {
		if r := c.admin(60*time.Second, "fs", "subvolume", "rm", c.fs, name, "--force"); r.Err != nil {
			t.Logf("cleanup: %s", r)
		}
	})
	r = c.admin(60*time.Second, "fs", "subvolume", "getpath", c.fs, name)
	require.NoError(t, r.Err, "%s", r)
	p := strings.TrimSpace(r.Stdout)
	require.True(t, strings.HasPrefix(p, "/volumes/"), "subvolume getpath: %q", p)
	return p
}

// evictClient evicts the MDS sessions of the client mounted at dir (a client
// that can no longer answer keeps its caps until evicted, and would block
// other clients of the same files).
func evictClient(t *testing.T, c *cluster, dir string) {
	t.Helper()
	r := c.admin(30*time.Second, "tell", "mds.*", "client", "ls", "--format", "json")
	if r.Err != nil {
		t.Logf("client ls: %s", r)
		return
	}
	var sessions []struct {
		ID       int64          `json:"id"`
		Metadata map[string]any `json:"client_metadata"`
	}
	out := r.Stdout
	// `tell mds.*` prefixes the answer with "mds.a: "
	if i := strings.Index(out, "["); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &sessions); err != nil {
		t.Logf("client ls: %v\n%s", err, r.Stdout)
		return
	}
	for _, s := range sessions {
		if mp, _ := s.Metadata["mount_point"].(string); mp != "" && filepath.Clean(mp) == filepath.Clean(dir) {
			if r := c.admin(30*time.Second, "tell", "mds.*", "client", "evict", fmt.Sprintf("id=%d", s.ID)); r.Err != nil {
				t.Logf("evict client.%d: %s", s.ID, r)
			} else {
				t.Logf("evicted the dead client.%d (%s) from the MDS", s.ID, dir)
			}
		}
	}
}

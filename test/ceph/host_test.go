package ceph

// Host-side helpers: commands, network namespaces, links, mountinfo, nsfs
// identities, polling.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// nsfsMagic is NSFS_MAGIC from linux/magic.h.
const nsfsMagic = 0x6e736673

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)[:n]
}

func newUUID() string {
	return fmt.Sprintf("%s-%s-4%s-a%s-%s", randHex(8), randHex(4), randHex(3), randHex(3), randHex(12))
}

// cmdResult is what a finished command printed.
type cmdResult struct {
	cmd            string
	stdout, stderr string
	err            error
}

func (r cmdResult) String() string {
	return fmt.Sprintf("%s: err=%v\nstdout:\n%s\nstderr:\n%s", r.cmd, r.err, r.stdout, r.stderr)
}

// runCmd runs a command with a deadline and extra environment.
func runCmd(timeout time.Duration, extraEnv []string, name string, args ...string) cmdResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timed out after %s)", err, timeout)
	}
	return cmdResult{cmd: name + " " + strings.Join(args, " "), stdout: out.String(), stderr: errb.String(), err: err}
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	r := runCmd(60*time.Second, nil, name, args...)
	require.NoError(t, r.err, "%s", r)
	return r.stdout
}

// poll calls cond every interval until it returns true or timeout passes;
// it returns whether cond became true.
func poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// netnsHandle is a named network namespace made with `ip netns add`.
type netnsHandle struct {
	name string
	path string
	id   nsID
}

func (n *netnsHandle) exists() bool {
	_, err := os.Lstat(n.path)
	return err == nil
}

// newNetns makes a uniquely named netns (lo up), deleted at cleanup.
func newNetns(t *testing.T, prefix string) *netnsHandle {
	t.Helper()
	n := &netnsHandle{name: prefix + "-" + randHex(8)}
	n.path = filepath.Join("/run/netns", n.name)
	mustRun(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		if n.exists() {
			if r := runCmd(30*time.Second, nil, "ip", "netns", "del", n.name); r.err != nil {
				t.Errorf("cleanup: %s", r)
			}
		}
	})
	mustRun(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	n.id = statNS(t, n.path)
	return n
}

// del removes the namespace's name, as a runtime does when it removes a
// sandbox (the namespace lives on while anything holds it).
func (n *netnsHandle) del(t *testing.T) {
	t.Helper()
	mustRun(t, "ip", "netns", "del", n.name)
	require.False(t, n.exists(), "%s exists after ip netns del", n.path)
}

// nsID is the identity of a namespace: nsfs device and inode.
type nsID struct{ dev, ino uint64 }

func (n nsID) String() string { return fmt.Sprintf("net:[%d]", n.ino) }

// nsIDOf stats a namespace path (following symlinks) and requires nsfs.
func nsIDOf(path string) (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return nsID{}, err
	}
	if fs.Type != nsfsMagic {
		return nsID{}, fmt.Errorf("%s is not an nsfs file (statfs type %#x)", path, fs.Type)
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}

func statNS(t *testing.T, path string) nsID {
	t.Helper()
	id, err := nsIDOf(path)
	require.NoError(t, err, "stat %s", path)
	return id
}

func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dev                      string // "major:minor"
	root, mountpoint, fstype string
}

func readMountinfo(t *testing.T) []mountEntry {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []mountEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		require.True(t, sep > 0 && sep+1 < len(f), "bad mountinfo line %q", line)
		out = append(out, mountEntry{dev: f[2], root: unescapeMountinfo(f[3]), mountpoint: unescapeMountinfo(f[4]), fstype: f[sep+1]})
	}
	return out
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountedAt returns the filesystem type mounted at path ("" when none).
func mountedAt(t *testing.T, path string) string {
	t.Helper()
	return mountAt(t, path).fstype
}

// mountAt returns the top mount at path (zero when none).
func mountAt(t *testing.T, path string) mountEntry {
	t.Helper()
	var top mountEntry
	for _, m := range readMountinfo(t) {
		if m.mountpoint == path {
			top = m // the last one is on top
		}
	}
	return top
}

// nsfsMountsOf returns the mount points of nsfs mounts of a netns inode.
func nsfsMountsOf(t *testing.T, ino uint64) []string {
	t.Helper()
	want := fmt.Sprintf("net:[%d]", ino)
	var out []string
	for _, m := range readMountinfo(t) {
		if m.root == want {
			out = append(out, m.mountpoint)
		}
	}
	return out
}

// newWorkDir makes a temporary folder; at cleanup it lazily unmounts what is
// left under it (deepest first: FUSE mounts and pins, then pinDir, which the
// plugin makes a shared bind mount) and removes it. Never RemoveAll across a
// mount: a dead FUSE mount would hang it.
func newWorkDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "netns-pin-ceph-e2e-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := unmountUnder(t, dir); err != nil {
			t.Errorf("cleanup: %v (left %s in place)", err, dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

func mountsUnder(t *testing.T, dir string) []string {
	var out []string
	for _, m := range readMountinfo(t) {
		if m.mountpoint == dir || strings.HasPrefix(m.mountpoint, dir+"/") {
			out = append(out, m.mountpoint)
		}
	}
	return out
}

func unmountUnder(t *testing.T, dir string) error {
	for range 20 {
		mps := mountsUnder(t, dir)
		if len(mps) == 0 {
			return nil
		}
		sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
		for _, mp := range mps {
			t.Logf("cleanup: umount -l %s", mp)
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("umount -l %s: %w", mp, err)
			}
		}
	}
	return fmt.Errorf("mounts remain under %s: %v", dir, mountsUnder(t, dir))
}

// procComm returns /proc/<pid>/comm.
func procComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

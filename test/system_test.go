package e2e

// Host-side helpers: environment discovery, commands, network namespaces,
// links, temporary folders with mounts, mountinfo and nsfs identities.

import (
	"bufio"
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
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// nsfsMagic is NSFS_MAGIC from linux/magic.h.
const nsfsMagic = 0x6e736673

// env is where the binaries under test are.
type env struct {
	cniPath string // netns-pin + reference plugins
	cnitool string
}

var (
	envOnce sync.Once
	envVal  env
	envErr  error
)

// requireEnv fails the test (never skips) when the suite cannot run here.
func requireEnv(t *testing.T) env {
	t.Helper()
	envOnce.Do(func() { envVal, envErr = discoverEnv() })
	if envErr != nil {
		t.Fatalf("e2e environment not ready: %v", envErr)
	}
	return envVal
}

func discoverEnv() (env, error) {
	if os.Geteuid() != 0 {
		return env{}, errors.New("the e2e suite needs root (it creates network namespaces, links and mounts): run `make test` or `go test ./test/...` as root")
	}
	cniPath := os.Getenv("NETNS_PIN_CNI_PATH")
	if cniPath == "" {
		cniPath = filepath.Join("..", ".cache", "cni", "bin")
	}
	cnitool := os.Getenv("NETNS_PIN_CNITOOL")
	if cnitool == "" {
		cnitool = filepath.Join("..", ".cache", "bin", "cnitool")
	}
	var err error
	if cniPath, err = filepath.Abs(cniPath); err != nil {
		return env{}, err
	}
	if cnitool, err = filepath.Abs(cnitool); err != nil {
		return env{}, err
	}
	hint := "run `make tools build` (or `hack/tools.sh`), or set NETNS_PIN_CNI_PATH / NETNS_PIN_CNITOOL"
	for _, p := range []string{"netns-pin", "bridge", "macvlan", "host-local"} {
		if err := checkExecutable(filepath.Join(cniPath, p)); err != nil {
			return env{}, fmt.Errorf("NETNS_PIN_CNI_PATH=%s: %w; %s", cniPath, err, hint)
		}
	}
	if err := checkExecutable(cnitool); err != nil {
		return env{}, fmt.Errorf("NETNS_PIN_CNITOOL: %w; %s", err, hint)
	}
	for _, c := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			return env{}, fmt.Errorf("%s not in PATH: install iproute2 and util-linux (hack/tools.sh packages)", c)
		}
	}
	return env{cniPath: cniPath, cnitool: cnitool}, nil
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s is missing", p)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// randHex returns n random hex digits.
func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)[:n]
}

var subnetCounter atomic.Int32

// nextSubnet hands out 10.99.X.0/24, a different X for every call in this
// process. Nothing on the host routes to them: bridges get no address and the
// addresses live only in namespaces the test made.
func nextSubnet() string {
	x := subnetCounter.Add(1)
	if x > 250 {
		panic("out of 10.99.X.0/24 subnets")
	}
	return fmt.Sprintf("10.99.%d.0/24", x)
}

// cmdResult is what a finished command printed.
type cmdResult struct {
	stdout, stderr string
	err            error
}

func (r cmdResult) String() string {
	return fmt.Sprintf("err=%v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
}

// runCmd runs a command with a deadline and the given extra environment.
func runCmd(extraEnv []string, name string, args ...string) cmdResult {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return cmdResult{stdout: out.String(), stderr: errb.String(), err: err}
}

// mustRun runs a command and fails the test when it fails.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	r := runCmd(nil, name, args...)
	require.NoError(t, r.err, "%s %s failed:\n%s", name, strings.Join(args, " "), r)
	return r.stdout
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

// newNetns makes a uniquely named network namespace, deleted at cleanup.
func newNetns(t *testing.T) *netnsHandle {
	t.Helper()
	n := &netnsHandle{name: "npe2e-" + randHex(8)}
	n.path = filepath.Join("/run/netns", n.name)
	mustRun(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		if n.exists() {
			if r := runCmd(nil, "ip", "netns", "del", n.name); r.err != nil {
				t.Errorf("cleanup: ip netns del %s: %s", n.name, r)
			}
		}
	})
	mustRun(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	n.id = statNS(t, n.path)
	return n
}

// delete removes the namespace's name (the namespace lives on while pinned).
func (n *netnsHandle) delete(t *testing.T) {
	t.Helper()
	mustRun(t, "ip", "netns", "del", n.name)
	_, err := os.Lstat(n.path)
	require.True(t, os.IsNotExist(err), "%s still exists after ip netns del", n.path)
}

// newBridge makes a uniquely named bridge (deleted at cleanup) for the bridge
// plugin to use. Its MAC address is set, so it does not change as ports come
// and go: the reference bridge plugin's CHECK compares it with the MAC of the
// ADD result.
func newBridge(t *testing.T) string {
	t.Helper()
	name := "npbr" + randHex(8)
	mustRun(t, "ip", "link", "add", "name", name, "type", "bridge")
	t.Cleanup(func() { deleteLinkIfExists(t, name) })
	mustRun(t, "ip", "link", "set", name, "address", "02:00:"+randHex(2)+":"+randHex(2)+":"+randHex(2)+":"+randHex(2), "up")
	return name
}

// newVethMaster makes a veth pair in the host netns (this kernel has no dummy
// links) and returns the end to use as a macvlan master.
func newVethMaster(t *testing.T) string {
	t.Helper()
	a, b := "npv"+randHex(8)+"a", "npv"+randHex(8)+"b"
	mustRun(t, "ip", "link", "add", a, "type", "veth", "peer", "name", b)
	t.Cleanup(func() { deleteLinkIfExists(t, a) })
	mustRun(t, "ip", "link", "set", a, "up")
	mustRun(t, "ip", "link", "set", b, "up")
	return a
}

func deleteLinkIfExists(t *testing.T, name string) {
	if _, err := netlink.LinkByName(name); err != nil {
		return
	}
	if r := runCmd(nil, "ip", "link", "del", name); r.err != nil {
		t.Errorf("cleanup: ip link del %s: %s", name, r)
	}
}

func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// linkGoneWatcher reports when a host link disappears. Start it before the
// action that should make the link go, then call wait.
type linkGoneWatcher struct {
	name string
	ch   chan netlink.LinkUpdate
	done chan struct{}
}

func watchLinkGone(t *testing.T, name string) *linkGoneWatcher {
	t.Helper()
	w := &linkGoneWatcher{name: name, ch: make(chan netlink.LinkUpdate, 64), done: make(chan struct{})}
	require.NoError(t, netlink.LinkSubscribe(w.ch, w.done))
	t.Cleanup(func() { close(w.done) })
	return w
}

// wait blocks until the link is gone (a RTM_DELLINK event for it, or it is
// already absent) or the timeout passes.
func (w *linkGoneWatcher) wait(t *testing.T, timeout time.Duration, why string) {
	t.Helper()
	if !linkExists(w.name) {
		return
	}
	deadline := time.After(timeout)
	for {
		select {
		case u, ok := <-w.ch:
			if !ok {
				require.False(t, linkExists(w.name), "netlink subscription closed while %s still exists: %s", w.name, why)
				return
			}
			if u.Header.Type == syscall.RTM_DELLINK && u.Link != nil && u.Link.Attrs().Name == w.name {
				return
			}
		case <-deadline:
			require.False(t, linkExists(w.name), "%s still exists %s later: %s", w.name, timeout, why)
			return
		}
	}
}

// startMountNS starts a process in a new mount namespace whose mounts are
// all shared (like a csi-plugin container with Bidirectional propagation)
// and returns its pid once the namespace exists. The process is killed at
// cleanup.
func startMountNS(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "shared", "--", "sh", "-c", "echo ready; exec sleep 600")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		require.NoError(t, err, "unshare --mount")
	case <-time.After(30 * time.Second):
		t.Fatal("unshare --mount did not start within 30s")
	}
	return cmd.Process.Pid
}

// nsID is the identity of a namespace file: the nsfs device and inode.
type nsID struct {
	dev, ino uint64
}

func (n nsID) String() string { return fmt.Sprintf("dev=%d ino=%d", n.dev, n.ino) }

// statNS stats a namespace path (following symlinks) and requires nsfs.
func statNS(t *testing.T, path string) nsID {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st), "stat %s", path)
	var fs syscall.Statfs_t
	require.NoError(t, syscall.Statfs(path, &fs), "statfs %s", path)
	require.EqualValues(t, nsfsMagic, fs.Type, "%s is not an nsfs file (statfs type %#x)", path, fs.Type)
	return nsID{dev: st.Dev, ino: st.Ino}
}

// mountEntry is one line of /proc/<pid>/mountinfo.
type mountEntry struct {
	root, mountpoint, fstype, source string
	optional                         []string
}

func readMountinfo(t *testing.T) []mountEntry {
	t.Helper()
	return readMountinfoFile(t, "/proc/self/mountinfo")
}

func readMountinfoFile(t *testing.T, path string) []mountEntry {
	t.Helper()
	data, err := os.ReadFile(path)
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
		require.True(t, sep > 0 && sep+2 < len(f), "bad mountinfo line %q", line)
		out = append(out, mountEntry{
			root:       unescapeMountinfo(f[3]),
			mountpoint: unescapeMountinfo(f[4]),
			optional:   f[6:sep],
			fstype:     f[sep+1],
			source:     unescapeMountinfo(f[sep+2]),
		})
	}
	return out
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space ...).
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

// mountsAt returns the mounts whose mount point is exactly path.
func mountsAt(t *testing.T, path string) []mountEntry {
	t.Helper()
	return mountsAtIn(t, "/proc/self/mountinfo", path)
}

// mountsAtIn is mountsAt for the mount namespace of a mountinfo file.
func mountsAtIn(t *testing.T, mountinfo, path string) []mountEntry {
	t.Helper()
	var out []mountEntry
	for _, m := range readMountinfoFile(t, mountinfo) {
		if m.mountpoint == path {
			out = append(out, m)
		}
	}
	return out
}

// nsfsMountsOf returns the mount points of nsfs mounts of the given netns
// inode (root "net:[<ino>]") anywhere in this mount namespace.
func nsfsMountsOf(t *testing.T, ino uint64) []string {
	t.Helper()
	return nsfsMountsOfIn(t, "/proc/self/mountinfo", ino)
}

// nsfsMountsOfIn is nsfsMountsOf for the mount namespace of a mountinfo file.
func nsfsMountsOfIn(t *testing.T, mountinfo string, ino uint64) []string {
	t.Helper()
	want := fmt.Sprintf("net:[%d]", ino)
	var out []string
	for _, m := range readMountinfoFile(t, mountinfo) {
		if m.root == want {
			out = append(out, m.mountpoint)
		}
	}
	return out
}

// newWorkDir makes a temporary folder for pinDir/stateDir/caches. At cleanup
// it lazily unmounts whatever is mounted under it (pins first, then pinDir,
// which the plugin makes a shared bind mount) and removes it.
func newWorkDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "netns-pin-e2e-")
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
		// deepest first: pins before pinDir
		sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("umount -l %s: %w", mp, err)
			}
		}
	}
	return fmt.Errorf("mounts remain under %s: %v", dir, mountsUnder(t, dir))
}

// treeEntries lists every path under dir (relative), or nil when dir does not exist.
func treeEntries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return filepath.SkipDir
			}
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

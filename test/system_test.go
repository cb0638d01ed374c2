package e2e

// Host-side helpers of this suite: environment discovery, subnets, bridges
// and veths, link watches, mount namespaces, mounts at a path. Those the
// suites share are in internal/hosttest and internal/host.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// env is where the binaries under test are.
type env struct {
	cniPath string // netns-pin + reference plugins
	cnitool string
	ctl     string // netns-pinctl, the operator's commands
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
	// go test runs in test/: the repository is one level up
	cniPath, cnitool, err := host.DiscoverCNI("..", "netns-pin", "bridge", "macvlan", "host-local")
	if err != nil {
		return env{}, err
	}
	ctl, err := host.DiscoverCtl("..")
	if err != nil {
		return env{}, err
	}
	for _, c := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			return env{}, fmt.Errorf("%s not in PATH: install iproute2 and util-linux (hack/tools.sh packages)", c)
		}
	}
	return env{cniPath: cniPath, cnitool: cnitool, ctl: ctl}, nil
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

// newBridge makes a uniquely named bridge (deleted at cleanup) for the bridge
// plugin to use. Its MAC address is set, so it does not change as ports come
// and go: the reference bridge plugin's CHECK compares it with the MAC of the
// ADD result.
func newBridge(t *testing.T) string {
	t.Helper()
	name := "npbr" + host.RandHex(8)
	hosttest.MustRun(t, "ip", "link", "add", "name", name, "type", "bridge")
	t.Cleanup(func() { deleteLinkIfExists(t, name) })
	hosttest.MustRun(t, "ip", "link", "set", name, "address", "02:00:"+host.RandHex(2)+":"+host.RandHex(2)+":"+host.RandHex(2)+":"+host.RandHex(2), "up")
	return name
}

// newVethMaster makes a veth pair in the host netns (this kernel has no dummy
// links) and returns the end to use as a macvlan master.
func newVethMaster(t *testing.T) string {
	t.Helper()
	a, b := "npv"+host.RandHex(8)+"a", "npv"+host.RandHex(8)+"b"
	hosttest.MustRun(t, "ip", "link", "add", a, "type", "veth", "peer", "name", b)
	t.Cleanup(func() { deleteLinkIfExists(t, a) })
	hosttest.MustRun(t, "ip", "link", "set", a, "up")
	hosttest.MustRun(t, "ip", "link", "set", b, "up")
	return a
}

func deleteLinkIfExists(t *testing.T, name string) {
	if _, err := netlink.LinkByName(name); err != nil {
		return
	}
	if r := host.RunCmd(host.CmdTimeout, nil, nil, "ip", "link", "del", name); r.Err != nil {
		t.Errorf("cleanup: ip link del %s: %s", name, r)
	}
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
	if !host.LinkExists(w.name) {
		return
	}
	deadline := time.After(timeout)
	for {
		select {
		case u, ok := <-w.ch:
			if !ok {
				require.False(t, host.LinkExists(w.name), "netlink subscription closed while %s still exists: %s", w.name, why)
				return
			}
			if u.Header.Type == syscall.RTM_DELLINK && u.Link != nil && u.Link.Attrs().Name == w.name {
				return
			}
		case <-deadline:
			require.False(t, host.LinkExists(w.name), "%s still exists %s later: %s", w.name, timeout, why)
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
	t.Cleanup(func() { assert.NoError(t, host.Stop(cmd)) })
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

// mountsAt returns the mounts whose mount point is exactly path.
func mountsAt(t *testing.T, path string) []hosttest.MountEntry {
	t.Helper()
	return mountsAtIn(t, "/proc/self/mountinfo", path)
}

// mountsAtIn is mountsAt for the mount namespace of a mountinfo file.
func mountsAtIn(t *testing.T, mountinfo, path string) []hosttest.MountEntry {
	t.Helper()
	var out []hosttest.MountEntry
	for _, m := range hosttest.ReadMountinfoFile(t, mountinfo) {
		if m.Mountpoint == path {
			out = append(out, m)
		}
	}
	return out
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
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, rel)
		return err
	})
	require.NoError(t, err)
	return out
}

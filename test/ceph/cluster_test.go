package ceph

// The Ceph cluster and the binaries the suite runs: found once per process,
// brought up by hack/ceph/up.sh when NETNS_PIN_CEPH_DIR does not name one,
// torn down by hack/ceph/down.sh in TestMain.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// env is where the binaries under test are.
type env struct {
	cniPath string // netns-pin + reference plugins
	cnitool string
}

// cluster is a running cluster as described by <dir>/env (see up.sh).
type cluster struct {
	dir        string
	conf       string
	client     string // "client.netnspin"
	keyring    string
	fs         string
	pool       string
	netns      string // the daemons' netns (name under /run/netns)
	bridge     string
	subnet     string
	monIP      string
	rangeStart string // client addresses free for tests on the bridge
	rangeEnd   string
	memstore   string
	ours       bool // brought up by this process: torn down in TestMain
	upTime     time.Duration
	upLog      string
}

var (
	setupOnce sync.Once
	envVal    env
	clu       *cluster
	setupErr  error
	logOnce   sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if clu != nil && clu.ours {
		start := time.Now()
		out, err := runScript(2*time.Minute, downScript(), clu.dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hack/ceph/down.sh %s failed: %v\n%s\n", clu.dir, err, out)
			if code == 0 {
				code = 1
			}
		} else {
			fmt.Printf("ceph cluster %s: down in %.1fs\n", clu.dir, time.Since(start).Seconds())
		}
	}
	os.Exit(code)
}

// requireSetup returns the binaries and the cluster, or fails the test (never
// skips) saying what is missing.
func requireSetup(t *testing.T) (env, *cluster) {
	t.Helper()
	setupOnce.Do(func() { envVal, clu, setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("ceph e2e environment not ready: %v", setupErr)
	}
	logOnce.Do(func() {
		if clu.ours {
			t.Logf("hack/ceph/up.sh %s: cluster up in %.1fs\n%s", clu.dir, clu.upTime.Seconds(), strings.TrimSpace(clu.upLog))
		} else {
			t.Logf("using the cluster in NETNS_PIN_CEPH_DIR=%s", clu.dir)
		}
	})
	return envVal, clu
}

// repoRoot is two levels up from this package (go test runs in it).
func repoRoot() string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return root
}

func upScript() string   { return filepath.Join(repoRoot(), "hack", "ceph", "up.sh") }
func downScript() string { return filepath.Join(repoRoot(), "hack", "ceph", "down.sh") }

func setup() (env, *cluster, error) {
	if os.Geteuid() != 0 {
		return env{}, nil, errors.New("the ceph e2e suite needs root (network namespaces, bridges, FUSE mounts, Ceph daemons): run `make test` or `go test ./test/ceph/` as root")
	}
	e, err := discoverEnv()
	if err != nil {
		return env{}, nil, err
	}
	c, err := discoverCluster()
	if err != nil {
		return env{}, nil, err
	}
	for _, b := range []string{"ceph-fuse", "rados", "ceph", "nsenter", "ip", "umount"} {
		if _, err := exec.LookPath(b); err != nil {
			return env{}, nil, fmt.Errorf("%s not in PATH although the cluster is up: install ceph-fuse ceph-common util-linux iproute2 (hack/ceph/up.sh does)", b)
		}
	}
	return e, c, nil
}

func discoverEnv() (env, error) {
	cniPath, cnitool, err := host.DiscoverCNI(repoRoot(), "netns-pin", "bridge", "host-local")
	if err != nil {
		return env{}, err
	}
	return env{cniPath: cniPath, cnitool: cnitool}, nil
}

// discoverCluster reads NETNS_PIN_CEPH_DIR's env file, or brings a cluster up.
func discoverCluster() (*cluster, error) {
	if dir := os.Getenv("NETNS_PIN_CEPH_DIR"); dir != "" {
		c, err := loadCluster(dir)
		if err != nil {
			return nil, fmt.Errorf("NETNS_PIN_CEPH_DIR=%s: %w (make it with `hack/ceph/up.sh %s`, or unset the variable to let the suite make its own)", dir, err, dir)
		}
		return c, nil
	}
	dir, err := os.MkdirTemp("", "netns-pin-ceph-")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	// the first run may install Debian's Ceph packages (~30-60 s)
	out, err := runScript(6*time.Minute, upScript(), dir)
	if err != nil {
		// up.sh tears down what it made; keep its logs for the reader
		return nil, fmt.Errorf("hack/ceph/up.sh %s: %w\n%s", dir, err, out)
	}
	c, err := loadCluster(dir)
	if err != nil {
		if _, derr := runScript(2*time.Minute, downScript(), dir); derr != nil {
			err = errors.Join(err, fmt.Errorf("hack/ceph/down.sh: %w", derr))
		}
		return nil, fmt.Errorf("after hack/ceph/up.sh %s: %w\n%s", dir, err, out)
	}
	c.ours, c.upTime, c.upLog = true, time.Since(start), out
	return c, nil
}

func loadCluster(dir string) (*cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		return nil, fmt.Errorf("no cluster env file: %w", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("env: bad line %q", line)
		}
		kv[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	c := &cluster{
		dir: dir, conf: kv["CEPH_CONF"], client: kv["CEPH_CLIENT"], keyring: kv["CEPH_KEYRING"],
		fs: kv["CEPH_FS"], pool: kv["CEPH_POOL"], netns: kv["CEPH_NETNS"], bridge: kv["CEPH_BRIDGE"],
		subnet: kv["CEPH_SUBNET"], monIP: kv["CEPH_MON_IP"], rangeStart: kv["CEPH_CLIENT_RANGE_START"],
		rangeEnd: kv["CEPH_CLIENT_RANGE_END"], memstore: kv["CEPH_MEMSTORE_BYTES"],
	}
	for k, v := range map[string]string{"CEPH_CONF": c.conf, "CEPH_CLIENT": c.client, "CEPH_KEYRING": c.keyring,
		"CEPH_FS": c.fs, "CEPH_POOL": c.pool, "CEPH_NETNS": c.netns, "CEPH_BRIDGE": c.bridge, "CEPH_SUBNET": c.subnet,
		"CEPH_CLIENT_RANGE_START": c.rangeStart, "CEPH_CLIENT_RANGE_END": c.rangeEnd} {
		if v == "" {
			return nil, fmt.Errorf("env: %s is missing", k)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", c.netns)); err != nil {
		return nil, fmt.Errorf("the daemons' netns %s is gone: is the cluster still up?", c.netns)
	}
	// one round trip: the cluster answers
	if r := c.admin(30*time.Second, "health"); r.Err != nil {
		return nil, fmt.Errorf("ceph health: %s", r)
	}
	return c, nil
}

// runScript runs a bash script with arguments and returns its combined output.
func runScript(timeout time.Duration, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timeout %s)", err, timeout)
	}
	return string(out), err
}

// admin runs the ceph CLI as client.admin from the daemons' netns (the host
// has no address on the cluster's bridge).
func (c *cluster) admin(timeout time.Duration, args ...string) host.CmdResult {
	full := append([]string{"--net=" + filepath.Join("/run/netns", c.netns), "--", "ceph", "-c", c.conf, "--connect-timeout", "10"}, args...)
	return host.RunCmd(timeout, nil, nil, "nsenter", full...)
}

// clientArgs are the arguments every Ceph client of the tests gets.
func (c *cluster) clientArgs() []string {
	return []string{"-c", c.conf, "-n", c.client, "--keyring", c.keyring}
}

package runtime

// The suite's runtime: hack/runtime/setup.sh on first use, a kube-apiserver
// for Multus, the Multus configuration, and hack/runtime/teardown.sh at the
// end.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

const (
	setupTimeout = 15 * time.Minute // from nothing: apt + two Go builds (hack/kube/build.sh: make tools)
	cmdTimeout   = 2 * time.Minute
	readyTimeout = 60 * time.Second
	// defaultSubnet is the default network's (eth0); the storage networks
	// get 10.98.N.0/24. test/ uses 10.99.X.0/24, so both suites can run at
	// once. Nothing on the host routes to them: the bridge has no address.
	defaultSubnet = "10.98.0.0/24"
)

// suite is the running runtime shared by every test.
type suite struct {
	repo         string
	dir          string // setup.sh's folder
	work         string // per-test folders
	crictl       string
	criConfig    string
	cniBin       string
	cniConf      string
	cgroupParent string
	pinBin       string // the netns-pin binary containerd runs (through cni/bin)
	api          *kubeAPI
	bridge       string // default network's bridge
	master       string // veth end, macvlan master of the storage networks
	peer         string // the veth's other end
	setupTime    time.Duration
	// noRetryOnError: Multus without "retryDeleteOnError" (see
	// setRetryDeleteOnError).
	noRetryOnError bool
}

// shared is the runtime every test uses.
var shared hosttest.Shared[suite]

func TestMain(m *testing.M) { shared.Main(m, "runtime", (*suite).close) }

// requireRuntime returns the running runtime, setting it up on first use.
// It fails (never skips) the test when that is impossible.
func requireRuntime(t *testing.T) *suite {
	t.Helper()
	return shared.Get(t, "runtime end to end suite", newSuite)
}

func newSuite() (*suite, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("it needs root (containerd, network namespaces, mounts): run `make test` or `go test ./test/runtime/` as root")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	s := &suite{repo: repo}
	cniPath := os.Getenv("NETNS_PIN_CNI_PATH")
	if cniPath == "" {
		cniPath = filepath.Join(repo, ".cache", "cni", "bin")
	}
	if cniPath, err = filepath.Abs(cniPath); err != nil {
		return nil, err
	}
	s.pinBin = filepath.Join(cniPath, "netns-pin")
	if _, err := os.Stat(s.pinBin); err != nil {
		return nil, fmt.Errorf("%s is missing: run `make build` (hack/tools.sh plugin) or set NETNS_PIN_CNI_PATH", s.pinBin)
	}
	reapStale()
	s.dir = os.Getenv("NETNS_PIN_RUNTIME_DIR")
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("/tmp", "netns-pin-rt."); err != nil {
			return nil, err
		}
	}
	// From here on, what newSuite returns with an error is torn down too.
	if err := os.MkdirAll(s.dir, 0o711); err != nil {
		return s, err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return s, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "runtime", "setup.sh"), s.dir)
	cmd.Env = append(os.Environ(), "NETNS_PIN_BIN="+s.pinBin)
	out, err := cmd.CombinedOutput()
	s.setupTime = time.Since(start)
	fmt.Fprintf(os.Stderr, "runtime setup (%s):\n%s", s.setupTime.Round(time.Millisecond), out)
	if err != nil {
		return s, fmt.Errorf("hack/runtime/setup.sh %s: %v", s.dir, err)
	}
	env, err := host.ReadEnvFile(filepath.Join(s.dir, "env"), "CRICTL", "CRI_CONFIG_FILE", "CNI_BIN_DIR", "CNI_CONF_DIR", "CGROUP_PARENT")
	if err != nil {
		return s, err
	}
	s.crictl, s.criConfig = env["CRICTL"], env["CRI_CONFIG_FILE"]
	s.cniBin, s.cniConf, s.cgroupParent = env["CNI_BIN_DIR"], env["CNI_CONF_DIR"], env["CGROUP_PARENT"]
	s.work = filepath.Join(s.dir, "tests")
	if err := os.MkdirAll(s.work, 0o755); err != nil {
		return s, err
	}
	if err := s.makeLinks(); err != nil {
		return s, err
	}
	if s.api, err = startKubeAPI(repo, filepath.Join(s.dir, "kube-api")); err != nil {
		return s, fmt.Errorf("kube-apiserver for Multus: %w", err)
	}
	if err := s.writeMultusConfig(); err != nil {
		return s, err
	}
	return s, s.waitNetworkReady()
}

// reapStale tears down runtimes of earlier runs that died without their
// teardown (go test's timeout, a kill): their owner process is gone.
func reapStale() {
	dirs, _ := filepath.Glob("/tmp/netns-pin-rt.*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		out, err := exec.Command(filepath.Join("..", "..", "hack", "runtime", "teardown.sh"), d).CombinedOutput()
		fmt.Fprintf(os.Stderr, "stale runtime %s (owner %d gone) torn down: err=%v\n%s", d, pid, err, out)
	}
}

// processAlive reports whether pid runs; a zombie (killed, not yet
// reaped) does not.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// makeLinks makes the default network's bridge and the veth pair whose end
// is the storage networks' macvlan master (this kernel has no dummy links),
// named in <dir>/links.list for teardown.sh.
func (s *suite) makeLinks() error {
	s.bridge = "nprtbr" + host.RandHex(6)
	s.master, s.peer = "nprtm"+host.RandHex(6), "nprtp"+host.RandHex(6)
	// teardown.sh deletes the links named here, also when this process
	// dies before its own cleanup.
	list := fmt.Sprintf("%s\n%s\n", s.bridge, s.master)
	if err := os.WriteFile(filepath.Join(s.dir, "links.list"), []byte(list), 0o644); err != nil {
		return err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: s.bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("add bridge %s: %w", s.bridge, err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.master}, PeerName: s.peer}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", s.master, err)
	}
	for _, n := range []string{s.bridge, s.master, s.peer} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", n, err)
		}
	}
	return nil
}

// multusConfig is Multus' thin-plugin configuration, the first (and only)
// file in containerd's CNI conf dir, with the default network inline in
// "delegates". (Multus v4.2.3 given "clusterNetwork" as the path of a
// conflist caches the delegate without the plugins' own fields, and its DEL
// then fails: bridge "no IP ranges specified".) retryDeleteOnError keeps
// Multus' cache of a pod's delegates while a DEL fails, so the runtime's
// retries DEL the same networks (docs/operating.md).
func (s *suite) multusConfig() map[string]any {
	defaultNet := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "default-net",
		"plugins": []any{map[string]any{
			"type":   "bridge",
			"bridge": s.bridge,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": filepath.Join(s.dir, "host-local"),
				"ranges":  [][]map[string]any{{{"subnet": defaultSubnet}}},
			},
		}},
	}
	return map[string]any{
		"cniVersion":         "1.0.0",
		"name":               "multus-cni-network",
		"type":               "multus",
		"kubeconfig":         s.api.kubeconfig,
		"delegates":          []any{defaultNet},
		"confDir":            filepath.Join(s.dir, "multus.d"),
		"cniDir":             filepath.Join(s.dir, "multus-cache"),
		"binDir":             s.cniBin,
		"logFile":            filepath.Join(s.dir, "multus.log"),
		"logLevel":           "verbose",
		"retryDeleteOnError": !s.noRetryOnError,
		"multusNamespace":    "kube-system",
		"systemNamespaces":   []string{"kube-system"},
	}
}

func (s *suite) writeMultusConfig() error {
	if err := os.MkdirAll(filepath.Join(s.dir, "multus.d"), 0o755); err != nil {
		return err
	}
	return writeJSON(filepath.Join(s.cniConf, "00-multus.conf"), s.multusConfig())
}

// setRetryDeleteOnError rewrites Multus' configuration with
// retryDeleteOnError on or off until the test ends, and waits until
// containerd has loaded it.
func (s *suite) setRetryDeleteOnError(t *testing.T, on bool) {
	t.Helper()
	set := func(on bool) error {
		s.noRetryOnError = !on
		if err := s.writeMultusConfig(); err != nil {
			return err
		}
		want := regexp.MustCompile(fmt.Sprintf(`retryDeleteOnError\\?"\s*:\s*%v`, on))
		if !host.Poll(readyTimeout, 50*time.Millisecond, func() bool { return want.MatchString(s.crictlRun("info").Stdout) }) {
			return fmt.Errorf("containerd did not load Multus' configuration with retryDeleteOnError %v", on)
		}
		return nil
	}
	require.NoError(t, set(on))
	t.Cleanup(func() { require.NoError(t, set(true)) })
}

// waitNetworkReady polls the CRI status until containerd has loaded the
// CNI configuration: a sandbox started before that fails.
func (s *suite) waitNetworkReady() error {
	var last string
	ready := host.Poll(readyTimeout, 100*time.Millisecond, func() bool {
		r := s.crictlRun("info")
		if r.Err != nil {
			last = r.String()
			return false
		}
		var info struct {
			Status struct {
				Conditions []struct {
					Type    string `json:"type"`
					Status  bool   `json:"status"`
					Message string `json:"message"`
				} `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &info); err != nil {
			last = err.Error()
			return false
		}
		for _, c := range info.Status.Conditions {
			if c.Type == "NetworkReady" {
				last = c.Message
				return c.Status
			}
		}
		return false
	})
	if ready {
		return nil
	}
	return fmt.Errorf("containerd's CRI network not ready after %s: %s", readyTimeout, last)
}

func (s *suite) close() error {
	var errs []error
	if s.api != nil {
		s.api.Close()
	}
	if os.Getenv("NETNS_PIN_RUNTIME_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "NETNS_PIN_RUNTIME_KEEP=1: runtime left running in %s (hack/runtime/teardown.sh %s removes it)\n", s.dir, s.dir)
		return nil
	}
	if s.dir != "" {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(s.repo, "hack", "runtime", "teardown.sh"), s.dir).CombinedOutput()
		fmt.Fprintf(os.Stderr, "runtime teardown (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			errs = append(errs, fmt.Errorf("hack/runtime/teardown.sh: %v", err))
		}
	}
	for _, n := range []string{s.bridge, s.master} {
		if n == "" {
			continue
		}
		if l, err := netlink.LinkByName(n); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete link %s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (s *suite) crictlRun(args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, nil, s.crictl, append([]string{"--config", s.criConfig}, args...)...)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// testDir is a folder for one test's pins, state and fixtures.
func (s *suite) testDir(t *testing.T) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	d := filepath.Join(s.work, name+"-"+host.RandHex(4))
	require.NoError(t, os.MkdirAll(d, 0o755))
	return d
}

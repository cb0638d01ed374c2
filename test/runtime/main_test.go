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
	"sync"
	"testing"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
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

// The runtimes the suite runs its scenarios on (hack/runtime/setup.sh
// <dir> <runtime>): each scenario is a subtest per runtime, named by it, so
// `-run 'TestX/crio'` runs one and sets up only that runtime.
const (
	containerd = "containerd" // Debian's 1.6
	crio       = "crio"       // hack/runtime/crio.sh: the module proxy's v1.34.0 (commit 5dd0877c)
)

var runtimes = []string{containerd, crio}

// suite is one running runtime shared by every test.
type suite struct {
	runtime      string // containerd or crio
	repo         string
	dir          string // setup.sh's folder
	work         string // per-test folders
	crictl       string
	criConfig    string
	cniBin       string
	cniConf      string
	cgroupParent string
	pinBin       string   // the netns-pin binary the runtime runs (through cni/bin)
	ctl          string   // netns-pinctl, the operator's commands and the sweeper
	calls        string   // what the runtime and Multus ran netns-pin for (installCallLog)
	runtimeLog   string   // crio.log (CRI-O)
	api          *kubeAPI // shared by the runtimes
	bridge       string   // default network's bridge
	master       string   // veth end, macvlan master of the storage networks
	peer         string   // the veth's other end
	setupTime    time.Duration
	// noRetryOnError: Multus without "retryDeleteOnError" (see
	// setRetryDeleteOnError).
	noRetryOnError bool
}

// fixture is a runtime (or the kube-apiserver) made on first use and
// torn down when the tests end.
type fixture[T any] struct {
	once sync.Once
	v    *T
	err  error
}

func (f *fixture[T]) get(make func() (*T, error)) (*T, error) {
	f.once.Do(func() { f.v, f.err = make() })
	return f.v, f.err
}

// shared is each runtime the tests use; sharedAPI the kube-apiserver their
// Multus reads, in apiDir.
var (
	shared    = map[string]*fixture[suite]{containerd: {}, crio: {}}
	sharedAPI fixture[kubeAPI]
	apiDir    string
)

// TestMain runs the tests, then tears down each runtime that was made, and
// the kube-apiserver; a teardown that fails fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	var errs []error
	for _, rt := range runtimes {
		if s := shared[rt].v; s != nil {
			errs = append(errs, s.close())
		}
	}
	if k := sharedAPI.v; k != nil {
		k.Close()
	}
	if apiDir != "" && os.Getenv("NETNS_PIN_RUNTIME_KEEP") != "1" {
		errs = append(errs, teardown(filepath.Join("..", ".."), apiDir))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "runtime teardown: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// forEachRuntime runs the scenario as one subtest per runtime, named by it.
func forEachRuntime(t *testing.T, scenario func(t *testing.T, s *suite)) {
	t.Helper()
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) { scenario(t, requireRuntime(t, rt)) })
	}
}

// requireRuntime returns the running runtime rt, setting it up on first
// use. It fails (never skips) the test when that is impossible.
func requireRuntime(t *testing.T, rt string) *suite {
	t.Helper()
	s, err := shared[rt].get(func() (*suite, error) { return newSuite(rt) })
	if err != nil {
		t.Fatalf("runtime end to end suite on %s cannot run: %v", rt, err)
	}
	return s
}

// requireAPI returns the kube-apiserver, starting it on first use.
func requireAPI(repo string) (*kubeAPI, error) {
	return sharedAPI.get(func() (*kubeAPI, error) {
		var err error
		if apiDir, err = os.MkdirTemp("/tmp", "netns-pin-rt.api-"); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(apiDir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, err
		}
		return startKubeAPI(repo, filepath.Join(apiDir, "kube-api"))
	})
}

func newSuite(rt string) (*suite, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("it needs root (the runtime, network namespaces, mounts): run `make test` or `go test ./test/runtime/` as root")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	s := &suite{runtime: rt, repo: repo}
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
	if s.ctl, err = host.DiscoverCtl(repo); err != nil {
		return nil, err
	}
	reapStale()
	if d := os.Getenv("NETNS_PIN_RUNTIME_DIR"); d != "" {
		s.dir = filepath.Join(d, rt)
	} else if s.dir, err = os.MkdirTemp("/tmp", "netns-pin-rt."); err != nil {
		// (no runtime in the name: the thick tests' multus socket under
		// it must fit in sun_path; <dir>/env says RUNTIME=)
		return nil, err
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
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "runtime", "setup.sh"), s.dir, rt)
	cmd.Env = append(os.Environ(), "NETNS_PIN_BIN="+s.pinBin)
	out, err := cmd.CombinedOutput()
	s.setupTime = time.Since(start)
	fmt.Fprintf(os.Stderr, "runtime setup, %s (%s):\n%s", rt, s.setupTime.Round(time.Millisecond), out)
	if err != nil {
		return s, fmt.Errorf("hack/runtime/setup.sh %s %s: %v", s.dir, rt, err)
	}
	env, err := host.ReadEnvFile(filepath.Join(s.dir, "env"), "CRICTL", "CRI_CONFIG_FILE", "CNI_BIN_DIR", "CNI_CONF_DIR", "CGROUP_PARENT")
	if err != nil {
		return s, err
	}
	s.crictl, s.criConfig = env["CRICTL"], env["CRI_CONFIG_FILE"]
	s.cniBin, s.cniConf, s.cgroupParent = env["CNI_BIN_DIR"], env["CNI_CONF_DIR"], env["CGROUP_PARENT"]
	if rt == crio {
		s.runtimeLog = filepath.Join(s.dir, "crio.log")
	}
	if err := s.installCallLog(); err != nil {
		return s, err
	}
	s.work = filepath.Join(s.dir, "tests")
	if err := os.MkdirAll(s.work, 0o755); err != nil {
		return s, err
	}
	if err := s.makeLinks(); err != nil {
		return s, err
	}
	if s.api, err = requireAPI(repo); err != nil {
		return s, fmt.Errorf("kube-apiserver for Multus: %w", err)
	}
	if err := s.writeMultusConfig(); err != nil {
		return s, err
	}
	return s, s.waitNetworkReady()
}

// installCallLog puts a wrapper in the runtime's CNI bin folder in place of
// netns-pin that appends "<command> <container id> <ifname>" to s.calls
// and execs the real binary: which commands a runtime sends (CRI-O calls
// CHECK right after ADD, and DEL again at every stop) is what the
// scenarios compare.
func (s *suite) installCallLog() error {
	s.calls = filepath.Join(s.dir, "netns-pin.calls")
	script := fmt.Sprintf("#!/bin/sh\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME\" >>%s\nexec %s \"$@\"\n", s.calls, s.pinBin)
	wrapper := filepath.Join(s.cniBin, "netns-pin")
	if err := os.Remove(wrapper); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(wrapper, []byte(script), 0o755)
}

// callsOf returns the commands netns-pin was run for with this container
// ID and interface, in order ("ADD", "CHECK", "DEL").
func (s *suite) callsOf(id, ifname string) []string {
	b, _ := os.ReadFile(s.calls)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[1] == id && f[2] == ifname {
			out = append(out, f[0])
		}
	}
	return out
}

// teardown runs hack/runtime/teardown.sh on dir.
func teardown(repo, dir string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(repo, "hack", "runtime", "teardown.sh"), dir).CombinedOutput()
	fmt.Fprintf(os.Stderr, "runtime teardown of %s (%s):\n%s", dir, time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		return fmt.Errorf("hack/runtime/teardown.sh %s: %v", dir, err)
	}
	return nil
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
// the runtime has loaded it.
func (s *suite) setRetryDeleteOnError(t *testing.T, on bool) {
	t.Helper()
	set := func(on bool) error {
		s.noRetryOnError = !on
		mark := s.logMark()
		if err := s.writeMultusConfig(); err != nil {
			return err
		}
		want := regexp.MustCompile(fmt.Sprintf(`retryDeleteOnError\\?"\s*:\s*%v`, on))
		return s.waitConfLoaded(mark, "00-multus.conf", "multus-cni-network", func(info string) bool { return want.MatchString(info) })
	}
	require.NoError(t, set(on))
	t.Cleanup(func() { require.NoError(t, set(true)) })
}

// logMark is where the runtime's log ends now (CRI-O; 0 for containerd):
// waitConfLoaded looks for CRI-O's reload after it.
func (s *suite) logMark() int64 {
	if s.runtimeLog == "" {
		return 0
	}
	st, err := os.Stat(s.runtimeLog)
	if err != nil {
		return 0
	}
	return st.Size()
}

// crioEvent is ocicni's log line for a change of a file in the CNI conf
// folder (logrus quotes the fsnotify event's quoted name);
// crioReloaded is its line after it loaded the folder again.
var (
	crioEvent    = regexp.MustCompile(`CNI monitoring event \S+\s+\\?"([^"\\]+)\\?"`)
	crioReloaded = regexp.MustCompile(`Updated default CNI network name to (\S+?)"?$`)
)

// waitConfLoaded waits until the runtime has loaded the CNI configuration
// file (a name in its conf folder) written after mark, making network the
// default. containerd shows its configuration in `crictl info` (want
// checks it); CRI-O does not, and its log (ocicni) says when it loaded the
// folder again after an event of that file.
func (s *suite) waitConfLoaded(mark int64, file, network string, want func(info string) bool) error {
	if s.runtime != crio {
		if !host.Poll(readyTimeout, 50*time.Millisecond, func() bool { return want(s.crictlRun("info").Stdout) }) {
			return fmt.Errorf("%s did not load the CNI configuration %s", s.runtime, file)
		}
		return nil
	}
	ok := host.Poll(readyTimeout, 50*time.Millisecond, func() bool {
		b, err := os.ReadFile(s.runtimeLog)
		if err != nil || int64(len(b)) < mark {
			return false
		}
		seen := false
		for _, l := range strings.Split(string(b[mark:]), "\n") {
			if m := crioEvent.FindStringSubmatch(l); m != nil && filepath.Base(m[1]) == file {
				seen = true
			} else if m := crioReloaded.FindStringSubmatch(l); seen && m != nil && m[1] == network {
				return true
			}
		}
		return false
	})
	if !ok {
		b, _ := os.ReadFile(s.runtimeLog)
		return fmt.Errorf("CRI-O did not load the CNI configuration %s (network %s) after %s:\n%s", file, network, readyTimeout, host.Tail(string(b[min(int64(len(b)), mark):]), 20))
	}
	return nil
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
	if os.Getenv("NETNS_PIN_RUNTIME_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "NETNS_PIN_RUNTIME_KEEP=1: %s left running in %s (hack/runtime/teardown.sh %s removes it)\n", s.runtime, s.dir, s.dir)
		return nil
	}
	if s.dir != "" {
		errs = append(errs, teardown(s.repo, s.dir))
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

// useRuntimeConf makes conflist (network name) the runtime's CNI
// configuration until the test ends: its file sorts before Multus' and is
// the one containerd loads (max_conf_num 1) and CRI-O's default network.
// Then Multus' is the runtime's configuration again.
func (s *suite) useRuntimeConf(t *testing.T, name string, conflist []byte) {
	t.Helper()
	const file = "00-chain.conflist"
	path := filepath.Join(s.cniConf, file)
	has := func(info string) bool {
		return strings.Contains(info, `\"name\": \"`+name+`\"`) || strings.Contains(info, `"name": "`+name+`"`)
	}
	mark := s.logMark()
	require.NoError(t, os.WriteFile(path+".tmp", conflist, 0o644))
	require.NoError(t, os.Rename(path+".tmp", path))
	t.Cleanup(func() {
		mark := s.logMark()
		require.NoError(t, os.Remove(path))
		require.NoError(t, s.waitConfLoaded(mark, file, "multus-cni-network", func(info string) bool { return !has(info) && strings.Contains(info, "multus-cni-network") }))
	})
	require.NoError(t, s.waitConfLoaded(mark, file, name, has))
}

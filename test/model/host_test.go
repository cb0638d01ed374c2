package model

// The host side of the driver: the plugin binary, its configuration, CNI
// and command line invocations, network namespaces, client processes and
// the fixture sysfs/debugfs trees.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

const (
	network  = "model-net"
	ifName   = "eth0"
	peerName = "peer0"
	// opTimeout bounds one plugin run; the plugin's own lock timeout is 30s.
	opTimeout = 60 * time.Second
	// clusterNames: one Ceph cluster per namespace, named "ceph".
	clusterName = "ceph"
)

var clusterNamespaces = []string{"ceph-a", "ceph-b", "ceph-c", linklessNamespace}

// linklessNamespace is a cluster whose holders are pinned with "links": []
// (docs/design.md §3): a CSI node plugin as its own holder, whose clients
// are made inside its pod's netns, which no path leads to.
const linklessNamespace = "ceph-np"

func clusterOf(i int) string { return clusterNamespaces[i] + "/" + clusterName }

// linkless tells the clusters whose holders have no link.
func linkless(i int) bool { return clusterNamespaces[i] == linklessNamespace }

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

// buildPlugin builds the plugin and netns-pinctl with the failpoints tag
// into dir and returns the plugin's path; netns-pinctl is beside it.
func buildPlugin(t *testing.T, dir string) string {
	t.Helper()
	// The go tool that runs this test (make puts it first in PATH).
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the model test builds the binaries with the go tool")
	for name, pkg := range map[string]string{"netns-pin": "./plugin", "netns-pinctl": "./cmd/netns-pinctl"} {
		cmd := exec.Command(goBin, "build", "-tags", "failpoints", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = repoRoot(t)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build -tags failpoints %s: %s", pkg, out)
	}
	return filepath.Join(dir, "netns-pin")
}

var failpointHit = regexp.MustCompile(`failpoint\.Hit\("([^"]+)"\)`)

// failpoints lists every failpoint of the store, read from its sources so
// that a new one joins the crash steps without touching this test.
func failpoints(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "netnsstore", "*.go"))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range failpointHit.FindAllSubmatch(data, -1) {
			seen[string(m[1])] = true
		}
	}
	out := make([]string, 0, len(seen))
	for fp := range seen {
		out = append(out, fp)
	}
	sort.Strings(out)
	require.NotEmpty(t, out, "no failpoint.Hit in netnsstore")
	return out
}

// env is what one test run owns on the host.
type env struct {
	t           *testing.T
	bin, binDir string
	work        string
	pinDir      string
	wrongPinDir string
	// wrongStateDir exists and is empty: an operator's --state-dir typo.
	wrongStateDir string
	stateDir      string
	sysfs         string
	debugfs       string
	// blindRoots, while set, is what the operator's commands get as
	// --sysfs and --debugfs instead: a folder where no client is seen.
	blindRoots string
	rookDir    string // Rook-style absolute links: <rookDir>/<namespace>.net.ns
	bootIDFile string
	logFile    string
	// cacheDir is the runtime's libcni cache, where each DEL finds the
	// attachment's entry (writeCacheEntry); chainLog is where the chain's
	// plugin before netns-pin (chainedPlugin) logs every DEL it gets.
	cacheDir, chainLog string
	runID              string
	entry              map[string]any
}

func newEnv(t *testing.T, bin string) *env {
	t.Helper()
	work := hosttest.NewWorkDir(t, "netns-pin-model-")
	e := &env{
		t: t, bin: bin, binDir: filepath.Dir(bin), work: work,
		pinDir:        filepath.Join(work, "pin"),
		wrongPinDir:   filepath.Join(work, "other-pin"),
		wrongStateDir: filepath.Join(work, "other-state"),
		stateDir:      filepath.Join(work, "state"),
		sysfs:         filepath.Join(work, "sys"),
		debugfs:       filepath.Join(work, "debug"),
		rookDir:       filepath.Join(work, "csi"),
		bootIDFile:    filepath.Join(work, "boot_id"),
		logFile:       filepath.Join(work, "netns-pin.log"),
		cacheDir:      filepath.Join(work, "cni-cache"),
		chainLog:      filepath.Join(work, "chain.log"),
		runID:         host.RandHex(6),
	}
	require.NoError(t, os.MkdirAll(filepath.Join(e.sysfs, "bus", "rbd", "devices"), 0o755))
	require.NoError(t, os.Mkdir(e.wrongStateDir, 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(e.debugfs, "ceph"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(e.cacheDir, "results"), 0o700))
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s %%s\\n' \"$CNI_COMMAND\" \"$CNI_CONTAINERID\" >> %s\n", e.chainLog)
	require.NoError(t, os.WriteFile(filepath.Join(e.binDir, chainedPlugin), []byte(script), 0o755))
	e.writeBootID(0)
	var holders []map[string]any
	for _, ns := range clusterNamespaces {
		holders = append(holders, map[string]any{"podNamespace": ns, "podName": "holder-*", "cluster": "{{.PodNamespace}}/" + clusterName})
	}
	e.entry = map[string]any{
		"type":              "netns-pin",
		"pinDir":            e.pinDir,
		"stateDir":          e.stateDir,
		"links":             []string{"{{.Namespace}}/{{.Name}}.net", e.rookDir + "/{{.Namespace}}.net.ns"},
		"holders":           holders,
		"cniArgsNamespaces": clusterNamespaces,
		"inUse":             map[string]any{"sysfs": e.sysfs, "debugfs": e.debugfs},
		"logFile":           e.logFile,
		"logLevel":          "debug",
		"cacheDirs":         []string{e.cacheDir},
	}
	return e
}

// chainedPlugin is the plugin before netns-pin in the chain a runtime
// ran: its DEL (by netns-pinctl, for an abandoned teardown) is logged in
// chainLog.
const chainedPlugin = "model-chained"

// writeCacheEntry writes the libcni cache entry of attachment (cid,
// ifName), as a runtime's ADD through libcni leaves it: the chain
// (chainedPlugin, then netns-pin with the model's entry), the arguments
// and the result. The plugin's refused DEL captures it.
func (e *env) writeCacheEntry(cid, podNS, podName, podUID, netnsPath string, ips []string) {
	e.t.Helper()
	own := map[string]any{}
	for k, v := range e.entry {
		own[k] = v
	}
	list, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network,
		"plugins": []map[string]any{{"type": chainedPlugin}, own}})
	require.NoError(e.t, err)
	entry, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": cid, "config": list, "ifName": ifName, "networkName": network, "netns": netnsPath,
		"cniArgs": [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", podNS}, {"K8S_POD_NAME", podName}, {"K8S_POD_UID", podUID}},
		"result":  prevResult(netnsPath, ips),
	})
	require.NoError(e.t, err)
	require.NoError(e.t, os.WriteFile(filepath.Join(e.cacheDir, "results", network+"-"+cid+"-"+ifName), entry, 0o600))
}

// chainDels counts the DELs of cid that the chain's plugin before
// netns-pin got.
func (e *env) chainDels(cid string) int {
	e.t.Helper()
	data, err := os.ReadFile(e.chainLog)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	require.NoError(e.t, err)
	return strings.Count(string(data), "DEL "+cid+"\n")
}

func (e *env) writeBootID(n int) {
	e.t.Helper()
	id := fmt.Sprintf("6d0e4c1a-%04x-4b7e-9c3d-%012x", n, n)
	require.NoError(e.t, os.WriteFile(e.bootIDFile, []byte(id+"\n"), 0o644))
}

// links are the well-known paths of cluster i (none for a linkless one).
func (e *env) links(i int) []string {
	if linkless(i) {
		return nil
	}
	return []string{
		filepath.Join(e.pinDir, clusterNamespaces[i], clusterName+".net"),
		filepath.Join(e.rookDir, clusterNamespaces[i]+".net.ns"),
	}
}

func (e *env) pinPath(attachment string) string {
	return filepath.Join(e.pinDir, "pins", attachment)
}

func (e *env) recordPath(attachment string) string {
	return filepath.Join(e.stateDir, "records", attachment+".json")
}

// result is what one plugin process did.
type result struct {
	killed bool // SIGKILLed itself at the armed failpoint
	rc     int
	code   uint // CNI error code, when rc != 0 and stdout is a CNI error
	msg    string
	stdout string
	stderr string
}

func (r result) String() string {
	switch {
	case r.killed:
		return "killed at failpoint"
	case r.rc == 0:
		return "ok"
	case r.code != 0:
		return fmt.Sprintf("code %d: %s", r.code, r.msg)
	}
	return fmt.Sprintf("exit %d: %s", r.rc, strings.TrimSpace(r.stderr+" "+r.stdout))
}

func (e *env) run(bin string, env []string, stdin []byte, failpoint string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "NETNS_PIN_BOOT_ID_FILE=" + e.bootIDFile}, env...)
	if failpoint != "" {
		cmd.Env = append(cmd.Env, "NETNS_PIN_FAILPOINT="+failpoint)
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(e.t, ctx.Err(), "%s %v timed out: %s", filepath.Base(bin), args, errb.String())
	r := result{stdout: out.String(), stderr: errb.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		ws := exitErr.Sys().(syscall.WaitStatus)
		if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
			break
		}
		r.rc = ws.ExitStatus()
		var cniErr struct {
			Code uint   `json:"code"`
			Msg  string `json:"msg"`
		}
		if json.Unmarshal(out.Bytes(), &cniErr) == nil {
			r.code, r.msg = cniErr.Code, cniErr.Msg
		}
	default:
		require.NoError(e.t, err, "run %s %v", filepath.Base(bin), args)
	}
	return r
}

// cniCall is one CNI invocation of the plugin.
type cniCall struct {
	verb        string
	containerID string
	netnsPath   string
	podNS       string
	podName     string
	podUID      string
	claim       string           // args.cni.pinCluster
	prevIPs     []string         // prevResult's addresses (ADD, CHECK)
	valid       []map[string]any // GC's cni.dev/valid-attachments
	entry       map[string]any   // plugin entry fields that differ from the network's
}

func (e *env) cni(c cniCall, failpoint string) result {
	e.t.Helper()
	conf := map[string]any{"cniVersion": "1.1.0", "name": network}
	for k, v := range e.entry {
		conf[k] = v
	}
	for k, v := range c.entry {
		conf[k] = v
	}
	if c.claim != "" {
		conf["args"] = map[string]any{"cni": map[string]any{"pinCluster": c.claim}}
	}
	if c.verb == "ADD" || c.verb == "CHECK" {
		conf["prevResult"] = prevResult(c.netnsPath, c.prevIPs)
	}
	if c.verb == "GC" {
		conf["cni.dev/valid-attachments"] = c.valid
	}
	stdin, err := json.Marshal(conf)
	require.NoError(e.t, err)
	vars := []string{"CNI_COMMAND=" + c.verb, "CNI_PATH=" + e.binDir}
	if c.containerID != "" {
		args := fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", c.podNS, c.podName, c.podUID)
		vars = append(vars, "CNI_CONTAINERID="+c.containerID, "CNI_IFNAME="+ifName, "CNI_NETNS="+c.netnsPath, "CNI_ARGS="+args)
	}
	return e.run(e.bin, vars, stdin, failpoint)
}

func prevResult(netnsPath string, ips []string) map[string]any {
	var ipcs []map[string]any
	for _, ip := range ips {
		ipcs = append(ipcs, map[string]any{"interface": 0, "address": hostPrefix(ip)})
	}
	return map[string]any{
		"cniVersion": "1.1.0",
		"interfaces": []map[string]any{{"name": ifName, "mac": "02:00:00:00:00:07", "sandbox": netnsPath}},
		"ips":        ipcs,
	}
}

// cli runs the operator's command line against the store at pinDir.
func (e *env) cli(pinDir, failpoint string, args ...string) result {
	e.t.Helper()
	return e.cliAt(pinDir, e.stateDir, failpoint, args...)
}

// cliAt is cli with another stateDir.
func (e *env) cliAt(pinDir, stateDir, failpoint string, args ...string) result {
	e.t.Helper()
	sysfs, debugfs := e.sysfs, e.debugfs
	if e.blindRoots != "" {
		sysfs, debugfs = e.blindRoots, e.blindRoots
	}
	argv := append([]string{"--pin-dir", pinDir, "--state-dir", stateDir, "--sysfs", sysfs, "--debugfs", debugfs}, args...)
	return e.run(filepath.Join(e.binDir, "netns-pinctl"), nil, nil, failpoint, argv...)
}

// makeNetns makes a named netns like a runtime does for a pod, with a veth
// pair inside it (eth0, the pod's interface, and its peer, both up) and
// the given addresses on eth0.
func (e *env) makeNetns(name string, ips []string) host.NSID {
	e.t.Helper()
	hosttest.MustRun(e.t, "ip", "netns", "add", name)
	path := filepath.Join("/run/netns", name)
	require.NoError(e.t, withNetlink(path, func(h *netlink.Handle) error {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifName}, PeerName: peerName}); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		for _, n := range []string{ifName, peerName, "lo"} {
			l, err := h.LinkByName(n)
			if err != nil {
				return err
			}
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
		}
		for _, ip := range ips {
			if err := addrChange(h, ip, true); err != nil {
				return err
			}
		}
		return nil
	}))
	return hosttest.StatNS(e.t, path)
}

// withNetlink runs f with a netlink handle in the netns at path.
func withNetlink(path string, f func(*netlink.Handle) error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return f(h)
}

func addrChange(h *netlink.Handle, ip string, add bool) error {
	l, err := h.LinkByName(ifName)
	if err != nil {
		return err
	}
	// A host prefix: each address its own subnet, so that deleting one
	// never takes the secondaries of its subnet with it.
	a, err := netlink.ParseAddr(hostPrefix(ip))
	if err != nil {
		return err
	}
	a.Flags = unix.IFA_F_NODAD // usable at once, never tentative
	if add {
		return h.AddrAdd(l, a)
	}
	return h.AddrDel(l, a)
}

// netnsState is what a netns has of what the model gave it.
type netnsState struct {
	hasIf bool
	ips   []string
}

// inspectNetns reads eth0 and its IPv4 addresses in the netns at path,
// whose identity must be id.
func inspectNetns(path string, id host.NSID) (netnsState, error) {
	got, err := host.NSIDOf(path)
	if err != nil {
		return netnsState{}, err
	}
	if got != id {
		return netnsState{}, fmt.Errorf("%s is %v, not %v", path, got, id)
	}
	var st netnsState
	err = withNetlink(path, func(h *netlink.Handle) error {
		l, err := h.LinkByName(ifName)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return nil
			}
			return err
		}
		st.hasIf = true
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if !a.IP.IsLinkLocalUnicast() {
				st.ips = append(st.ips, a.IP.String())
			}
		}
		return nil
	})
	return st, err
}

// tearDownNetns is what the chain's earlier plugins and the runtime do
// after a successful DEL: remove the pod's interface, then the netns name.
func (e *env) tearDownNetns(name string) {
	e.t.Helper()
	path := filepath.Join("/run/netns", name)
	if _, err := os.Lstat(path); err != nil {
		return
	}
	err := withNetlink(path, func(h *netlink.Handle) error {
		l, err := h.LinkByName(ifName)
		if err != nil {
			return nil // already gone
		}
		return h.LinkDel(l)
	})
	require.NoError(e.t, err, "delete %s in %s", ifName, name)
	hosttest.MustRun(e.t, "ip", "netns", "del", name)
}

// proc is a client process started through a link, the way ceph-csi runs
// `nsenter --net=<link> -- ceph-fuse ...`.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProc starts `nsenter --net=<link> -- sleep` and waits until sleep
// runs (inside the link's netns) or nsenter gave up (the link led to no
// netns). It returns nil in the latter case.
func startProc(t *testing.T, link string) *proc {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+link, "--", "sleep", "1000000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	comm := fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)
	var running bool
	ok := host.Poll(10*time.Second, time.Millisecond, func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		data, err := os.ReadFile(comm)
		running = err == nil && strings.TrimSpace(string(data)) == "sleep"
		return running
	})
	require.True(t, ok, "nsenter --net=%s neither ran sleep nor exited", link)
	if !running {
		return nil
	}
	return p
}

func (p *proc) netnsPath() string { return fmt.Sprintf("/proc/%d/ns/net", p.cmd.Process.Pid) }

func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// rbdMap writes <sysfs>/bus/rbd/devices/<id> for an image mapped by a
// client the monitors saw at ip (Documentation/ABI/testing/sysfs-bus-rbd).
func (e *env) rbdMap(id int, ip string) string {
	e.t.Helper()
	dir := filepath.Join(e.sysfs, "bus", "rbd", "devices", fmt.Sprint(id))
	require.NoError(e.t, os.MkdirAll(dir, 0o755))
	for name, value := range map[string]string{
		"client_addr":  clientAddr(ip),
		"client_id":    fmt.Sprintf("client%d", 4000+id),
		"cluster_fsid": "b5e3c1a2-7d4f-4e8a-9c61-0f2d3e4a5b6c",
		"pool":         "replicapool",
		"pool_ns":      "",
		"name":         fmt.Sprintf("csi-vol-%d", id),
		"current_snap": "-",
	} {
		require.NoError(e.t, os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o444))
	}
	return dir
}

// cephfsMount writes <debugfs>/ceph/<fsid>.client<gid>/ with the status
// file of a CephFS kernel client (fs/ceph/debugfs.c, Linux 5.11+).
func (e *env) cephfsMount(gid int, ip string) string {
	e.t.Helper()
	dir := filepath.Join(e.debugfs, "ceph", fmt.Sprintf("c0ffee00-1111-4222-8333-444455556666.client%d", gid))
	require.NoError(e.t, os.MkdirAll(dir, 0o755))
	for name, value := range map[string]string{
		"status":         fmt.Sprintf("instance: client.%d (3)%s\nblocklisted: false\n", gid, clientAddr(ip)),
		"monc":           "have monmap 2 want 3+\n",
		"osdc":           "REQUESTS 0 homeless 0\n",
		"client_options": "name=csi-cephfs-node\n",
	} {
		require.NoError(e.t, os.WriteFile(filepath.Join(dir, name), []byte(value), 0o444))
	}
	return dir
}

// holdNetns stands for the reference a Ceph kernel client keeps on the
// netns it was made in (libceph's get_net in ceph_messenger_init): a bind
// mount of the netns outside pinDir, which no process, record or runtime
// path leads the plugin to. The netns and its interface live while it
// does, as they would with a real krbd device or CephFS mount.
func (e *env) holdNetns(id int, link string) string {
	e.t.Helper()
	p := filepath.Join(e.work, "kernel-refs", fmt.Sprintf("c%d", id))
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(e.t, os.WriteFile(p, nil, 0o444))
	require.NoError(e.t, unix.Mount(link, p, "", unix.MS_BIND, ""), "bind %s to %s", link, p)
	return p
}

// unmountAll lazily unmounts every mount stacked at path.
func unmountAll(t *testing.T, path string) {
	t.Helper()
	for range 16 {
		if !slices.ContainsFunc(hosttest.ReadMountinfo(t), func(m hosttest.MountEntry) bool { return m.Mountpoint == path }) {
			return
		}
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return
		}
		require.NoError(t, err, "umount -l %s", path)
	}
}

// ipOf numbers the model's addresses, never reused: 10.64.0.1, 10.64.0.2,
// ...; every third one IPv6, fd00:6e70::3, fd00:6e70::6, ...
func ipOf(n int) string {
	n++
	if n%3 == 0 {
		return netip.AddrFrom16([16]byte{0xfd, 0, 0x6e, 0x70, 12: byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String()
	}
	return netip.AddrFrom4([4]byte{10, byte(64 + n>>16), byte(n >> 8), byte(n)}).String()
}

func hostPrefix(ip string) string {
	if strings.Contains(ip, ":") {
		return ip + "/128"
	}
	return ip + "/32"
}

// clientAddr is a Ceph entity address as the kernel prints it ("%pISpc"
// and the nonce): 10.64.0.1:0/3527561932 or [fd00:6e70::3]:0/3527561932.
func clientAddr(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:0/3527561932"
	}
	return ip + ":0/3527561932"
}

type netlinkHandle = netlink.Handle

package e2e

// CNI harness: conflists with the real reference plugins and netns-pin, run
// through the real cnitool binary or through libcni, and the checks of what
// the plugin leaves on the host (docs/design.md §3–§14).

import (
	"cmp"
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

const (
	clusterNS   = "rook-ceph"
	clusterName = "my-cluster"
	cluster     = clusterNS + "/" + clusterName
	ifName      = "eth0"
	opTimeout   = 60 * time.Second
)

// holderRule is the `holders` rule of the default configuration.
var holderRule = map[string]any{"podNamespace": clusterNS, "podName": "csi-holder-*", "cluster": cluster}

// podArgs are CNI_ARGS as containerd passes them for a pod.
func podArgs(namespace, name string) [][2]string {
	return [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", namespace},
		{"K8S_POD_NAME", name},
		{"K8S_POD_INFRA_CONTAINER_ID", host.RandHex(64)},
		{"K8S_POD_UID", fmt.Sprintf("%s-%s-%s-%s-%s", host.RandHex(8), host.RandHex(4), host.RandHex(4), host.RandHex(4), host.RandHex(12))},
	}
}

func holderArgs() [][2]string { return podArgs(clusterNS, "csi-holder-"+host.RandHex(5)) }

func cniArgsString(args [][2]string) string {
	parts := make([]string, len(args))
	for i, kv := range args {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(parts, ";")
}

// chainSpec describes a conflist: a main plugin with host-local IPAM, then
// (when pin) netns-pin.
type chainSpec struct {
	version string // default 1.0.0
	kind    string // "bridge" (default) or "macvlan"
	bridge  string // bridge for kind bridge (made when empty)
	master  string // master link for kind macvlan (a veth end when empty)
	noPin   bool   // leave netns-pin out of the chain
	// netns-pin entry; nil holders means the default holderRule.
	holders           []map[string]any
	cniArgsNamespaces []string
	pinCluster        string // args.cni.pinCluster in the plugin entry
	links             []string
	inUse             map[string]any // the entry's inUse (fixture sysfs/debugfs roots)
	cniPath           string         // CNI_PATH instead of NETNS_PIN_CNI_PATH
	pinDir, stateDir  string         // instead of folders of the chain's own
}

// chain is a conflist on disk plus everything needed to run it.
type chain struct {
	env        env
	spec       chainSpec
	name       string
	work       string
	pinDir     string
	stateDir   string
	cacheDir   string // libcni cache (cnitool always uses /var/lib/cni)
	netconfDir string
	logFile    string
	confBytes  []byte
	pinEntry   map[string]any
	list       *libcni.NetworkConfigList
	exec       *recExec
	cni        *libcni.CNIConfig
	subnet     string
}

func newChain(t *testing.T, spec chainSpec) *chain {
	t.Helper()
	e := requireEnv(t)
	if spec.version == "" {
		spec.version = "1.0.0"
	}
	if spec.kind == "" {
		spec.kind = "bridge"
	}
	if spec.cniPath != "" {
		e.cniPath = spec.cniPath
	}
	c := &chain{env: e, spec: spec, name: "npe2e-" + host.RandHex(8), work: hosttest.NewWorkDir(t, "netns-pin-e2e-"), subnet: nextSubnet()}
	c.pinDir = cmp.Or(spec.pinDir, filepath.Join(c.work, "pin"))
	c.stateDir = cmp.Or(spec.stateDir, filepath.Join(c.work, "state"))
	c.cacheDir = filepath.Join(c.work, "cni-cache")
	c.netconfDir = filepath.Join(c.work, "net.d")
	c.logFile = filepath.Join(c.work, "netns-pin.log")
	require.NoError(t, os.MkdirAll(c.netconfDir, 0o755))

	ipam := map[string]any{
		"type":    "host-local",
		"dataDir": filepath.Join(c.work, "host-local"),
		"ranges":  [][]map[string]any{{{"subnet": c.subnet}}},
	}
	var main map[string]any
	switch spec.kind {
	case "bridge":
		if spec.bridge == "" {
			spec.bridge = newBridge(t)
		}
		main = map[string]any{"type": "bridge", "bridge": spec.bridge, "ipam": ipam}
	case "macvlan":
		if spec.master == "" {
			spec.master = newVethMaster(t)
		}
		main = map[string]any{"type": "macvlan", "master": spec.master, "mode": "bridge", "ipam": ipam}
	default:
		t.Fatalf("unknown chain kind %q", spec.kind)
	}
	c.spec = spec
	plugins := []any{main}
	if !spec.noPin {
		c.pinEntry = map[string]any{
			"type":     "netns-pin",
			"pinDir":   c.pinDir,
			"stateDir": c.stateDir,
			"logFile":  c.logFile,
			"logLevel": "debug",
		}
		holders := spec.holders
		if holders == nil {
			holders = []map[string]any{holderRule}
		}
		c.pinEntry["holders"] = holders
		if spec.cniArgsNamespaces != nil {
			c.pinEntry["cniArgsNamespaces"] = spec.cniArgsNamespaces
		}
		if spec.pinCluster != "" {
			c.pinEntry["args"] = map[string]any{"cni": map[string]any{"pinCluster": spec.pinCluster}}
		}
		if spec.links != nil {
			c.pinEntry["links"] = spec.links
		}
		if spec.inUse != nil {
			c.pinEntry["inUse"] = spec.inUse
		}
		plugins = append(plugins, c.pinEntry)
	}
	conf := map[string]any{"cniVersion": spec.version, "name": c.name, "plugins": plugins}
	var err error
	c.confBytes, err = json.MarshalIndent(conf, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(c.netconfDir, c.name+".conflist"), c.confBytes, 0o644))
	c.list, err = libcni.ConfListFromBytes(c.confBytes)
	require.NoError(t, err)
	c.exec = &recExec{}
	c.cni = libcni.NewCNIConfigWithCacheDir([]string{e.cniPath}, c.cacheDir, c.exec)

	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("conflist %s:\n%s", c.name, c.confBytes)
		if data, err := os.ReadFile(c.logFile); err == nil {
			t.Logf("netns-pin log (%s):\n%s", c.logFile, data)
		}
		for _, call := range c.exec.all() {
			if call.err != nil || len(call.stderr) > 0 {
				t.Logf("%s %s: err=%v stderr=%s", call.plugin, call.command, call.err, call.stderr)
			}
		}
	})
	return c
}

func (c *chain) linkPath(clusterNamespace, name string) string {
	return filepath.Join(c.pinDir, clusterNamespace, name+".net")
}

func (c *chain) defaultLink() string { return c.linkPath(clusterNS, clusterName) }

// pluginCall is one plugin execution seen by recExec.
type pluginCall struct {
	plugin, command string
	stdin, stdout   []byte
	stderr          string
	err             error
}

// recExec runs plugins like libcni's default and records every call, so a
// test can see what each plugin of a chain received and printed.
type recExec struct {
	version.PluginDecoder
	mu    sync.Mutex
	calls []pluginCall
}

func (r *recExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	out, _, err := r.run(ctx, pluginPath, stdin, environ)
	return out, err
}

// run is ExecPlugin, returning what the plugin wrote to stderr too.
func (r *recExec) run(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, string, error) {
	var stderr strings.Builder
	raw := &invoke.RawExec{Stderr: &stderr}
	out, err := raw.ExecPlugin(ctx, pluginPath, stdin, environ)
	call := pluginCall{plugin: filepath.Base(pluginPath), stdin: stdin, stdout: out, stderr: stderr.String(), err: err}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			call.command = v
		}
	}
	r.mu.Lock()
	r.calls = append(r.calls, call)
	r.mu.Unlock()
	return out, call.stderr, err
}

func (r *recExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (r *recExec) all() []pluginCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// last returns the last call of plugin with command.
func (r *recExec) last(t *testing.T, plugin, command string) pluginCall {
	t.Helper()
	calls := r.all()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].plugin == plugin && calls[i].command == command {
			return calls[i]
		}
	}
	t.Fatalf("no %s %s call recorded", plugin, command)
	return pluginCall{}
}

// attachment is one (container, interface) on a chain, in a netns.
type attachment struct {
	c           *chain
	netns       *hosttest.NetnsHandle
	containerID string
	args        [][2]string
	cnitool     bool // run through the cnitool binary, else libcni
	noCleanDel  bool // no DEL at cleanup (the chain never ran for it)
}

// newAttachment prepares an attachment; its cleanup runs a best-effort DEL.
func (c *chain) newAttachment(t *testing.T, ns *hosttest.NetnsHandle, args [][2]string, viaCnitool bool) *attachment {
	t.Helper()
	a := &attachment{c: c, netns: ns, args: args, cnitool: viaCnitool}
	if viaCnitool {
		// cnitool derives the container ID from the netns path.
		sum := sha512.Sum512([]byte(ns.Path))
		a.containerID = fmt.Sprintf("cnitool-%x", sum[:10])
		t.Cleanup(func() {
			if err := os.Remove(filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", c.name, a.containerID, ifName))); err != nil && !os.IsNotExist(err) {
				t.Errorf("cleanup: %v", err)
			}
		})
	} else {
		a.containerID = "e2e-" + host.RandHex(16)
	}
	t.Cleanup(func() {
		if a.noCleanDel {
			return
		}
		if err := a.del(); err != nil {
			t.Logf("cleanup: DEL %s: %v", a.containerID, err)
		}
	})
	return a
}

func (a *attachment) attachmentName() string { return a.containerID + "." + ifName }

func (a *attachment) pinPath() string {
	return filepath.Join(a.c.pinDir, "pins", a.attachmentName())
}

func (a *attachment) recordPath() string {
	return filepath.Join(a.c.stateDir, "records", a.attachmentName()+".json")
}

func (a *attachment) rt() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: a.containerID, NetNS: a.netns.Path, IfName: ifName, Args: a.args}
}

func (a *attachment) cnitoolRun(verb string) host.CmdResult {
	e := a.c.env
	extra := []string{
		"CNI_PATH=" + e.cniPath,
		"NETCONFPATH=" + a.c.netconfDir,
		"CNI_IFNAME=" + ifName,
		"CNI_ARGS=" + cniArgsString(a.args),
	}
	return host.RunCmd(host.CmdTimeout, extra, nil, e.cnitool, verb, a.c.name, a.netns.Path)
}

// add runs ADD for the whole chain and returns its result as 1.0.0.
func (a *attachment) add(t *testing.T) (*types100.Result, error) {
	t.Helper()
	res, err := a.addRaw()
	if err != nil {
		return nil, err
	}
	r100, err := types100.NewResultFromResult(res)
	require.NoError(t, err)
	return r100, nil
}

// addRaw runs ADD for the whole chain; it is safe in any goroutine.
func (a *attachment) addRaw() (types.Result, error) {
	if a.cnitool {
		r := a.cnitoolRun("add")
		if r.Err != nil {
			return nil, fmt.Errorf("cnitool add: %w; stderr: %s", r.Err, strings.TrimSpace(r.Stderr))
		}
		res, err := create.CreateFromBytes([]byte(r.Stdout))
		if err != nil {
			return nil, fmt.Errorf("cnitool add printed no CNI result: %w\n%s", err, r)
		}
		return res, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return a.c.cni.AddNetworkList(ctx, a.c.list, a.rt())
}

// mustAdd runs ADD and fails the test when it fails.
func (a *attachment) mustAdd(t *testing.T) *types100.Result {
	t.Helper()
	res, err := a.add(t)
	require.NoError(t, err, "ADD %s (CNI_ARGS %s)", a.containerID, cniArgsString(a.args))
	return res
}

func (a *attachment) check() error {
	if a.cnitool {
		if r := a.cnitoolRun("check"); r.Err != nil {
			return fmt.Errorf("cnitool check: %w; stderr: %s", r.Err, strings.TrimSpace(r.Stderr))
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return a.c.cni.CheckNetworkList(ctx, a.c.list, a.rt())
}

func (a *attachment) del() error {
	if a.cnitool {
		if r := a.cnitoolRun("del"); r.Err != nil {
			return fmt.Errorf("cnitool del: %w; stderr: %s", r.Err, strings.TrimSpace(r.Stderr))
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return a.c.cni.DelNetworkList(ctx, a.c.list, a.rt())
}

// execPin runs only the netns-pin binary with verb, this attachment's
// environment and the given prevResult, the way libcni runs a chained plugin.
func (a *attachment) execPin(t *testing.T, verb string, prevResult types.Result) ([]byte, error) {
	t.Helper()
	out, _, err := a.execPinEnv(t, verb, prevResult)
	return out, err
}

// execPinEnv is execPin with env added to (and replacing in) the
// plugin's environment; it returns what the plugin wrote to stderr too.
func (a *attachment) execPinEnv(t *testing.T, verb string, prevResult types.Result, env ...string) (stdout []byte, stderr string, err error) {
	t.Helper()
	require.NotNil(t, a.c.pinEntry, "chain has no netns-pin entry")
	conf := map[string]any{}
	for k, v := range a.c.pinEntry {
		conf[k] = v
	}
	conf["name"] = a.c.name
	conf["cniVersion"] = a.c.spec.version
	if prevResult != nil {
		conf["prevResult"] = prevResult
	}
	stdin, err := json.Marshal(conf)
	require.NoError(t, err)
	args := &invoke.Args{
		Command: verb, ContainerID: a.containerID, NetNS: a.netns.Path,
		PluginArgs: a.args, IfName: ifName, Path: a.c.env.cniPath,
	}
	environ := slices.DeleteFunc(args.AsEnv(), func(kv string) bool {
		return slices.ContainsFunc(env, func(e string) bool { k, _, _ := strings.Cut(e, "="); return strings.HasPrefix(kv, k+"=") })
	})
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	return a.c.exec.run(ctx, filepath.Join(a.c.env.cniPath, "netns-pin"), stdin, append(environ, env...))
}

// sandboxIP returns the first address of the result's sandbox interface.
func sandboxIP(t *testing.T, res *types100.Result) net.IP {
	t.Helper()
	for _, ipc := range res.IPs {
		if ipc.Interface != nil && *ipc.Interface < len(res.Interfaces) && res.Interfaces[*ipc.Interface].Sandbox != "" {
			return ipc.Address.IP
		}
	}
	t.Fatalf("result has no IP on a sandbox interface: %s", mustJSON(res))
	return nil
}

// hostVeth returns the host end of the bridge plugin's veth pair.
func hostVeth(t *testing.T, res *types100.Result, bridge string) string {
	t.Helper()
	for _, ifc := range res.Interfaces {
		if ifc.Sandbox == "" && ifc.Name != bridge {
			return ifc.Name
		}
	}
	t.Fatalf("result has no host veth: %s", mustJSON(res))
	return ""
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// record is the part of a netns-pin record the suite checks.
type record map[string]any

func readRecord(t *testing.T, path string) record {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err, "record %s", path)
	var r record
	require.NoError(t, json.Unmarshal(data, &r), "record %s is not JSON: %s", path, data)
	return r
}

// str returns a record field as text (numbers without exponent).
func (r record) str(key string) string {
	switch v := r[key].(type) {
	case nil:
		return ""
	case string:
		return v
	case float64:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprint(v)
	}
}

// hasIP reports whether the record's "ips" lists ip (with or without prefix).
func (r record) hasIP(ip net.IP) bool {
	list, _ := r["ips"].([]any)
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			continue
		}
		s, _, _ = strings.Cut(s, "/")
		if got := net.ParseIP(s); got != nil && got.Equal(ip) {
			return true
		}
	}
	return false
}

// pinExpect is what a pinned attachment looks like on the host.
type pinExpect struct {
	netns   host.NSID
	cluster string // "namespace/name"
	link    string // the well-known path expected to lead to this pin ("" = not checked)
	ip      net.IP // an address the record must list (nil = not checked)
}

// assertPinned checks pin file, mount, link and record of an attachment.
func assertPinned(t *testing.T, a *attachment, want pinExpect) {
	t.Helper()
	pin := a.pinPath()
	// the pin: an nsfs file of exactly this netns, mounted once
	_, err := os.Lstat(pin)
	require.NoError(t, err, "no pin at %s (pinDir tree: %v)", pin, treeEntries(t, a.c.pinDir))
	got := hosttest.StatNS(t, pin)
	require.Equal(t, want.netns, got, "pin %s is not the attachment's netns", pin)
	ms := mountsAt(t, pin)
	require.Len(t, ms, 1, "want exactly one mount at %s, mountinfo has %+v", pin, ms)
	assert.Equal(t, "nsfs", ms[0].FSType, "mount at %s", pin)
	assert.Equal(t, fmt.Sprintf("net:[%d]", want.netns.Ino), ms[0].Root, "mount at %s", pin)

	// pinDir is a shared mount, so that pins reach other mount namespaces
	assertSharedMount(t, a.c.pinDir)

	// the well-known link: a relative symlink to ../pins/<attachment>
	if want.link != "" {
		assertLinkTo(t, want.link, a)
	}

	// the record
	rec := readRecord(t, a.recordPath())
	assert.Equal(t, want.cluster, rec.str("cluster"), "record cluster (%s)", a.recordPath())
	assert.Equal(t, "active", rec.str("state"), "record state (%s)", a.recordPath())
	assert.Equal(t, fmt.Sprint(want.netns.Ino), rec.str("netnsIno"), "record netnsIno (%s)", a.recordPath())
	if want.ip != nil {
		assert.True(t, rec.hasIP(want.ip), "record ips %v lack %s (%s)", rec["ips"], want.ip, a.recordPath())
	}
}

// assertSharedMount checks that the mount dir is on (its own bind mount,
// or the mount that contains it when that is shared already, as after a
// kubelet made / rshared) is a shared mount.
func assertSharedMount(t *testing.T, dir string) {
	t.Helper()
	var top *hosttest.MountEntry
	for _, m := range hosttest.ReadMountinfo(t) {
		if under(dir, m.Mountpoint) && (top == nil || len(m.Mountpoint) >= len(top.Mountpoint)) {
			top = &m
		}
	}
	require.NotNil(t, top, "no mount contains pinDir %s", dir)
	shared := slices.ContainsFunc(top.Optional, func(o string) bool { return strings.HasPrefix(o, "shared:") })
	assert.True(t, shared, "pinDir %s is on %s, not a shared mount (optional fields %v)", dir, top.Mountpoint, top.Optional)
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// assertLinkTo checks that link is a relative symlink to a's pin and leads
// to a's netns.
func assertLinkTo(t *testing.T, link string, a *attachment) {
	t.Helper()
	st, err := os.Lstat(link)
	require.NoError(t, err, "no link at %s (pinDir tree: %v)", link, treeEntries(t, a.c.pinDir))
	require.True(t, st.Mode()&os.ModeSymlink != 0, "%s is not a symlink (mode %s)", link, st.Mode())
	target, err := os.Readlink(link)
	require.NoError(t, err)
	resolved := target
	if !filepath.IsAbs(target) {
		resolved = filepath.Join(filepath.Dir(link), target)
	}
	assert.Equal(t, a.pinPath(), filepath.Clean(resolved), "link %s -> %s does not lead to the pin", link, target)
	if strings.HasPrefix(link, a.c.pinDir+"/") {
		// under pinDir the link must not leave it: <pinDir>/<ns>/<name>.net -> ../pins/<attachment>
		want, err := filepath.Rel(filepath.Dir(link), a.pinPath())
		require.NoError(t, err)
		assert.Equal(t, want, target, "link %s target", link)
	}
	require.Equal(t, a.netns.ID, hosttest.StatNS(t, link), "link %s does not lead to the attachment's netns", link)
}

// assertReleased checks that nothing of a's pin remains: no pin file, no
// mount at the pin path, no record, and no nsfs mount of the netns anywhere
// except keep (the netns's own /run/netns name when it still exists).
func assertReleased(t *testing.T, a *attachment, keep ...string) {
	t.Helper()
	_, err := os.Lstat(a.pinPath())
	assert.True(t, os.IsNotExist(err), "pin %s still exists (lstat err %v)", a.pinPath(), err)
	assert.Empty(t, mountsAt(t, a.pinPath()), "a mount remains at %s", a.pinPath())
	_, err = os.Lstat(a.recordPath())
	assert.True(t, os.IsNotExist(err), "record %s still exists (lstat err %v)", a.recordPath(), err)
	var extra []string
	for _, mp := range hosttest.NsfsMountsOf(t, a.netns.ID.Ino) {
		if !slices.Contains(keep, mp) {
			extra = append(extra, mp)
		}
	}
	assert.Empty(t, extra, "nsfs mounts of net:[%d] remain after release", a.netns.ID.Ino)
}

// assertNoLink checks that a well-known path does not exist.
func assertNoLink(t *testing.T, link string) {
	t.Helper()
	_, err := os.Lstat(link)
	if err == nil {
		target, err := os.Readlink(link)
		t.Errorf("link %s still exists (-> %q, readlink: %v)", link, target, err)
	} else {
		assert.True(t, os.IsNotExist(err), "lstat %s: %v", link, err)
	}
}

// assertUntouched checks that netns-pin made nothing for a chain: no files
// under pinDir and stateDir, no mounts under the work folder.
func assertUntouched(t *testing.T, c *chain) {
	t.Helper()
	assert.Empty(t, treeEntries(t, c.pinDir), "netns-pin created files under pinDir %s", c.pinDir)
	assert.Empty(t, treeEntries(t, c.stateDir), "netns-pin created files under stateDir %s", c.stateDir)
	assert.Empty(t, hosttest.MountsUnder(t, c.work), "netns-pin mounted something under %s", c.work)
}

// nsenterAddrs runs `nsenter --net=<path> ip -j addr` and returns the
// addresses of every interface.
func nsenterAddrs(t *testing.T, path string) []net.IP {
	t.Helper()
	out := hosttest.MustRun(t, "nsenter", "--net="+path, "ip", "-j", "addr", "show")
	var links []struct {
		Ifname   string `json:"ifname"`
		AddrInfo []struct {
			Local string `json:"local"`
		} `json:"addr_info"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &links), "ip -j addr: %s", out)
	var ips []net.IP
	for _, l := range links {
		for _, ai := range l.AddrInfo {
			if ip := net.ParseIP(ai.Local); ip != nil {
				ips = append(ips, ip)
			}
		}
	}
	return ips
}

func containsIP(ips []net.IP, ip net.IP) bool {
	return slices.ContainsFunc(ips, func(x net.IP) bool { return x.Equal(ip) })
}

// cniErrorCode returns the CNI error code carried by err, or 0.
func cniErrorCode(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

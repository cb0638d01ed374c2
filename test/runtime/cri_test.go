package runtime

// Pod sandboxes through crictl, the storage networks (NetworkAttachment-
// Definitions in the suite's kube-apiserver), the fixture sysfs tree with
// rbd devices, and the checks of pins, links and records on the host.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

const (
	nadNamespace  = "rook-ceph"
	storageIfName = "net1" // Multus names the first additional network net1
)

// networkSelection is the pod annotation Multus reads.
const networkSelection = "k8s.v1.cni.cncf.io/networks"

var storageCounter atomic.Int32

// netSpec is the netns-pin entry of a storage network.
type netSpec struct {
	holders           []map[string]any
	cniArgsNamespaces []string
	links             []string
	cacheDirs         []string
	// inRuntimeConf: the chain is [bridge + host-local, netns-pin] in the
	// runtime's own CNI configuration, not a NetworkAttachmentDefinition
	// behind Multus (chain_test.go).
	inRuntimeConf bool
	// whereabouts: the IPAM is whereabouts (whereabouts_test.go), its
	// allocations in the suite's API server, instead of host-local.
	whereabouts bool
}

// storageNet is a NetworkAttachmentDefinition "ceph-public-N" in namespace
// rook-ceph: [macvlan on the suite's veth + host-local, netns-pin], with its
// own pin and state folders and fixture sysfs/debugfs roots.
type storageNet struct {
	s        *suite
	name     string
	ifname   string // net1 behind Multus, eth0 in the runtime's configuration
	subnet   string
	dir      string
	pinDir   string
	stateDir string
	sysfs    string
	debugfs  string
	ipamDir  string
	logFile  string
	conflist []byte
	// whereaboutsLog is the whereabouts CNI binary's log (spec.whereabouts).
	whereaboutsLog string
}

func (s *suite) newStorageNet(t *testing.T, spec netSpec) *storageNet {
	t.Helper()
	n := int(storageCounter.Add(1))
	require.Less(t, n, 250, "out of 10.98.N.0/24 subnets")
	dir := s.testDir(t)
	sn := &storageNet{
		s: s, name: fmt.Sprintf("ceph-public-%d", n), ifname: storageIfName, subnet: fmt.Sprintf("10.98.%d.0/24", n), dir: dir,
		pinDir: filepath.Join(dir, "pin"), stateDir: filepath.Join(dir, "state"),
		sysfs: filepath.Join(dir, "sys"), debugfs: filepath.Join(dir, "debugfs"),
		ipamDir: filepath.Join(dir, "host-local"), logFile: filepath.Join(dir, "netns-pin.log"),
	}
	// An empty debugfs root: the in-use check must not see the host's.
	require.NoError(t, os.MkdirAll(sn.debugfs, 0o755))
	pin := map[string]any{
		"type":     "netns-pin",
		"pinDir":   sn.pinDir,
		"stateDir": sn.stateDir,
		"logFile":  sn.logFile,
		"logLevel": "debug",
		"inUse":    map[string]any{"sysfs": sn.sysfs, "debugfs": sn.debugfs},
	}
	if spec.holders != nil {
		pin["holders"] = spec.holders
	}
	if spec.cniArgsNamespaces != nil {
		pin["cniArgsNamespaces"] = spec.cniArgsNamespaces
	}
	if spec.links != nil {
		pin["links"] = spec.links
	}
	if spec.cacheDirs != nil {
		pin["cacheDirs"] = spec.cacheDirs
	}
	ipam := map[string]any{
		"type": "host-local", "dataDir": sn.ipamDir,
		"ranges": [][]map[string]any{{{"subnet": sn.subnet}}},
	}
	if spec.whereabouts {
		// As a NetworkAttachmentDefinition with whereabouts names it: its
		// range, its kubeconfig and its flat file (the node's whereabouts.d,
		// here the network's folder).
		w := s.requireWhereabouts(t)
		sn.whereaboutsLog = filepath.Join(dir, "whereabouts.log")
		kc, flat, err := w.writeNodeFiles(filepath.Join(dir, "whereabouts.d"), s.api.url, sn.whereaboutsLog)
		require.NoError(t, err)
		ipam = map[string]any{
			"type": "whereabouts", "range": sn.subnet,
			"kubernetes": map[string]any{"kubeconfig": kc}, "configuration_path": flat,
		}
	}
	first := map[string]any{"type": "macvlan", "master": s.master, "mode": "bridge", "ipam": ipam}
	if spec.inRuntimeConf {
		sn.name, sn.ifname = fmt.Sprintf("chain-%d", n), "eth0"
		first = map[string]any{"type": "bridge", "bridge": s.bridge, "ipam": ipam}
	}
	list := map[string]any{
		"cniVersion": "1.0.0",
		"name":       sn.name,
		"plugins":    []any{first, pin},
	}
	var err error
	sn.conflist, err = json.MarshalIndent(list, "", "  ")
	require.NoError(t, err)
	if spec.inRuntimeConf {
		s.useRuntimeConf(t, sn.name, sn.conflist)
	} else {
		require.NoError(t, s.api.putNAD(nadNamespace, sn.name, sn.conflist))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("network %s config:\n%s", sn.name, sn.conflist)
			if b, err := os.ReadFile(sn.logFile); err == nil {
				t.Logf("netns-pin log %s:\n%s", sn.logFile, b)
			}
			if b, err := os.ReadFile(filepath.Join(s.dir, "multus.log")); err == nil {
				t.Logf("multus log (tail):\n%s", host.Tail(string(b), 60))
			}
			if b, err := os.ReadFile(sn.whereaboutsLog); err == nil {
				t.Logf("whereabouts log (tail):\n%s", host.Tail(string(b), 40))
			}
		}
	})
	return sn
}

// selection is a pod's network-selection annotation naming this network,
// with cni-args {"pinCluster": cluster} when cluster is not empty.
func (sn *storageNet) selection(cluster string) map[string]string {
	el := map[string]any{"name": sn.name, "namespace": nadNamespace}
	if cluster != "" {
		el["cni-args"] = map[string]any{"pinCluster": cluster}
	}
	b, _ := json.Marshal([]any{el})
	return map[string]string{networkSelection: string(b)}
}

// config is the netns-pin entry as netns-pin parses it.
func (sn *storageNet) config(t *testing.T) *conf.Config {
	t.Helper()
	entry, err := conf.PluginEntry(sn.conflist)
	require.NoError(t, err)
	c, err := conf.Parse(entry)
	require.NoError(t, err)
	return c
}

// link is the cluster's first well-known path.
func (sn *storageNet) link(t *testing.T, cluster string) string {
	t.Helper()
	cl, err := conf.ParseCluster(cluster)
	require.NoError(t, err)
	paths, err := sn.config(t).LinkPaths(cl)
	require.NoError(t, err)
	return paths[0]
}

// rbdDevice writes /sys/bus/rbd/devices/<id>/ in the fixture sysfs tree as
// the kernel lays it out for a krbd mapping from ip (Documentation/ABI/
// testing/sysfs-bus-rbd; client_addr is "%pISpc/%u").
func (sn *storageNet) rbdDevice(t *testing.T, id int, ip string) string {
	t.Helper()
	dev := filepath.Join(sn.sysfs, "bus", "rbd", "devices", fmt.Sprint(id))
	require.NoError(t, os.MkdirAll(dev, 0o755))
	files := map[string]string{
		"client_addr":  ip + ":0/3527561932",
		"client_id":    "client4161",
		"cluster_fsid": "8f1c2a5e-1d3b-4a53-9a43-0c6f7e1d2b10",
		"pool":         "replicapool",
		"pool_ns":      "",
		"name":         fmt.Sprintf("csi-vol-%04d", id),
		"current_snap": "-",
		"config_info":  fmt.Sprintf("%s name=csi-rbd-node,key=client.csi-rbd-node replicapool csi-vol-%04d -", ip, id),
	}
	for f, v := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dev, f), []byte(v+"\n"), 0o444))
	}
	return dev
}

func (sn *storageNet) removeRBDDevice(t *testing.T, id int) {
	t.Helper()
	require.NoError(t, os.RemoveAll(filepath.Join(sn.sysfs, "bus", "rbd", "devices", fmt.Sprint(id))))
}

func (sn *storageNet) recordPath(sb *sandbox) string {
	return filepath.Join(sn.stateDir, "records", sb.id+"."+sn.ifname+".json")
}

func (sn *storageNet) pinPath(sb *sandbox) string {
	return filepath.Join(sn.pinDir, "pins", sb.id+"."+sn.ifname)
}

// readRecord returns the sandbox's record, nil when there is none.
func (sn *storageNet) readRecord(t *testing.T, sb *sandbox) *hosttest.Record {
	t.Helper()
	return hosttest.ReadRecord(t, sn.recordPath(sb))
}

// requirePinned checks that the sandbox's netns is pinned for cluster: the
// record is in state want, the pin is an nsfs file of the sandbox's netns
// and holds its storage address.
func (sn *storageNet) requirePinned(t *testing.T, sb *sandbox, cluster, want string) *hosttest.Record {
	t.Helper()
	r := sn.readRecord(t, sb)
	require.NotNil(t, r, "no record for %s (%s)", sb, sn.recordPath(sb))
	assert.Equal(t, cluster, r.Cluster)
	assert.Equal(t, want, r.State)
	assert.Equal(t, sb.ns, r.PodNS)
	assert.Equal(t, sb.name, r.PodName)
	assert.Equal(t, sb.uid, r.PodUID)
	assert.Equal(t, sn.pinPath(sb), r.PinPath)
	assert.Equal(t, sb.netnsID, hosttest.StatNS(t, r.PinPath), "pin %s is not the netns of %s", r.PinPath, sb)
	assert.Equal(t, sb.netnsID, r.NetnsID(), "record's netns identity")
	assert.Contains(t, r.IPs, sb.storageIP, "record's addresses")
	return r
}

// requireUnpinned checks that nothing of the sandbox is left: no record, no
// pin file.
func (sn *storageNet) requireUnpinned(t *testing.T, sb *sandbox) {
	t.Helper()
	assert.Nil(t, sn.readRecord(t, sb), "record of %s still there", sb)
	_, err := os.Lstat(sn.pinPath(sb))
	assert.True(t, os.IsNotExist(err), "pin %s still there (err %v)", sn.pinPath(sb), err)
}

// requireLinkTo checks that link is a relative symlink resolving to the
// sandbox's netns, through its pin.
func (sn *storageNet) requireLinkTo(t *testing.T, link string, sb *sandbox) {
	t.Helper()
	target, err := os.Readlink(link)
	require.NoError(t, err, "link %s", link)
	assert.False(t, filepath.IsAbs(target), "link %s -> %s is not relative", link, target)
	assert.Equal(t, sn.pinPath(sb), filepath.Join(filepath.Dir(link), target), "link %s -> %s", link, target)
	assert.Equal(t, sb.netnsID, hosttest.StatNS(t, link), "link %s does not lead to the netns of %s (%s)", link, sb, sb.netnsPath)
}

func requireNoLink(t *testing.T, link string) {
	t.Helper()
	_, err := os.Lstat(link)
	assert.True(t, os.IsNotExist(err), "link %s still there (err %v)", link, err)
}

// sandbox is a pod sandbox started with crictl runp.
type sandbox struct {
	s          *suite
	ns, name   string
	uid        string
	id         string
	netnsPath  string
	netnsID    host.NSID
	ifname     string // the storage network's interface: net1, or eth0 (inRuntimeConf)
	storageIP  string // its address
	stopped    bool
	removed    bool
	podJSON    string
	defaultIP  string
	annotation map[string]string
}

func (sb *sandbox) String() string {
	id := sb.id
	if len(id) > 13 {
		id = id[:13]
	}
	return fmt.Sprintf("pod %s/%s (sandbox %s)", sb.ns, sb.name, id)
}

// runPod creates the pod in the API server and starts its sandbox, as
// kubelet would. A failed runp returns the result with sb.id empty.
func (s *suite) runPod(t *testing.T, ns, name string, annotations map[string]string) (*sandbox, host.CmdResult) {
	t.Helper()
	return s.runPodIf(t, ns, name, annotations, storageIfName)
}

// runPodIf is runPod for a pod whose storage interface is ifname.
func (s *suite) runPodIf(t *testing.T, ns, name string, annotations map[string]string, ifname string) (*sandbox, host.CmdResult) {
	t.Helper()
	uid, err := s.api.createPod(ns, name, annotations)
	require.NoError(t, err)
	sb := &sandbox{s: s, ns: ns, name: name, uid: uid, annotation: annotations, ifname: ifname}
	return sb, s.startSandbox(t, sb)
}

// startSandbox starts the sandbox of the pod sb names (its object is in
// the API server), as kubelet would. A failed runp leaves sb.id empty.
func (s *suite) startSandbox(t *testing.T, sb *sandbox) host.CmdResult {
	t.Helper()
	ns, name, annotations, ifname := sb.ns, sb.name, sb.annotation, sb.ifname
	dir := filepath.Join(s.work, "pods")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	sb.podJSON = filepath.Join(dir, ns+"_"+name+"_"+sb.uid+".json")
	pod := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": ns, "uid": sb.uid, "attempt": 0},
		"hostname":      name,
		"log_directory": filepath.Join(dir, sb.uid),
		"annotations":   annotations,
		"linux": map[string]any{
			// kubelet's cgroupfs layout: <qos parent>/pod<uid>
			"cgroup_parent": s.cgroupParent + "/pod" + sb.uid,
		},
	}
	require.NoError(t, writeJSON(sb.podJSON, pod))
	r := s.crictlRun("runp", sb.podJSON)
	t.Cleanup(func() { sb.cleanup(t) })
	if r.Err != nil {
		return r
	}
	sb.id = strings.TrimSpace(r.Stdout)
	require.Len(t, sb.id, 64, "crictl runp printed %q", r.Stdout)
	st := sb.inspect(t)
	require.Equal(t, "SANDBOX_READY", st.Status.State)
	sb.netnsPath = st.NetnsPath()
	require.NotEmpty(t, sb.netnsPath, "no network namespace path in crictl inspectp %s", sb.id)
	sb.defaultIP = st.Status.Network.IP
	sb.netnsID = hosttest.StatNS(t, sb.netnsPath)
	addrs := hosttest.AddrsIn(t, sb.netnsPath, ifname)
	require.Len(t, addrs, 1, "%s: addresses of %s", sb, ifname)
	sb.storageIP = addrs[0]
	return r
}

// mustRunPod is runPod that requires success.
func (s *suite) mustRunPod(t *testing.T, ns, name string, annotations map[string]string) *sandbox {
	t.Helper()
	sb, r := s.runPod(t, ns, name, annotations)
	require.NoError(t, r.Err, "crictl runp %s/%s:\n%s", ns, name, r)
	return sb
}

func (sb *sandbox) inspect(t *testing.T) host.SandboxInspect {
	t.Helper()
	r := sb.s.crictlRun("inspectp", "-o", "json", sb.id)
	require.NoError(t, r.Err, "crictl inspectp %s:\n%s", sb.id, r)
	st, err := host.ParseInspectp([]byte(r.Stdout))
	require.NoError(t, err)
	return st
}

func (sb *sandbox) stop() host.CmdResult {
	r := sb.s.crictlRun("stopp", sb.id)
	if r.Err == nil {
		sb.stopped = true
	}
	return r
}

func (sb *sandbox) remove() host.CmdResult {
	r := sb.s.crictlRun("rmp", sb.id)
	if r.Err == nil {
		sb.removed = true
		sb.s.api.deletePod(sb.ns, sb.name)
	}
	return r
}

// cleanup stops and removes the sandbox unless the test did, and any
// sandbox a failed runp left behind under the pod's name.
func (sb *sandbox) cleanup(t *testing.T) {
	ids := []string{}
	if sb.id != "" && !sb.removed {
		ids = append(ids, sb.id)
	}
	if sb.id == "" {
		r := sb.s.crictlRun("pods", "--name", sb.name, "--namespace", sb.ns, "-q")
		ids = append(ids, strings.Fields(r.Stdout)...)
	}
	for _, id := range ids {
		if r := sb.s.crictlRun("stopp", id); r.Err != nil && !t.Failed() {
			t.Errorf("cleanup: crictl stopp %s: %s", id, r)
			continue
		}
		if r := sb.s.crictlRun("rmp", id); r.Err != nil && !t.Failed() {
			t.Errorf("cleanup: crictl rmp %s: %s", id, r)
		}
	}
	sb.s.api.deletePod(sb.ns, sb.name)
}

// podState returns the sandbox's CRI state, "" when it is gone.
func (sb *sandbox) podState(t *testing.T) string {
	t.Helper()
	r := sb.s.crictlRun("pods", "--id", sb.id, "-o", "json")
	require.NoError(t, r.Err, "crictl pods:\n%s", r)
	var out struct {
		Items []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &out))
	for _, it := range out.Items {
		if it.ID == sb.id {
			return it.State
		}
	}
	return ""
}

// linksIn lists the interface names in the netns at path.
func linksIn(t *testing.T, path string) []string {
	t.Helper()
	h := hosttest.NetlinkHandle(t, path)
	defer h.Close()
	ls, err := h.LinkList()
	require.NoError(t, err)
	var out []string
	for _, l := range ls {
		out = append(out, l.Attrs().Name)
	}
	return out
}

// hostLocalHas reports whether host-local still holds ip for network.
func (sn *storageNet) hostLocalHas(ip string) bool {
	_, err := os.Stat(filepath.Join(sn.ipamDir, sn.name, ip))
	return err == nil
}

// pinDEL runs the netns-pin binary's DEL for the sandbox's storage
// attachment exactly as Multus' libcni does (same configuration, container
// ID, netns, interface and CNI_ARGS) and returns its exit error and output.
// Through Multus and containerd the CNI error code is flattened into a
// string; this shows the code the plugin itself returns.
func (sn *storageNet) pinDEL(t *testing.T, sb *sandbox, pinCluster string) (cniError, host.CmdResult) {
	t.Helper()
	entry, err := conf.PluginEntry(sn.conflist)
	require.NoError(t, err)
	if pinCluster != "" {
		var m map[string]any
		require.NoError(t, json.Unmarshal(entry, &m))
		m["args"] = map[string]any{"cni": map[string]any{"pinCluster": pinCluster}}
		entry, err = json.Marshal(m)
		require.NoError(t, err)
	}
	env := []string{
		"CNI_COMMAND=DEL",
		"CNI_CONTAINERID=" + sb.id,
		"CNI_NETNS=" + sb.netnsPath,
		"CNI_IFNAME=" + sn.ifname,
		"CNI_PATH=" + sn.s.cniBin,
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", sb.ns, sb.name, sb.id, sb.uid),
	}
	r := host.RunCmd(cmdTimeout, env, entry, sn.s.pinBin)
	var ce cniError
	if r.Err != nil {
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &ce), "netns-pin DEL output is not a CNI error:\n%s", r)
	}
	return ce, r
}

// runtimeError is the error crictl reports, unescaped: crictl prints it
// as a quoted logrus field (level=fatal msg="..."), the runtime's gRPC
// status with the CNI plugin's message inside.
func runtimeError(r host.CmdResult) string {
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		_, quoted, ok := strings.Cut(lines[i], " msg=")
		if !ok {
			continue
		}
		if msg, err := strconv.Unquote(quoted); err == nil {
			return msg
		}
	}
	return r.Stderr
}

type cniError struct {
	CNIVersion string `json:"cniVersion"`
	Code       int    `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details"`
}

// pathExists reports whether anything is at path (Lstat).
func pathExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

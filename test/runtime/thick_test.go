package runtime

// Multus thick mode, as Multus v4.2.3 deploys it
// (deployments/multus-daemonset-thick.yml): containerd execs multus-shim,
// which forwards the CNI call over a unix socket to multus-daemon running in
// a privileged, hostNetwork, hostPID container of its own; the daemon execs
// the delegates (netns-pin among them) chrooted into /hostroot, a
// HostToContainer volume of the host's /, but in the container's mount
// namespace (pkg/server/exec_chroot.go). A pin made there reaches the host
// only through a volume of pinDir with Bidirectional propagation.
//
// Both propagation modes need a source mount that is shared (Bidirectional)
// or shared or slave (HostToContainer). Kubernetes nodes boot with / shared
// (systemd); where / is private, as in some VMs, the tests make / shared
// (only /, not its submounts) for their duration and private again after.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// CRI's enums as crictl's JSON takes them (k8s.io/cri-api runtime/v1).
const (
	nsNode              = 2 // NamespaceMode NODE
	propHostToContainer = 1 // MountPropagation PROPAGATION_HOST_TO_CONTAINER
	propBidirectional   = 2 // MountPropagation PROPAGATION_BIDIRECTIONAL
)

// criMount is a CRI Mount.
type criMount struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	Readonly      bool   `json:"readonly,omitempty"`
	Propagation   int    `json:"propagation,omitempty"`
}

// hostContainer is a running container of its own hostNetwork, hostPID,
// privileged pod sandbox: what a DaemonSet pod is to the node.
type hostContainer struct {
	s            *suite
	podID, ctrID string
	pid          int // its first process, in the host's PID namespace
}

// startHostContainer starts a container of image in a new hostNetwork,
// hostPID, privileged sandbox named name, with mounts, and stops and
// removes both when the test ends.
func (s *suite) startHostContainer(t *testing.T, name, image string, command []string, env map[string]string, mounts []criMount) *hostContainer {
	t.Helper()
	dir := filepath.Join(s.testDir(t), name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	secCtx := map[string]any{"privileged": true, "namespace_options": map[string]any{"network": nsNode, "pid": nsNode}}
	podJSON := filepath.Join(dir, "pod.json")
	require.NoError(t, writeJSON(podJSON, map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "kube-system", "uid": host.RandHex(16), "attempt": 0},
		"log_directory": dir,
		"linux":         map[string]any{"cgroup_parent": s.cgroupParent + "/pod" + name, "security_context": secCtx},
	}))
	var envs []map[string]string
	for k, v := range env {
		envs = append(envs, map[string]string{"key": k, "value": v})
	}
	ctrJSON := filepath.Join(dir, "container.json")
	require.NoError(t, writeJSON(ctrJSON, map[string]any{
		"metadata": map[string]any{"name": name}, "image": map[string]any{"image": image},
		"command": command, "envs": envs, "mounts": mounts, "log_path": name + ".log",
		"linux": map[string]any{"security_context": secCtx},
	}))
	c := &hostContainer{s: s}
	r := s.crictlRun("runp", podJSON)
	require.NoError(t, r.Err, "crictl runp %s:\n%s", name, r)
	c.podID = strings.TrimSpace(r.Stdout)
	t.Cleanup(func() {
		if t.Failed() && c.ctrID != "" {
			t.Logf("%s's log:\n%s", name, host.Tail(s.crictlRun("logs", c.ctrID).String(), 80))
		}
		for _, args := range [][]string{{"stopp", c.podID}, {"rmp", c.podID}} {
			if r := s.crictlRun(args...); r.Err != nil {
				t.Errorf("cleanup: %s", r)
			}
		}
	})
	r = s.crictlRun("create", c.podID, ctrJSON, podJSON)
	require.NoError(t, r.Err, "crictl create %s:\n%s", name, r)
	c.ctrID = strings.TrimSpace(r.Stdout)
	r = s.crictlRun("start", c.ctrID)
	require.NoError(t, r.Err, "crictl start %s:\n%s", name, r)
	r = s.crictlRun("inspect", "-o", "json", c.ctrID)
	require.NoError(t, r.Err, "crictl inspect %s:\n%s", name, r)
	var info struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &info))
	require.NotZero(t, info.Info.Pid, "no pid in crictl inspect %s", c.ctrID)
	c.pid = info.Info.Pid
	return c
}

// path is p as the container sees it, through its root in /proc.
func (c *hostContainer) path(p string) string {
	return filepath.Join("/proc", strconv.Itoa(c.pid), "root", p)
}

// shareRoot makes / a shared mount for the test when it is not, as it is
// on Kubernetes nodes, and private again at the end.
func shareRoot(t *testing.T) {
	t.Helper()
	m, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/"))
	require.NoError(t, err)
	require.NotEmpty(t, m, "no mount at /")
	if strings.Contains(m[len(m)-1].Optional, "shared:") {
		return
	}
	require.NoError(t, unix.Mount("", "/", "", unix.MS_SHARED, ""), "make / shared")
	t.Cleanup(func() { require.NoError(t, unix.Mount("", "/", "", unix.MS_PRIVATE, ""), "make / private again") })
}

// thickMultus is multus-daemon in its container and containerd's CNI
// configuration pointing at multus-shim, until the test ends.
type thickMultus struct {
	*hostContainer
	shimConf []byte
}

// startThickMultus starts multus-daemon with the upstream DaemonSet's
// volumes and, when pinDir is not empty, pinDir at /hostroot<pinDir> with
// Bidirectional propagation; then makes multus-shim containerd's network.
// cache is Multus' cniDir, where libcni keeps the delegates' results
// (upstream: the host's /var/lib/cni/multus); "" makes one.
func (s *suite) startThickMultus(t *testing.T, pinDir, cache string) *thickMultus {
	t.Helper()
	return s.startThickMultusOn(t, "", pinDir, cache)
}

// startThickMultusOn is startThickMultus for the pods of node, as the
// upstream DaemonSet runs the daemon (MULTUS_NODE_NAME from spec.nodeName:
// its pod informer sees only that node's pods); "" sees every pod.
func (s *suite) startThickMultusOn(t *testing.T, node, pinDir, cache string) *thickMultus {
	t.Helper()
	shareRoot(t)
	env, err := host.ReadEnvFile(filepath.Join(s.dir, "env"), "MULTUS_DAEMON_IMAGE", "MULTUS_BIN_DIR")
	require.NoError(t, err)
	dir := s.testDir(t)
	// The daemon makes its socket folder afresh: like upstream, a host
	// folder is /host/run and the socket folder is below it.
	run, sa, cfg := filepath.Join(dir, "run"), filepath.Join(dir, "serviceaccount"), filepath.Join(dir, "multus.d")
	if cache == "" {
		cache = filepath.Join(dir, "multus-cache")
	}
	socketDir := filepath.Join(run, "multus")
	// The daemon's /host/etc/cni/net.d (upstream: the host's /etc/cni/net.d)
	// with the default network: multus-daemon v4.2.3 stays up only with
	// "multusConfigFile": "auto", which writes the shim's configuration
	// there from the first network it finds. containerd reads the suite's
	// own (useShim).
	confOut := filepath.Join(dir, "net.d")
	for _, d := range []string{run, cache, sa, cfg, confOut} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	// In-cluster credentials (rest.InClusterConfig): the suite's token and
	// the API server's self-signed certificate as the CA.
	require.NoError(t, writeJSON(filepath.Join(confOut, "10-default.conflist"), s.multusConfig()["delegates"].([]any)[0]))
	require.NoError(t, os.WriteFile(filepath.Join(sa, "token"), []byte(s.api.token), 0o600))
	ca, err := os.ReadFile(filepath.Join(s.api.dir, "certs", "apiserver.crt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sa, "ca.crt"), ca, 0o644))
	// The upstream daemon-config.json, with the suite's paths.
	require.NoError(t, writeJSON(filepath.Join(cfg, "daemon-config.json"), map[string]any{
		"chrootDir": "/hostroot", "cniVersion": "1.0.0", "logLevel": "verbose", "logToStderr": true,
		"cniConfigDir": "/host/etc/cni/net.d", "multusAutoconfigDir": "/host/etc/cni/net.d", "multusConfigFile": "auto",
		"socketDir": "/host/run/multus/",
	}))
	mounts := []criMount{
		{ContainerPath: "/hostroot", HostPath: "/", Propagation: propHostToContainer},
		{ContainerPath: "/var/run/netns", HostPath: "/run/netns", Propagation: propHostToContainer},
		{ContainerPath: "/host/run", HostPath: run},
		{ContainerPath: "/host/etc/cni/net.d", HostPath: confOut},
		{ContainerPath: "/etc/cni/net.d/multus.d", HostPath: cfg, Readonly: true},
		{ContainerPath: "/var/run/secrets/kubernetes.io/serviceaccount", HostPath: sa, Readonly: true},
		{ContainerPath: cache, HostPath: cache},
	}
	// "multus-daemon expects that cnibin path must be identical between pod
	// and container host": the suite's bin folder holds links, so their
	// targets' folders too (whereabouts', when a network uses it).
	binDirs := []string{s.cniBin, filepath.Dir(s.pinBin), filepath.Join(s.repo, ".cache", "cni", "bin"), env["MULTUS_BIN_DIR"]}
	links, err := os.ReadDir(s.cniBin)
	require.NoError(t, err)
	for _, l := range links {
		if target, err := os.Readlink(filepath.Join(s.cniBin, l.Name())); err == nil && filepath.IsAbs(target) {
			binDirs = append(binDirs, filepath.Dir(target))
		}
	}
	for _, d := range uniq(binDirs...) {
		mounts = append(mounts, criMount{ContainerPath: d, HostPath: d, Readonly: true})
	}
	if pinDir != "" {
		require.NoError(t, os.MkdirAll(pinDir, 0o755))
		mounts = append(mounts, criMount{ContainerPath: "/hostroot" + pinDir, HostPath: pinDir, Propagation: propBidirectional})
	}
	daemonEnv := map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": strings.TrimPrefix(s.api.url, "https://127.0.0.1:")}
	if node != "" {
		daemonEnv["MULTUS_NODE_NAME"] = node
	}
	c := s.startHostContainer(t, "kube-multus-"+host.RandHex(4), env["MULTUS_DAEMON_IMAGE"],
		[]string{"/usr/src/multus-cni/bin/multus-daemon", "-config", "/etc/cni/net.d/multus.d/daemon-config.json"}, daemonEnv, mounts)
	sock := filepath.Join(socketDir, "multus.sock")
	require.True(t, host.Poll(readyTimeout, 50*time.Millisecond, func() bool { _, err := os.Stat(sock); return err == nil }),
		"multus-daemon made no socket %s:\n%s", sock, s.crictlRun("logs", c.ctrID))
	m := &thickMultus{hostContainer: c}
	m.shimConf = s.useShim(t, socketDir, cache)
	return m
}

// useShim makes multus-shim containerd's CNI configuration until the test
// ends; the Multus fields of the thin configuration go along, for the
// daemon to read from each request (Multus' cache folder is the
// daemon's). It returns the configuration.
func (s *suite) useShim(t *testing.T, socketDir, cache string) []byte {
	t.Helper()
	c := s.multusConfig()
	delete(c, "kubeconfig") // the daemon has its own client
	c["type"], c["daemonSocketDir"], c["cniDir"] = "multus-shim", socketDir, cache
	c["logFile"] = filepath.Join(filepath.Dir(socketDir), "multus-shim.log")
	path := filepath.Join(s.cniConf, "00-multus.conf")
	require.NoError(t, writeJSON(path, c))
	t.Cleanup(func() {
		require.NoError(t, s.writeMultusConfig())
		require.True(t, host.Poll(readyTimeout, 50*time.Millisecond, func() bool { return !strings.Contains(s.crictlRun("info").Stdout, "multus-shim") }),
			"containerd did not load the thin Multus configuration again")
	})
	require.True(t, host.Poll(readyTimeout, 50*time.Millisecond, func() bool { return strings.Contains(s.crictlRun("info").Stdout, "multus-shim") }),
		"containerd did not load multus-shim's configuration")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// del sends a DEL of the sandbox's pod network through multus-shim, as a
// runtime retrying it would: multus-shim answers every DEL with success
// (Multus v4.2.3 pkg/server/api/shim.go, CmdDel), so only its effects tell.
func (m *thickMultus) del(t *testing.T, sb *sandbox) {
	t.Helper()
	env := []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + sb.id, "CNI_NETNS=" + sb.netnsPath, "CNI_IFNAME=eth0", "CNI_PATH=" + m.s.cniBin,
		fmt.Sprintf("CNI_ARGS=K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", sb.ns, sb.name, sb.id, sb.uid)}
	r := host.RunCmd(cmdTimeout, env, m.shimConf, filepath.Join(m.s.cniBin, "multus-shim"))
	require.NoError(t, r.Err, "multus-shim DEL:\n%s", r)
}

// status runs netns-pin's CNI STATUS as the daemon's delegates run, in its
// mount namespace chrooted into /hostroot: what docs/operating.md tells
// operators to run (there with kubectl exec and chroot) to check the setup.
func (m *thickMultus) status(t *testing.T, sn *storageNet) host.CmdResult {
	t.Helper()
	cfg := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"netns-pin","pinDir":%q,"stateDir":%q}`, sn.name, sn.pinDir, sn.stateDir)
	pid := strconv.Itoa(m.pid)
	return host.RunCmd(cmdTimeout, []string{"CNI_COMMAND=STATUS", "CNI_PATH=" + m.s.cniBin}, []byte(cfg),
		"nsenter", "--target", pid, "--mount", "--root=/proc/"+pid+"/root/hostroot", "--", filepath.Join(m.s.cniBin, "netns-pin"))
}

func uniq(dirs ...string) []string {
	var out []string
	for _, d := range dirs {
		if d = filepath.Clean(d); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// requireContainerPin checks that the container sees the sandbox's pin at
// path in its own mount namespace (nsfs, the sandbox's netns), or, with
// want false, that it sees nothing there.
func requireContainerPin(t *testing.T, c *hostContainer, path string, sb *sandbox, want bool) {
	t.Helper()
	p := c.path(path)
	if !want {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		assert.True(t, os.IsNotExist(err) || (err == nil && st.Type != unix.NSFS_MAGIC), "%s still a pin in the container (statfs err %v)", path, err)
		return
	}
	assert.Equal(t, sb.netnsID, hosttest.StatNS(t, p), "%s in the container is not the netns of %s", path, sb)
}

// thickNet is a storage network whose holders are rook-ceph/csi-holder-*
// pods of cluster, its netns-pin looking for libcni caches in cacheDirs.
func (s *suite) thickNet(t *testing.T, cluster string, cacheDirs []string) *storageNet {
	t.Helper()
	return s.newStorageNet(t, netSpec{
		holders:   []map[string]any{{"podNamespace": "rook-ceph", "podName": "csi-holder-*", "cluster": cluster}},
		cacheDirs: cacheDirs,
	})
}

// Under Multus thick with pinDir as a Bidirectional volume, a holder's pin
// made inside the daemon's container appears on the host and in a csi-like
// container that mounts pinDir (HostToContainer and Bidirectional); a
// non-holder passes through; a DEL refused while a client uses the netns
// keeps the pod's interface in it; a later DEL, run by the daemon again,
// releases and the unmount reaches the host and the other container.
func TestThickMultusHolderPinReachesHost(t *testing.T) {
	s := requireRuntime(t, containerd) // multus-daemon runs in a container of containerd
	const cluster = "rook-ceph/thick-a"
	sn := s.thickNet(t, cluster, nil)
	link := sn.link(t, cluster)
	multus := s.startThickMultus(t, sn.pinDir, "")
	// ceph-csi's node plugin, started before the pin exists: what it sees
	// comes by propagation.
	env, err := host.ReadEnvFile(filepath.Join(s.dir, "env"), "PAUSE_IMAGE")
	require.NoError(t, err)
	csi := s.startHostContainer(t, "csi-rbdplugin-"+host.RandHex(4), env["PAUSE_IMAGE"], nil, nil, []criMount{
		{ContainerPath: "/pins-h2c", HostPath: sn.pinDir, Propagation: propHostToContainer},
		{ContainerPath: "/pins-bidi", HostPath: sn.pinDir, Propagation: propBidirectional},
	})

	r := multus.status(t, sn)
	require.NoError(t, r.Err, "STATUS in the daemon's container:\n%s", r)
	assert.Empty(t, r.Stdout, "STATUS prints nothing when it succeeds")

	holder := s.mustRunPod(t, "rook-ceph", "csi-holder-t-"+host.RandHex(5), sn.selection(""))
	sn.requirePinned(t, holder, cluster, "active")
	sn.requireLinkTo(t, link, holder)
	pinRel := strings.TrimPrefix(sn.pinPath(holder), sn.pinDir)
	for _, m := range []string{"/pins-h2c", "/pins-bidi"} {
		requireContainerPin(t, csi, m+pinRel, holder, true)
	}
	requireContainerPin(t, multus.hostContainer, "/hostroot"+sn.pinPath(holder), holder, true)

	app := s.mustRunPod(t, "rook-ceph", "app-"+host.RandHex(5), sn.selection(""))
	assert.Nil(t, sn.readRecord(t, app), "a pod no rule names must not be pinned")
	require.NoError(t, app.stop().Err)
	require.NoError(t, app.remove().Err)

	// A client: the runtime's DEL is refused inside the daemon. The shim
	// tells containerd it succeeded, so the runtime drops the netns path;
	// the pin keeps the netns, with the pod's interface in it.
	sn.rbdDevice(t, 1, holder.storageIP)
	require.NoError(t, holder.stop().Err, "crictl stopp")
	sn.requirePinned(t, holder, cluster, "draining")
	assert.Contains(t, linksIn(t, sn.pinPath(holder)), storageIfName, "the refused DEL keeps the pod's interface")
	requireContainerPin(t, csi, "/pins-h2c"+pinRel, holder, true)
	multus.del(t, holder)
	sn.requirePinned(t, holder, cluster, "draining")

	// A process of the host in the netns is a client too: the daemon's
	// in-use check sees the host's processes (hostPID, /hostroot/proc).
	sn.removeRBDDevice(t, 1)
	proc := hosttest.StartInNetns(t, sn.pinPath(holder), "sleep", "600")
	multus.del(t, holder)
	sn.requirePinned(t, holder, cluster, "draining")
	require.NoError(t, host.Stop(proc))

	// The clients are gone: the next DEL through the daemon releases, and
	// the unmount made in its container reaches the host and ceph-csi's.
	multus.del(t, holder)
	sn.requireUnpinned(t, holder)
	requireNoLink(t, link)
	for _, m := range []string{"/pins-h2c", "/pins-bidi"} {
		requireContainerPin(t, csi, m+pinRel, holder, false)
	}
	assert.Empty(t, hosttest.MountsUnder(t, sn.dir), "mounts left on the host")
	require.NoError(t, holder.remove().Err)
}

// Under Multus thick without the pinDir volume, a holder's ADD fails with
// the error that names the volume to add, and nothing is left on the host.
func TestThickMultusWithoutPinDirVolume(t *testing.T) {
	s := requireRuntime(t, containerd) // multus-daemon runs in a container of containerd
	const cluster = "rook-ceph/thick-b"
	sn := s.thickNet(t, cluster, nil)
	multus := s.startThickMultus(t, "", "")

	holder, r := s.runPod(t, "rook-ceph", "csi-holder-n-"+host.RandHex(5), sn.selection(""))
	require.Error(t, r.Err, "a holder's sandbox must fail without the pinDir volume:\n%s", r)
	msg := runtimeError(r)
	t.Logf("runp: %s", msg)
	assert.Contains(t, msg, fmt.Sprintf("mount the host folder %s into that container", sn.pinDir), "the error names the folder")
	assert.Contains(t, msg, "/hostroot"+sn.pinDir+" in Multus' DaemonSet) with mountPropagation: Bidirectional", "the error names the volume")
	assert.Empty(t, holder.id)
	// The check comes before the store is opened: no state, no pins folder.
	for _, p := range []string{sn.stateDir, filepath.Join(sn.pinDir, "pins")} {
		_, err := os.Stat(p)
		assert.True(t, os.IsNotExist(err), "%s made (stat err %v)", p, err)
	}
	assert.Empty(t, hosttest.MountsUnder(t, sn.dir), "mounts left on the host")
	st := multus.status(t, sn)
	require.Error(t, st.Err, "STATUS in the daemon's container without the volume:\n%s", st)
	assert.Contains(t, st.Stdout, `"code": 50`, "STATUS: plugin not available")
	assert.Contains(t, st.Stdout, "mountPropagation: Bidirectional", "STATUS names the volume")
}

// Under Multus thick the runtime never sees a refused DEL (multus-shim
// answers it with success) and drops its netns: the sweeper on the host
// finishes the teardown once the netns is unused, with the delegates'
// libcni cache entry the refusal captured, and the release reaches the
// daemon's container.
func TestThickMultusSweeperFinishes(t *testing.T) {
	s := requireRuntime(t, containerd) // multus-daemon runs in a container of containerd
	const cluster = "rook-ceph/thick-c"
	cache := filepath.Join(s.testDir(t), "multus-cache")
	sn := s.thickNet(t, cluster, []string{cache})
	multus := s.startThickMultus(t, sn.pinDir, cache)
	holder := s.mustRunPod(t, "rook-ceph", "csi-holder-s-"+host.RandHex(5), sn.selection(""))
	sn.requirePinned(t, holder, cluster, "active")
	sn.rbdDevice(t, 1, holder.storageIP)
	require.NoError(t, holder.stop().Err, "crictl stopp: multus-shim reports success")
	_, err := os.Lstat(holder.netnsPath)
	require.True(t, os.IsNotExist(err), "containerd removed its netns (err %v)", err)
	require.NoError(t, holder.remove().Err)
	sn.requirePinned(t, holder, cluster, "draining")

	nad := filepath.Join(sn.dir, "nad.json")
	require.NoError(t, os.WriteFile(nad, sn.conflist, 0o644))
	sweep := func() {
		r := host.RunCmd(cmdTimeout, nil, nil, s.ctl, "--conf", nad, "sweep", "--once")
		require.NoError(t, r.Err, "netns-pinctl sweep --once:\n%s", r)
	}
	sweep()
	sn.requirePinned(t, holder, cluster, "draining")
	assert.True(t, sn.hostLocalHas(holder.storageIP), "host-local keeps %s while rbd1 is mapped", holder.storageIP)

	sn.removeRBDDevice(t, 1)
	sweep()
	sn.requireUnpinned(t, holder)
	assert.False(t, sn.hostLocalHas(holder.storageIP), "the sweeper's chain DEL gave %s back to host-local", holder.storageIP)
	requireContainerPin(t, multus.hostContainer, "/hostroot"+sn.pinPath(holder), holder, false)
}

package kube

// The node sweeper as deploy/installer-daemonset.yaml ships it: not
// privileged, with its four capabilities, the runtime's seccomp filter,
// no_new_privs; and, so, still finishing a teardown the runtime abandoned
// (chain DEL, pin released) once nothing uses the netns.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// capabilityBits are the capabilities a manifest of deploy/ may name, by
// their Kubernetes name (CAP_ left out), with their bit in
// /proc/<pid>/status.
var capabilityBits = map[string]int{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "KILL": unix.CAP_KILL, "NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_CHROOT": unix.CAP_SYS_CHROOT, "SYS_PTRACE": unix.CAP_SYS_PTRACE,
}

// shippedSweepContainer is the sweep container of
// deploy/installer-daemonset.yaml, as the file has it.
func (c *cluster) shippedSweepContainer(t *testing.T) map[string]any {
	t.Helper()
	ds := c.manifest(t, "installer-daemonset.yaml")
	cs, _ := get(ds, "spec", "template", "spec", "containers").([]any)
	for _, ct := range cs {
		if str(ct, "name") == "sweep" {
			return ct.(map[string]any)
		}
	}
	require.FailNow(t, "deploy/installer-daemonset.yaml has no sweep container")
	return nil
}

// sweeperPID is the host PID of the running sweep container's first
// process: netns-pinctl host-exec, whose child is the sweeper.
func (c *cluster) sweeperPID(t *testing.T) int {
	t.Helper()
	r := c.crictlRun("ps", "-q", "--state", "Running", "--name", "^sweep$",
		"--label", "io.kubernetes.pod.namespace=kube-system")
	require.NoError(t, r.Err, "%s", r)
	ids := strings.Fields(r.Stdout)
	require.Len(t, ids, 1, "one running sweep container")
	return c.containerPID(t, ids[0])
}

// containerPID is the host PID of a running container's process, as crictl
// inspect reports it.
func (c *cluster) containerPID(t *testing.T, id string) int {
	t.Helper()
	r := c.crictlRun("inspect", "-o", "json", id)
	require.NoError(t, r.Err, "%s", r)
	var info struct {
		Info struct {
			PID int `json:"pid"`
		} `json:"info"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &info))
	require.Positive(t, info.Info.PID)
	return info.Info.PID
}

// procStatus reads the fields of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// capabilityMask is the capability set names as /proc/<pid>/status shows it.
func capabilityMask(t *testing.T, names []any) uint64 {
	t.Helper()
	var m uint64
	for _, n := range names {
		bit, ok := capabilityBits[n.(string)]
		require.True(t, ok, "capability %v unknown to this test", n)
		m |= 1 << bit
	}
	return m
}

// The sweep container runs as shipped: the pod object has the manifest's
// securityContext, and the process on the node has exactly the shipped
// capabilities (effective, permitted and bounding), no_new_privs and a
// seccomp filter, and runs netns-pinctl sweep in the host's mount namespace.
// Then it does its job: a holder is refused while a client uses it, its
// runtime netns vanishes (the runtime gave up), the sweeper marks it
// abandoned, and once the client is gone the sweeper, not the runtime (the
// kubelet is held still meanwhile), runs the chain's DEL (macvlan's
// interface, host-local's lease) and releases the pin; the agent then
// counts a release by the sweeper and lifts the finalizer.
func TestSweeperRunsWithItsCapabilitiesOnly(t *testing.T) {
	c := requireCluster(t)
	shipped := c.shippedSweepContainer(t)
	sc, _ := shipped["securityContext"].(map[string]any)
	require.NotNil(t, sc)
	require.NotEqual(t, true, sc["privileged"], "deploy/installer-daemonset.yaml: the sweep container is privileged")
	add, _ := get(sc, "capabilities", "add").([]any)
	require.NotEmpty(t, add)

	// 1. The pod object: the manifest's securityContext, field by field.
	var pods struct {
		Items []struct {
			Spec struct {
				HostPID    bool             `json:"hostPID"`
				Containers []map[string]any `json:"containers"`
			} `json:"spec"`
		} `json:"items"`
	}
	c.getJSON(t, &pods, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=netns-pin-installer")
	require.Len(t, pods.Items, 1)
	assert.True(t, pods.Items[0].Spec.HostPID)
	var running map[string]any
	for _, ct := range pods.Items[0].Spec.Containers {
		if str(ct, "name") == "sweep" {
			running, _ = ct["securityContext"].(map[string]any)
		}
	}
	require.NotNil(t, running, "the running pod's sweep container has a securityContext")
	want, err := json.Marshal(sc)
	require.NoError(t, err)
	var wantJSON map[string]any
	require.NoError(t, json.Unmarshal(want, &wantJSON))
	for k, v := range wantJSON {
		assert.Equal(t, v, running[k], "the running sweep container's securityContext.%s", k)
	}

	// 2. The processes on the node: host-exec, the container's first, and
	// its child the sweeper, which names itself in its status file.
	parent := c.sweeperPID(t)
	var pid int
	require.True(t, host.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		sw, err := netnsstore.ReadSweepStatus(c.stateDir)
		if err != nil || sw == nil {
			return false
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", sw.PID))
		if err == nil && strings.Contains(string(b), fmt.Sprintf("\nPPid:\t%d\n", parent)) {
			pid = sw.PID
		}
		return pid != 0
	}), "the sweeper's status names host-exec's child")
	st := procStatus(t, pid)
	t.Logf("sweeper pid %d (host-exec %d): CapEff %s CapPrm %s CapBnd %s CapInh %s CapAmb %s NoNewPrivs %s Seccomp %s",
		pid, parent, st["CapEff"], st["CapPrm"], st["CapBnd"], st["CapInh"], st["CapAmb"], st["NoNewPrivs"], st["Seccomp"])
	mask := capabilityMask(t, add)
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
		got, err := strconv.ParseUint(st[f], 16, 64)
		require.NoError(t, err, "%s %q", f, st[f])
		assert.Equal(t, fmt.Sprintf("%016x", mask), fmt.Sprintf("%016x", got), "%s of the sweeper is the shipped %v", f, add)
	}
	amb, err := strconv.ParseUint(st["CapAmb"], 16, 64)
	require.NoError(t, err)
	assert.Zero(t, amb, "no ambient capabilities")
	if sc["allowPrivilegeEscalation"] == false {
		assert.Equal(t, "1", st["NoNewPrivs"], "allowPrivilegeEscalation: false is no_new_privs")
	}
	assert.Equal(t, "2", st["Seccomp"], "the runtime's default seccomp filter applies")
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	require.GreaterOrEqual(t, len(argv), 2)
	assert.Equal(t, []string{"netns-pinctl", "sweep"}, argv[:2], "host-exec runs netns-pinctl sweep")
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	require.NoError(t, err)
	// this suite runs in the host's mount namespace (PID 1's may be
	// unreadable even to root here, as on a node that is itself a
	// container: host-exec then takes kthreadd's)
	hostMnt, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	assert.Equal(t, hostMnt, own, "the sweeper runs in the host's mount namespace")
	parentMnt, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", parent))
	require.NoError(t, err)
	assert.NotEqual(t, hostMnt, parentMnt, "host-exec stays in the container's, where kubectl exec finds /netns-pinctl")

	// 3. Its job. A NAD whose IPAM is host-local (its leases are files on
	// the node, its DEL needs no API server: the sweep container is on the
	// pod network, where this suite's API server, on 127.0.0.1, is not)
	// and whose libcni cache folder is Multus', as the suite runs it.
	suffix := host.RandHex(5)
	dataDir := filepath.Join(c.env["KUBE_DIR"], "lib", "cni", "host-local-"+suffix)
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	prefix := strings.TrimSuffix(c.env["KUBE_STORAGE_SUBNET"], "0/24")
	nad := c.nad(t, "network-attachment-definition.yaml", "ceph-public-"+suffix, func(main, pin map[string]any) {
		main["ipam"] = map[string]any{"type": "host-local", "dataDir": dataDir,
			"ranges": []any{[]any{map[string]any{"subnet": c.env["KUBE_STORAGE_SUBNET"],
				"rangeStart": prefix + "200", "rangeEnd": prefix + "249"}}}}
		pin["cacheDirs"] = []any{c.multusCacheDir()}
	})
	h := c.newHolderSetOn(t, suffix, nad)
	old := h.waitHolder(t)
	lease := filepath.Join(dataDir, nad.name, old.ip)
	require.FileExists(t, lease, "host-local's lease of %s", old.ip)
	cl := startClient(t, h.link)
	t.Cleanup(func() { _ = host.Stop(cl.cmd) })

	// The holder goes while its client lives: its DEL is refused, and the
	// refusal captures the teardown (Multus' cache entry of the chain).
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", old.pod.Metadata.Name, "--wait=false")
	var raw map[string]any
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool {
		raw = readRawRecord(t, c.recordPath(old.sb))
		return raw != nil && raw["state"] == "draining" && str(raw, "teardown", "cacheFile") != ""
	}), "the holder's DEL was not refused with its teardown captured: %v", raw)
	assert.Equal(t, filepath.Join(c.multusCacheDir(), "results", nad.name+"-"+old.sb.id+"-"+storageIf), str(raw, "teardown", "cacheFile"))

	// The runtime gives up: its netns handle is gone (as a sandbox removed
	// by hand, docs/operating.md "When the runtime gives up").
	require.NoError(t, unix.Unmount(old.sb.netnsPath, unix.MNT_DETACH), "unmount the runtime's netns %s", old.sb.netnsPath)
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool {
		raw = readRawRecord(t, c.recordPath(old.sb))
		return raw != nil && raw["abandoned"] == true
	}), "the sweeper did not mark the holder abandoned: %v", raw)
	c.requirePinned(t, old.pod, old.sb, h.cluster, "draining")
	assert.FileExists(t, lease, "the lease stays while the client uses the netns")

	// Only the sweeper may release it: the kubelet, whose retry would DEL
	// again, is held still until the sweeper is done.
	c.holdKubelet(t)
	cl.stop(t)
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool { return c.unpinned(old.sb) }),
		"the sweeper did not release the abandoned holder once its client left")
	_, err = os.Lstat(lease)
	assert.True(t, os.IsNotExist(err), "the sweeper's chain DEL did not give %s back to host-local (%v)", old.ip, err)
	// released while the kubelet stood still: by the sweeper (its log, read
	// through the kubelet, says so too)
	c.releaseKubelet(t)
	// The sweeper logs after it released, and the runtime copies the line
	// to the container log on its own: the pin can be gone before the line
	// is readable.
	var logs, finished string
	host.Poll(podTimeout, 250*time.Millisecond, func() bool {
		logs = c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "sweep")
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `"msg":"finished abandoned teardown"`) && strings.Contains(l, old.sb.id) {
				finished = l
			}
		}
		return finished != ""
	})
	require.NotEmpty(t, finished, "the sweeper's log:\n%s", logs)
	t.Logf("sweep container: %s", finished)
	assert.Contains(t, finished, `"ipamReleased":true`)

	c.waitSeries(t, "the release is the sweeper's", func(v float64) bool { return v == 1 },
		"netns_pin_releases_total", "cluster", h.cluster, "by", "sweeper")
	c.requireReleased(t, h.selector, old.pod, old.sb, 500*time.Millisecond, "the abandoned holder's object is still there after the sweeper released it")
}

// readRawRecord reads the record at path as JSON; nil when there is none.
func readRawRecord(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "record %s", path)
	return m
}

// kubeletPID is the kubelet's PID as hack/kube/up.sh recorded it.
func (c *cluster) kubeletPID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.env["KUBE_DIR"], "pids", "kubelet"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// holdKubelet stops the kubelet (SIGSTOP) until releaseKubelet or the
// end of the test: no CRI call of its starts meanwhile. The node stays
// Ready for the API for its grace period (tens of seconds).
func (c *cluster) holdKubelet(t *testing.T) {
	t.Helper()
	pid := c.kubeletPID(t)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP), "SIGSTOP the kubelet (%d)", pid)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	// A teardown the kubelet asked for just before runs on in the runtime,
	// and may release once the client goes: wait for the CNI calls under
	// way to end.
	require.True(t, host.Poll(podTimeout, 50*time.Millisecond, func() bool { return len(cniCalls()) == 0 }),
		"CNI calls still running with the kubelet stopped: %v", cniCalls())
}

// cniCalls are the CNI plugin processes running on the host: a plugin
// binary of the chain run without arguments (the sweeper and the
// operator's commands have some).
func cniCalls() []string {
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		switch filepath.Base(argv[0]) {
		case "netns-pin", "multus", "multus-shim", "bridge", "macvlan", "host-local", "whereabouts":
			if len(argv) == 1 {
				out = append(out, d.Name()+" "+argv[0])
			}
		}
	}
	return out
}

func (c *cluster) releaseKubelet(t *testing.T) {
	t.Helper()
	pid := c.kubeletPID(t)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT), "SIGCONT the kubelet (%d)", pid)
}

// deploy/monitoring/ as a user applies it, checked by the API server
// (--dry-run=server: nothing is stored). This cluster has no Prometheus
// Operator, so its PodMonitor and PrometheusRule have no kind here and are
// the only objects refused; the NetworkPolicy is accepted as written, and
// its pod selector selects the running agent's pod. (This suite's network
// plugin, the bridge plugin under Multus, enforces no NetworkPolicy, and
// its agent runs on the host's network, where none would apply:
// docs/security.md.)
func TestMonitoringNetworkPolicyAccepted(t *testing.T) {
	c := requireCluster(t)
	r := c.kubectl("apply", "--dry-run=server", "-k", filepath.Join(c.repo, "deploy", "monitoring"))
	t.Logf("kubectl apply --dry-run=server -k deploy/monitoring/:\n%s%s", r.Stdout, r.Stderr)
	assert.Regexp(t, `(?m)^networkpolicy\.networking\.k8s\.io/netns-pin-agent-metrics (created|configured|unchanged) \(server dry run\)$`, r.Stdout)
	for _, l := range strings.Split(strings.TrimSpace(r.Stderr), "\n") {
		if l == "" || strings.HasPrefix(l, "ensure CRDs are installed first") {
			continue
		}
		assert.Regexp(t, `no matches for kind "(PodMonitor|PrometheusRule)" in version "monitoring\.coreos\.com/v1"`, l,
			"only the Prometheus Operator's kinds are refused")
	}

	out := c.mustKubectl(t, "apply", "--dry-run=server", "-o", "json", "-f", filepath.Join(c.repo, "deploy", "monitoring", "networkpolicy.yaml"))
	var np map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &np))
	assert.Equal(t, "NetworkPolicy", str(np, "kind"))
	assert.Equal(t, []any{"Ingress"}, get(np, "spec", "policyTypes"))
	rules, _ := get(np, "spec", "ingress").([]any)
	require.Len(t, rules, 1)
	ports, _ := get(rules[0], "ports").([]any)
	require.Len(t, ports, 1)
	assert.Equal(t, "metrics", get(ports[0], "port"), "the named port, kept as named")
	sel, _ := get(np, "spec", "podSelector", "matchLabels").(map[string]any)
	require.NotEmpty(t, sel)
	var parts []string
	for k, v := range sel {
		parts = append(parts, k+"="+v.(string))
	}
	agents := c.pods(t, str(np, "metadata", "namespace"), strings.Join(parts, ","))
	require.Len(t, agents, 1, "the policy's selector selects the node agent's pod")
	assert.True(t, strings.HasPrefix(agents[0].Metadata.Name, "netns-pin-agent-"), "%s", agents[0])
}

package kube

// The installer pod as an operator sees it: the sweeper's Prometheus
// metrics scraped from the pod during a holder rollout, and `netns-pinctl
// check` run in the pod, passing on the healthy node and failing once the
// ceph-csi configuration is broken on purpose (docs/operating.md, "Checking
// a node" and "Metrics").

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// metricsPort is deploy/agent-daemonset.yaml's --listen-address port.
const metricsPort = "9853"

// installerExec runs a command in the sweep container of the node's
// installer pod, as docs/operating.md has it (`kubectl exec
// <netns-pin-installer pod on the node>`): the one that runs, is ready and
// is not being deleted. When the exec fails it logs the pods and which
// mount namespace the exec joined: the container's first process's
// (host-exec must stay in its own), against the host's.
func (c *cluster) installerExec(t *testing.T, args ...string) host.CmdResult {
	t.Helper()
	p := c.waitRunning(t, "kube-system", "app.kubernetes.io/name=netns-pin-installer")
	r := c.kubectl(append([]string{"-n", "kube-system", "exec", p.Metadata.Name, "-c", "sweep", "--"}, args...)...)
	if r.Err != nil {
		t.Logf("kubectl exec in %s: %s", p, r) // before what follows, which may fail the test itself
		hostNS, _ := os.Readlink("/proc/self/ns/mnt")
		pid := c.sweeperPID(t)
		own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		t.Logf("exec in %s failed; the sweep container's first process (pid %d) is in mount namespace %s (%v), the host's is %s; the installer's pods:\n%s",
			p, pid, own, err, hostNS, c.kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=netns-pin-installer", "-o", "wide").Stdout)
	}
	return r
}

// scrapeInstaller reads the node's /metrics, the agent's
// (deploy/agent-daemonset.yaml), as Prometheus would from the pod's
// address: the agent runs on the host's network in this suite
// (hack/kube/up.sh), and its image has no shell or wget.
func (c *cluster) scrapeInstaller(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeLocal(t, metricsPort)
}

// scrapeLocal reads /metrics of a pod on the host's network of node 1.
func scrapeLocal(t *testing.T, port string) map[string]*dto.MetricFamily {
	t.Helper()
	hc := http.Client{Timeout: cmdTimeout}
	resp, err := hc.Get("http://127.0.0.1:" + port + "/metrics")
	require.NoError(t, err, "scrape :%s", port)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "scrape :%s", port)
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "the text exposition format")
	return mfs
}

// waitSeries polls the installer's /metrics until the series satisfies
// cond; the sweeper updates them each round (every 2 s in this suite:
// hack/kube/up.sh).
func (c *cluster) waitSeries(t *testing.T, what string, cond func(float64) bool, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	var ok bool
	if !host.Poll(releaseTimeout, time.Second, func() bool {
		v, ok = hosttest.MetricValue(c.scrapeInstaller(t), name, labels...)
		return ok && cond(v)
	}) {
		t.Fatalf("%s: %s%v is %v (present: %v)", what, name, labels, v, ok)
	}
	return v
}

func TestInstallerMetricsDuringAHolderRollout(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	old := h.waitHolder(t)
	cl := []string{"cluster", h.cluster}
	c.waitSeries(t, "the holder is active", func(v float64) bool { return v == 1 }, "netns_pin_pins", append(cl, "state", "active")...)
	refusals := c.waitSeries(t, "refusals are counted from 0", func(float64) bool { return true }, "netns_pin_refusals_total", cl...)
	releases := c.waitSeries(t, "releases are counted from 0", func(float64) bool { return true }, "netns_pin_releases_total", append(cl, "by", "del")...)
	require.Zero(t, refusals)
	require.Zero(t, releases)
	// the count of failed rounds is the agent's since it started: earlier
	// scenarios (a node restart) are not this one's
	errsBefore, _ := hosttest.MetricValue(c.scrapeInstaller(t), "netns_pin_sweep_errors_total")
	if errsBefore > 0 {
		t.Logf("%v sweep rounds failed before this scenario; the sweeper's lines with an error:\n%s", errsBefore, c.sweepErrorLines())
	}

	client := startClient(t, h.link)
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	next := h.waitHolder(t, old.pod.Metadata.UID)
	c.waitSeries(t, "the old holder drains", func(v float64) bool { return v == 1 }, "netns_pin_pins", append(cl, "state", "draining")...)
	c.waitSeries(t, "the new holder is active", func(v float64) bool { return v == 1 }, "netns_pin_pins", append(cl, "state", "active")...)
	c.waitSeries(t, "the kubelet's refused DEL is counted", func(v float64) bool { return v >= 1 }, "netns_pin_refusals_total", cl...)
	age := c.waitSeries(t, "the draining pin has an age", func(v float64) bool { return v > 0 }, "netns_pin_oldest_draining_seconds", cl...)
	c.waitSeries(t, "its age grows", func(v float64) bool { return v >= age+1 }, "netns_pin_oldest_draining_seconds", cl...)

	client.stop(t)
	c.requireReleased(t, h.selector, old.pod, old.sb, 500*time.Millisecond, "the old holder is released once its client left")
	c.waitSeries(t, "the release by the runtime's DEL is counted", func(v float64) bool { return v == 1 }, "netns_pin_releases_total", append(cl, "by", "del")...)
	c.waitSeries(t, "nothing drains", func(v float64) bool { return v == 0 }, "netns_pin_pins", append(cl, "state", "draining")...)
	h.requireLinkTo(t, next)
	mfs := c.scrapeInstaller(t)
	last, ok := hosttest.MetricValue(mfs, "netns_pin_last_sweep_timestamp_seconds")
	require.True(t, ok)
	assert.InDelta(t, float64(time.Now().Unix()), last, 60, "the sweeper swept within the last minute")
	errs, _ := hosttest.MetricValue(mfs, "netns_pin_sweep_errors_total")
	if !assert.Equal(t, errsBefore, errs, "no round failed") {
		t.Logf("the sweeper's lines with an error:\n%s", c.sweepErrorLines())
	}
}

// sweepErrorLines are the sweep container's log lines that carry an error.
func (c *cluster) sweepErrorLines() string {
	var failed []string
	for _, l := range strings.Split(c.kubectl("-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "sweep").Stdout, "\n") {
		if strings.Contains(l, `"error"`) {
			failed = append(failed, l)
		}
	}
	return strings.Join(failed, "\n")
}

// nodeCheck runs `netns-pinctl check` in the installer pod, in the host's
// mount namespace (as its sweeper runs), on the suite's store: args end
// with --json, and the table is printed too.
func (c *cluster) nodeCheck(t *testing.T, args ...string) (int, []map[string]string, string) {
	t.Helper()
	// The documented line: kubectl exec into the sweep container, whose
	// netns-pinctl runs check in the host's mount namespace (host-exec),
	// as the sweeper runs.
	argv := []string{"/netns-pinctl", "host-exec", "--", "--pin-dir", c.pinDir, "--state-dir", c.stateDir, "check"}
	r := c.installerExec(t, append(argv, args...)...)
	table := c.installerExec(t, append(argv, args[:len(args)-1]...)...)
	t.Logf("netns-pinctl check in the installer pod:\n%s", table.Stdout)
	code := 0
	var ee *exec.ExitError
	if r.Err != nil {
		require.ErrorAs(t, r.Err, &ee, "%s", r)
		code = ee.ExitCode()
	}
	var rep struct {
		Findings []map[string]string `json:"findings"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &rep), "check --json: %s", r)
	return code, rep.Findings, table.Stdout
}

func hasFinding(fs []map[string]string, check, level, what string) bool {
	for _, f := range fs {
		if f["check"] == check && f["level"] == level && strings.Contains(f["what"], what) {
			return true
		}
	}
	return false
}

// csiStandIn runs a pod that mounts the kubelet's plugins folder as a csi
// node plugin does (mountPropagation HostToContainer: it receives the
// host's mounts below it), and returns the pid of its container's process.
func (c *cluster) csiStandIn(t *testing.T) int {
	t.Helper()
	name := "csi-standin-" + host.RandHex(5)
	plugins := filepath.Join(c.env["KUBELET_DIR"], "plugins")
	c.ensureNamespace(t, pinNamespace)
	c.apply(t, map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": pinNamespace, "labels": map[string]any{"app.kubernetes.io/name": name}},
		"spec": map[string]any{
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name": "node-plugin", "image": c.env["KUBE_BUSYBOX_IMAGE"], "imagePullPolicy": "Never",
				"command":      []any{"sleep", "3600"},
				"volumeMounts": []any{map[string]any{"name": "plugins", "mountPath": plugins, "mountPropagation": "HostToContainer"}},
			}},
			"volumes": []any{map[string]any{"name": "plugins", "hostPath": map[string]any{"path": plugins, "type": "Directory"}}},
		},
	})
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "pod", name, "app.kubernetes.io/name="+name) })
	c.waitRunning(t, pinNamespace, "app.kubernetes.io/name="+name)
	r := c.crictlRun("ps", "-q", "--label", "io.kubernetes.pod.name="+name, "--name", "node-plugin")
	require.NoError(t, r.Err, "%s", r)
	id := strings.TrimSpace(r.Stdout)
	require.NotEmpty(t, id, "the stand-in's container")
	return c.containerPID(t, id)
}

func TestCheckInTheInstallerPod(t *testing.T) {
	c := requireCluster(t)
	// The csi stand-in first: the holder's pin reaches it only by
	// propagation, which check then proves through its /proc/<pid>/root.
	csiPID := c.csiStandIn(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	h.waitHolder(t)
	// ceph-csi's config.json as deploy/ceph-csi-config.yaml has it, for
	// this holder's cluster, written on the node.
	cm := c.manifest(t, "ceph-csi-config.yaml")
	var entries []map[string]any
	require.NoError(t, json.Unmarshal([]byte(str(cm, "data", "config.json")), &entries))
	require.NotEmpty(t, entries)
	for _, kind := range []string{"rbd", "cephFS"} {
		entries[0][kind].(map[string]any)["netNamespaceFilePath"] = h.link
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "config.json")
	b, err := json.Marshal(entries)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(config, b, 0o644))
	csi := "--csi-pid=" + strconv.Itoa(csiPID)
	// The sweeper waits for stateDir, which the first holder ADD makes: its
	// first round there comes within its interval.
	require.True(t, host.Poll(releaseTimeout, 500*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join(c.stateDir, "sweeper.json"))
		return err == nil
	}), "the installer's sweeper reports a round")

	code, fs, table := c.nodeCheck(t, "--ceph-csi-config", config, csi, "--json")
	assert.Equal(t, 0, code, "the healthy node passes:\n%s", table)
	assert.True(t, hasFinding(fs, "csiPlugin", "ok", "same netns in its mount namespace"), "the link leads to the holder's netns in the stand-in:\n%s", table)
	assert.True(t, hasFinding(fs, "cephCSI", "ok", h.link), "ceph-csi's paths lead to the holder's active pin:\n%s", table)
	assert.True(t, hasFinding(fs, "sweeper", "ok", "running"), "the installer's sweeper runs:\n%s", table)
	assert.True(t, hasFinding(fs, "pinDir", "ok", "shared mount"), "%s", table)

	// Broken on purpose: Rook's old holder path, which no links entry of
	// the NAD keeps.
	rook := filepath.Join(c.env["KUBELET_DIR"], "plugins", "rook-ceph.rbd.csi.ceph.com", pinNamespace+".net.ns")
	entries[0]["rbd"].(map[string]any)["netNamespaceFilePath"] = rook
	b, err = json.Marshal(entries)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(config, b, 0o644))
	code, fs, table = c.nodeCheck(t, "--ceph-csi-config", config, csi, "--json")
	assert.Equal(t, 1, code, "a broken ceph-csi configuration fails:\n%s", table)
	assert.True(t, hasFinding(fs, "cephCSI", "error", "Rook's old holder path"), "%s", table)
	assert.True(t, bytes.Contains([]byte(table), []byte(`{{.Namespace}}.net.ns`)), "the table says which links entry to add:\n%s", table)
}

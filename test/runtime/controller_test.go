package runtime

// The cluster controller (cmd/netns-pin-controller, the binary of `make
// build`) against the suite's kube-apiserver, with deploy/'s credentials
// and limits: controller.yaml's ServiceAccount, controller-rbac.yaml,
// controller-admission-policy.yaml. There is no kubelet and no
// kube-controller-manager: the test makes the Node objects and sets their
// Ready condition and taints as a node's kubelet and the node lifecycle
// controller would, and deletes holders as a force delete does. Needs no
// runtime and no root.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/internal/host"
)

const (
	controllerServiceAccount = "netns-pin-controller" // deploy/controller.yaml
	controllerPolicy         = "netns-pin-controller-lift-only"
	controllerProbePod       = "netns-pin-controller-policy-probe"
)

var controllerAccess struct {
	once sync.Once
	err  error
}

// ensureControllerAccess applies what deploy/ gives the controller, once,
// and waits until its policy is in force.
func (k *kubeAPI) ensureControllerAccess(repo string) error {
	controllerAccess.once.Do(func() { controllerAccess.err = k.applyControllerAccess(repo) })
	return controllerAccess.err
}

func (k *kubeAPI) applyControllerAccess(repo string) error {
	if err := k.ensureNamespace(agentNamespace); err != nil {
		return err
	}
	for _, src := range []struct {
		file  string
		kinds []string
	}{
		{"controller.yaml", []string{"ServiceAccount"}},
		{"controller-rbac.yaml", nil},
		{"controller-admission-policy.yaml", nil},
	} {
		objs, err := deployObjects(repo, src.file, src.kinds...)
		if err != nil {
			return err
		}
		if r := k.kubectl(objs, "apply", "-f", "-"); r.Err != nil {
			return fmt.Errorf("apply deploy/%s: %s", src.file, r)
		}
	}
	// In force once a patch by the controller that it must deny is
	// denied by it (server-side dry run).
	if _, err := k.createPodObject(podObject{ns: agentNamespace, name: controllerProbePod, node: policyProbeNode}); err != nil {
		return err
	}
	kc, err := k.controllerKubeconfig()
	if err != nil {
		return err
	}
	var last host.CmdResult
	if !host.Poll(60*time.Second, 100*time.Millisecond, func() bool {
		last = k.kubectlAs(kc, nil, "-n", agentNamespace, "patch", "pod", controllerProbePod, "--dry-run=server",
			"--type=merge", "-p", `{"metadata":{"labels":{"probe":"x"}}}`)
		return last.Err != nil && strings.Contains(last.Stderr, controllerPolicy)
	}) {
		return fmt.Errorf("the ValidatingAdmissionPolicy %s did not come into force: %s", controllerPolicy, last)
	}
	return nil
}

// controllerKubeconfig writes a kubeconfig with a token of the
// controller's ServiceAccount.
func (k *kubeAPI) controllerKubeconfig() (string, error) {
	r := k.kubectl(nil, "-n", agentNamespace, "create", "token", controllerServiceAccount, "--duration=2h")
	if r.Err != nil {
		return "", fmt.Errorf("token of %s/%s: %s", agentNamespace, controllerServiceAccount, r)
	}
	path := filepath.Join(k.dir, "controller.kubeconfig")
	return path, writeJSON(path, map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters":        []any{map[string]any{"name": "runtime", "cluster": map[string]any{"server": k.url, "insecure-skip-tls-verify": true}}},
		"users":           []any{map[string]any{"name": "controller", "user": map[string]any{"token": strings.TrimSpace(r.Stdout)}}},
		"contexts":        []any{map[string]any{"name": "controller", "context": map[string]any{"cluster": "runtime", "user": "controller"}}},
		"current-context": "controller",
	})
}

// testNode is a Node object as the test sets it: its Ready condition
// ("" none) and whether it carries the out-of-service taint.
type testNode struct {
	name         string
	ready        corev1.ConditionStatus
	outOfService bool
}

func (k *kubeAPI) putNode(t *testing.T, n testNode) {
	t.Helper()
	var taints []any
	if n.outOfService {
		taints = append(taints, map[string]any{"key": controller.TaintOutOfService, "value": "nodeshutdown", "effect": "NoExecute"})
	}
	require.NoError(t, k.apply(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": n.name},
		"spec": map[string]any{"taints": taints}}))
	t.Cleanup(func() { k.kubectl(nil, "delete", "node", n.name, "--ignore-not-found", "--wait=false") })
	if n.ready == "" {
		return
	}
	now := time.Now().UTC().Format(time.RFC3339)
	status := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"reason":"Test","message":"set by the test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		n.ready, now, now)
	r := k.kubectl(nil, "patch", "node", n.name, "--subresource=status", "--type=merge", "-p", status)
	require.NoError(t, r.Err, "%s", r)
}

// runningController is one replica of cmd/netns-pin-controller.
type runningController struct {
	identity string
	cmd      *exec.Cmd
	done     chan error
	log      string
	metrics  string // its /metrics URL
	base     string
}

// startController runs the controller of `make build` with the
// controller's token, a short Lease and quarantine, and waits until it
// serves its endpoint and its caches synced.
func startController(t *testing.T, repo, dir, kubeconfig, identity, lease string, quarantine time.Duration) *runningController {
	t.Helper()
	bin := filepath.Join(repo, "bin", "netns-pin-controller")
	require.NoError(t, host.CheckExecutable(bin), "run `make build`")
	c := &runningController{identity: identity, log: filepath.Join(dir, identity+".log"), done: make(chan error, 1)}
	logf, err := os.Create(c.log)
	require.NoError(t, err)
	defer logf.Close()
	c.cmd = exec.Command(bin, "--kubeconfig", kubeconfig, "--identity", identity,
		"--lease-namespace", agentNamespace, "--lease-name", lease,
		"--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "500ms",
		"--quarantine", quarantine.String(), "--interval", "1s", "--listen-address", "127.0.0.1:0")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	require.NoError(t, c.cmd.Start())
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.stop(t)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", identity, host.Tail(c.logText(), 40))
		}
	})
	addr := regexp.MustCompile(`serving metrics at (http://\S+)/metrics`)
	require.True(t, host.Poll(readyTimeout, 50*time.Millisecond, func() bool {
		if m := addr.FindStringSubmatch(c.logText()); m != nil {
			c.base = m[1]
		}
		return c.base != "" && c.get("/readyz") == "ok\n"
	}), "the controller %s did not get ready:\n%s", identity, c.logText())
	c.metrics = c.base + "/metrics"
	return c
}

func (c *runningController) logText() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

func (c *runningController) get(path string) string {
	resp, err := http.Get(c.base + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// metric is the value of the sample of name with exactly those labels
// (in the order the exposition writes them: by name), or -1 when there is
// none.
func (c *runningController) metric(name string, labels ...string) float64 {
	want := name
	if len(labels) > 0 {
		var pairs []string
		for i := 0; i+1 < len(labels); i += 2 {
			pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		want += "{" + strings.Join(pairs, ",") + "}"
	}
	sc := bufio.NewScanner(strings.NewReader(c.get("/metrics")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func (c *runningController) stop(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		assert.NoError(t, err, "the controller %s exits 0 on SIGTERM", c.identity)
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		t.Errorf("the controller %s did not stop on SIGTERM", c.identity)
	}
}

func (c *runningController) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// TestControllerLetsGoOfNodesGone: two replicas, one leader. A holder being
// deleted on a node tainted out-of-service and NotReady loses the
// finalizer at once; one on a node whose Node object is deleted only once
// the quarantine has passed since the delete; each with an Event of the
// leader saying why, and only netns-pin.io/pin goes. Holders on nodes only
// NotReady or Unknown, out of service but Ready, or Ready keep it, after
// the leader provably decided on them (its holders_waiting metric names
// them with their reason: agent_not_ready for a Ready node whose node agent
// pod is missing or not Ready), and so does a holder not being deleted. The
// leader killed, the other replica takes the Lease and lifts the next. The
// controller's identity may make that one patch and no other.
func TestControllerLetsGoOfNodesGone(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	k, err := requireAPI(repo)
	require.NoError(t, err, "kube-apiserver")
	require.NoError(t, k.ensureControllerAccess(repo))
	kc, err := k.controllerKubeconfig()
	require.NoError(t, err)
	dir := t.TempDir()
	const quarantine = 10 * time.Second // deploy/ runs 40 s (deploy/controller_test.go)
	const keep = "example.com/keep"     // another finalizer, which must stay

	id := host.RandHex(4)
	ns := "ctl-holders-" + id // holders may be in any namespace
	require.NoError(t, k.ensureNamespace(ns))
	nodes := map[string]testNode{
		"healthy":    {name: "ctl-healthy-" + id, ready: corev1.ConditionTrue},
		"gone":       {name: "ctl-gone-" + id, ready: corev1.ConditionTrue},
		"oos":        {name: "ctl-oos-" + id, ready: corev1.ConditionFalse, outOfService: true},
		"oos-ready":  {name: "ctl-oos-ready-" + id, ready: corev1.ConditionTrue, outOfService: true},
		"no-agent":   {name: "ctl-no-agent-" + id, ready: corev1.ConditionTrue},
		"agent-down": {name: "ctl-agent-down-" + id, ready: corev1.ConditionTrue},
		"not-ready":  {name: "ctl-not-ready-" + id, ready: corev1.ConditionFalse},
		"unknown":    {name: "ctl-unknown-" + id, ready: corev1.ConditionUnknown},
		"no-ready":   {name: "ctl-no-ready-" + id},
		"idle-owner": {name: "ctl-idle-" + id, ready: corev1.ConditionTrue},
	}
	for _, n := range nodes {
		k.putNode(t, n)
	}
	type holder struct{ name, uid, node string }
	holders := map[string]*holder{}
	newHolder := func(key, node string) *holder {
		h := &holder{name: "holder-" + key + "-" + host.RandHex(3), node: node}
		t.Cleanup(func() { k.forgetPod(ns, h.name) })
		h.uid, err = k.createPodObject(podObject{ns: ns, name: h.name, node: node, finalizers: []string{agent.Finalizer, keep}})
		require.NoError(t, err)
		return h
	}
	for key, n := range nodes {
		holders[key] = newHolder(key, n.name)
	}
	// The node agent's pods (by their label): Ready on every Ready node
	// but two, none on no-agent, not Ready on agent-down.
	for key, n := range nodes {
		if key == "no-agent" {
			continue
		}
		name := "agent-" + key + "-" + host.RandHex(3)
		t.Cleanup(func() { k.forgetPod(ns, name) })
		_, err := k.createPodObject(podObject{ns: ns, name: name, node: n.name,
			labels: map[string]string{controller.AgentLabel: controller.AgentName}})
		require.NoError(t, err)
		ready := corev1.ConditionTrue
		if key == "agent-down" {
			ready = corev1.ConditionFalse
		}
		require.NoError(t, k.setPodReady(ns, name, ready))
	}
	// A holder of the node that goes that is not being deleted.
	idle := newHolder("idle", nodes["gone"].name)
	finalizers := func(h *holder) []string {
		t.Helper()
		p, err := k.getPod(ns, h.name, h.uid)
		require.NoError(t, err)
		require.NotNil(t, p, "the object of %s is gone", h.name)
		return p.Finalizers
	}
	lifted := func(h *holder) bool { return slices.Equal(finalizers(h), []string{keep}) }
	controllerEvent := func(h *holder, reason string) corev1.Event {
		t.Helper()
		var got *corev1.Event
		require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool {
			evs, err := k.events(ns, h.uid)
			require.NoError(t, err)
			for i := range evs {
				if evs[i].Reason == reason {
					got = &evs[i]
				}
			}
			return got != nil
		}), "no %s Event on %s", reason, h.name)
		assert.Equal(t, "netns-pin-controller", got.Source.Component)
		assert.Contains(t, got.Message, h.node)
		t.Logf("%s on %s: %s (from %s)", reason, h.name, got.Message, got.Source.Host)
		return *got
	}

	// Two replicas: a leads, b waits.
	lease := "netns-pin-controller-" + id
	a := startController(t, repo, dir, kc, "ctl-a-"+id, lease, quarantine)
	require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool { return a.metric("netns_pin_controller_is_leader") == 1 }),
		"a did not take the Lease")
	b := startController(t, repo, dir, kc, "ctl-b-"+id, lease, quarantine)
	assert.Equal(t, 0.0, b.metric("netns_pin_controller_is_leader"), "b waits")

	// Every holder but the idle one is force-deleted: its object stays,
	// Terminating, for its finalizers. Then the node "gone" goes.
	for key, h := range holders {
		if key != "idle-owner" {
			require.NoError(t, k.finalDelete(ns, h.name))
		}
	}
	gone := time.Now()
	r := k.kubectl(nil, "delete", "node", nodes["gone"].name, "--wait=false")
	require.NoError(t, r.Err, "%s", r)

	// Out of service and NotReady, or without a Ready condition: lifted
	// at once, only netns-pin.io/pin.
	oos := holders["oos"]
	require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool { return lifted(oos) }),
		"the holder on the out-of-service node kept its finalizer: %v", finalizers(oos))
	ev := controllerEvent(oos, controller.ReasonNodeOutOfService)
	assert.Equal(t, a.identity, ev.Source.Host, "lifted by the leader")

	// The leader decided on every other holder, and keeps its finalizer.
	waits := map[string]string{
		"healthy": controller.WaitReleasePending, "oos-ready": controller.WaitReleasePending,
		"no-agent": controller.WaitAgentNotReady, "agent-down": controller.WaitAgentNotReady,
		"not-ready": controller.WaitNodeUnreachable, "unknown": controller.WaitNodeUnreachable, "no-ready": controller.WaitNodeUnreachable,
	}
	requireKept := func(when string) {
		t.Helper()
		for key, reason := range waits {
			n := nodes[key].name
			require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool {
				return a.metric("netns_pin_controller_holders_waiting", "node", n, "reason", reason) == 1
			}), "%s: the leader does not count the holder on %s as %s", when, n, reason)
			assert.Equal(t, []string{agent.Finalizer, keep}, finalizers(holders[key]), "%s: the holder on %s (%s) keeps its finalizer", when, key, reason)
		}
		assert.Equal(t, []string{agent.Finalizer, keep}, finalizers(idle), "%s: a holder not being deleted keeps it", when)
		assert.Equal(t, []string{agent.Finalizer, keep}, finalizers(holders["idle-owner"]), "%s: a holder of a healthy node, not being deleted, keeps it", when)
	}
	requireKept("before the quarantine ends")

	// The node gone: waits the quarantine, then lifted.
	g := holders["gone"]
	require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool {
		return a.metric("netns_pin_controller_holders_waiting", "node", g.node, "reason", controller.WaitNodeGoneQuarantine) == 1
	}), "the leader does not count the holder of the node gone as in quarantine")
	require.Equal(t, []string{agent.Finalizer, keep}, finalizers(g), "lifted before the quarantine")
	require.True(t, host.Poll(quarantine+30*time.Second, 100*time.Millisecond, func() bool { return lifted(g) }),
		"the holder of the node gone kept its finalizer: %v", finalizers(g))
	after := time.Since(gone)
	t.Logf("the holder of the node gone was let go %s after the Node object's delete (quarantine %s)", after.Round(100*time.Millisecond), quarantine)
	assert.GreaterOrEqual(t, after, quarantine, "lifted before the quarantine")
	ev = controllerEvent(g, controller.ReasonNodeGone)
	assert.Equal(t, a.identity, ev.Source.Host, "lifted by the leader")
	// The passes after the quarantine kept every other finalizer.
	requireKept("after the quarantine")
	assert.Equal(t, 1.0, a.metric("netns_pin_controller_finalizers_lifted_total", "reason", controller.ReasonNodeGone))
	assert.Equal(t, 1.0, a.metric("netns_pin_controller_finalizers_lifted_total", "reason", controller.ReasonNodeOutOfService))
	assert.NotContains(t, b.logText(), `"msg":"finalizer lifted"`, "only the leader acts")
	assert.Equal(t, 0.0, b.metric("netns_pin_controller_is_leader"))

	// The leader dies without releasing the Lease: b takes it over and
	// lets go of the next holder of an out-of-service node.
	a.kill()
	require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool { return b.metric("netns_pin_controller_is_leader") == 1 }),
		"b did not take the Lease over")
	next := newHolder("oos-next", nodes["oos"].name)
	require.NoError(t, k.finalDelete(ns, next.name))
	require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool { return lifted(next) }),
		"the new leader did not lift: %v", finalizers(next))
	ev = controllerEvent(next, controller.ReasonNodeOutOfService)
	assert.Equal(t, b.identity, ev.Source.Host, "lifted by the new leader")
	assert.Equal(t, []string{agent.Finalizer, keep}, finalizers(holders["not-ready"]), "the new leader keeps a partitioned node's finalizers")

	// The controller's identity may remove netns-pin.io/pin from a pod
	// being deleted and do nothing else.
	denied := func(r host.CmdResult, why string) {
		t.Helper()
		require.Error(t, r.Err, "must be denied (%s):\n%s", why, r)
		assert.Contains(t, r.Stderr, "ValidatingAdmissionPolicy '"+controllerPolicy+"'", "denied by the policy")
		assert.Contains(t, r.Stderr, why)
	}
	patch := func(h *holder, typ, body string) host.CmdResult {
		return k.kubectlAs(kc, nil, "-n", ns, "patch", "pod", h.name, "--type="+typ, "-p", body)
	}
	hl := holders["healthy"] // being deleted, [pin, keep]
	denied(patch(hl, "json", `[{"op":"remove","path":"/metadata/finalizers/1"}]`), "only removes netns-pin.io/pin")
	denied(patch(hl, "json", `[{"op":"remove","path":"/metadata/finalizers"}]`), "only removes netns-pin.io/pin")
	denied(patch(hl, "merge", `{"metadata":{"labels":{"app":"x"}}}`), "only removes netns-pin.io/pin")
	denied(patch(hl, "json", `[{"op":"remove","path":"/metadata/finalizers/0"},{"op":"add","path":"/metadata/labels","value":{"app":"x"}}]`),
		"changes nothing of a pod but its netns-pin.io/pin finalizer")
	denied(patch(idle, "json", `[{"op":"remove","path":"/metadata/finalizers/0"}]`), "only of a pod being deleted")
	assert.Equal(t, []string{agent.Finalizer, keep}, finalizers(hl))
	assert.Equal(t, []string{agent.Finalizer, keep}, finalizers(idle))
	r = k.kubectlAs(kc, nil, "-n", ns, "delete", "pod", idle.name, "--wait=false")
	require.Error(t, r.Err, "delete:\n%s", r)
	assert.Contains(t, r.Stderr, `cannot delete resource "pods"`)
	r = patch(hl, "json", `[{"op":"test","path":"/metadata/finalizers/0","value":"`+agent.Finalizer+`"},{"op":"remove","path":"/metadata/finalizers/0"}]`)
	require.NoError(t, r.Err, "the one patch it may make:\n%s", r)
	assert.Equal(t, []string{keep}, finalizers(hl))

	b.stop(t)
	assert.Contains(t, b.logText(), `"msg":"leading"`)
}

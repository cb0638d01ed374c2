package runtime

// The node agent (cmd/netns-pin-agent, the binary of `make build`) against
// the suite's kube-apiserver, with the credentials and limits it has on a
// node: deploy/rbac.yaml's Role, deploy/agent-daemonset.yaml's
// ServiceAccount, deploy/validating-admission-policy.yaml, and a
// ServiceAccount token bound to an agent pod object scheduled to the node,
// as the kubelet's projected token is (it carries the node's name, which
// the policy checks). There is no kubelet: the tests do what it would do
// with the holder's pod object (the graceful delete, then the final delete
// with grace period 0 once the sandbox is stopped).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/internal/host"
)

const (
	agentNamespace      = "kube-system"
	agentServiceAccount = "netns-pin-agent" // deploy/agent-daemonset.yaml
	agentPolicy         = "netns-pin-agent-own-node"
	policyProbePod      = "netns-pin-policy-probe"
	policyProbeNode     = "netns-pin-no-node"
)

// deployObjects returns the documents of deploy/<file> whose kind is one
// of kinds (every document when none is given) as one JSON List for
// kubectl apply.
func deployObjects(repo, file string, kinds ...string) ([]byte, error) {
	return manifestObjects(filepath.Join(repo, "deploy", file), kinds...)
}

// agentAccess is what deploy/ gives the agent in the API server, applied
// once: its ServiceAccount, Role and RoleBinding, and the node policy, which
// is in force when this returns (a patch it must deny is denied).
var agentAccess struct {
	once sync.Once
	err  error
}

func (k *kubeAPI) ensureAgentAccess(repo string) error {
	agentAccess.once.Do(func() { agentAccess.err = k.applyAgentAccess(repo) })
	return agentAccess.err
}

func (k *kubeAPI) applyAgentAccess(repo string) error {
	for _, ns := range []string{agentNamespace, nadNamespace} {
		if err := k.ensureNamespace(ns); err != nil {
			return err
		}
	}
	for _, src := range []struct {
		file  string
		kinds []string
	}{
		{"agent-daemonset.yaml", []string{"ServiceAccount"}},
		{"rbac.yaml", nil},
		{"validating-admission-policy.yaml", nil},
	} {
		objs, err := deployObjects(repo, src.file, src.kinds...)
		if err != nil {
			return err
		}
		if r := k.kubectl(objs, "apply", "-f", "-"); r.Err != nil {
			return fmt.Errorf("apply deploy/%s: %s", src.file, r)
		}
	}
	// The policy is compiled and bound a moment after it is created: wait
	// until it denies a patch by the agent's ServiceAccount without a
	// node claim (a token bound to no pod), with a server-side dry run.
	if _, err := k.createPodObject(podObject{ns: nadNamespace, name: policyProbePod, node: policyProbeNode}); err != nil {
		return err
	}
	kc, err := k.agentKubeconfig("unbound", "", "")
	if err != nil {
		return err
	}
	var last host.CmdResult
	if !host.Poll(60*time.Second, 100*time.Millisecond, func() bool {
		last = k.kubectlAs(kc, nil, "-n", nadNamespace, "patch", "pod", policyProbePod, "--dry-run=server",
			"--type=strategic", "-p", `{"metadata":{"finalizers":["`+agent.Finalizer+`"]}}`)
		return last.Err != nil && strings.Contains(last.Stderr, agentPolicy)
	}) {
		return fmt.Errorf("the ValidatingAdmissionPolicy %s did not come into force: %s", agentPolicy, last)
	}
	return nil
}

// agentKubeconfig writes a kubeconfig for the agent's ServiceAccount and
// returns its path. With a pod (name and UID) the token is bound to that
// pod, as the kubelet's projected token is, and so carries the node of the
// pod; without one it is bound to nothing and carries no node.
func (k *kubeAPI) agentKubeconfig(name, pod, podUID string) (string, error) {
	args := []string{"-n", agentNamespace, "create", "token", agentServiceAccount, "--duration=2h"}
	if pod != "" {
		args = append(args, "--bound-object-kind=Pod", "--bound-object-name="+pod, "--bound-object-uid="+podUID)
	}
	r := k.kubectl(nil, args...)
	if r.Err != nil {
		return "", fmt.Errorf("token of %s/%s: %s", agentNamespace, agentServiceAccount, r)
	}
	path := filepath.Join(k.dir, "agent-"+name+".kubeconfig")
	return path, writeJSON(path, map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters":        []any{map[string]any{"name": "runtime", "cluster": map[string]any{"server": k.url, "insecure-skip-tls-verify": true}}},
		"users":           []any{map[string]any{"name": "agent", "user": map[string]any{"token": strings.TrimSpace(r.Stdout)}}},
		"contexts":        []any{map[string]any{"name": "agent", "context": map[string]any{"cluster": "runtime", "user": "agent"}}},
		"current-context": "agent",
	})
}

// nodeAgentKubeconfig makes the Node object and the agent's pod object on
// it (what the DaemonSet would schedule there) and returns a kubeconfig
// with a token bound to that pod.
func (k *kubeAPI) nodeAgentKubeconfig(repo, node string) (string, error) {
	if err := k.ensureAgentAccess(repo); err != nil {
		return "", err
	}
	if err := k.apply(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": node}}); err != nil {
		return "", err
	}
	pod := "netns-pin-agent-" + host.RandHex(5)
	uid, err := k.createPodObject(podObject{ns: agentNamespace, name: pod, node: node, serviceAccount: agentServiceAccount})
	if err != nil {
		return "", err
	}
	return k.agentKubeconfig(node, pod, uid)
}

func (k *kubeAPI) kubectlAs(kubeconfig string, stdin []byte, args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, stdin, k.kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

// nodeAgent is cmd/netns-pin-agent running for one storage network's
// stateDir, as node node.
type nodeAgent struct {
	node string
	log  string
}

// startAgent starts the agent of `make build` (bin/netns-pin-agent) on the
// network's stateDir as node node, with deploy/'s credentials and limits,
// and waits until its pod informer has synced. It stops it (SIGTERM, exit
// status 0 expected) when the test ends.
func (s *suite) startAgent(t *testing.T, sn *storageNet, node string) *nodeAgent {
	t.Helper()
	bin := filepath.Join(s.repo, "bin", "netns-pin-agent")
	require.NoError(t, host.CheckExecutable(bin), "run `make build`")
	kc, err := s.api.nodeAgentKubeconfig(s.repo, node)
	require.NoError(t, err)
	a := &nodeAgent{node: node, log: filepath.Join(sn.dir, "agent.log")}
	logf, err := os.Create(a.log)
	require.NoError(t, err)
	defer logf.Close()
	// As deploy/agent-daemonset.yaml runs it, on the host's own root (it
	// reads every store registered there, the network's among them) and a
	// shorter interval between reads of the stores (default 2 s).
	cmd := exec.Command(bin, "--host-root", "/", "--kubeconfig", kc,
		"--listen-address", "127.0.0.1:0", "--status-dir", "-", "--interval", "200ms")
	cmd.Env = append(os.Environ(), "NODE_NAME="+node)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			assert.NoError(t, err, "the agent exits 0 on SIGTERM")
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the agent did not stop on SIGTERM")
		}
		if t.Failed() {
			b, _ := os.ReadFile(a.log)
			t.Logf("agent log:\n%s", host.Tail(string(b), 60))
		}
	})
	require.True(t, host.Poll(readyTimeout, 50*time.Millisecond, func() bool {
		b, _ := os.ReadFile(a.log)
		return bytes.Contains(b, []byte(`"msg":"agent started"`))
	}), "the agent did not start:\n%s", func() string { b, _ := os.ReadFile(a.log); return string(b) }())
	return a
}

// startSweeper runs `netns-pinctl sweep` on the network as the installer
// DaemonSet's sweep container runs it (there every 10 s; here every 100 ms),
// until the test ends.
func (s *suite) startSweeper(t *testing.T, sn *storageNet) {
	t.Helper()
	nad := filepath.Join(sn.dir, "sweep-nad.json")
	require.NoError(t, os.WriteFile(nad, sn.conflist, 0o644))
	sweeper := exec.Command(s.ctl, "--conf", nad, "sweep", "--interval", "100ms")
	require.NoError(t, sweeper.Start())
	done := make(chan error, 1)
	go func() { done <- sweeper.Wait() }()
	t.Cleanup(func() {
		_ = sweeper.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			assert.NoError(t, err, "the sweeper exits 0 on SIGTERM")
		case <-time.After(10 * time.Second):
			_ = sweeper.Process.Kill()
			t.Error("the sweeper did not stop on SIGTERM")
		}
	})
}

// holderObject is a holder pod's object as the holder DaemonSet makes it
// (deploy/holder-daemonset.yaml): scheduled to node, with the finalizer.
func holderObject(ns, name, node string, annotations map[string]string) podObject {
	return podObject{ns: ns, name: name, node: node, annotations: annotations, finalizers: []string{agent.Finalizer}}
}

// runHolder creates the holder's object and starts its sandbox; the
// object is removed whatever the test left (finalizers lifted) when it
// ends.
func (s *suite) runHolder(t *testing.T, p podObject) *sandbox {
	t.Helper()
	t.Cleanup(func() { s.api.forgetPod(p.ns, p.name) }) // after the sandbox's cleanup
	uid, err := s.api.createPodObject(p)
	require.NoError(t, err)
	sb := &sandbox{s: s, ns: p.ns, name: p.name, uid: uid, annotation: p.annotations, ifname: storageIfName}
	r := s.startSandbox(t, sb)
	require.NoError(t, r.Err, "crictl runp %s/%s:\n%s", p.ns, p.name, r)
	return sb
}

// requireObject returns the pod's object, which must be there.
func (k *kubeAPI) requireObject(t *testing.T, sb *sandbox) *corev1.Pod {
	t.Helper()
	p, err := k.getPod(sb.ns, sb.name, sb.uid)
	require.NoError(t, err)
	require.NotNil(t, p, "the object of %s is gone", sb)
	return p
}

// waitEvent waits for the agent's Event with that reason on the pod and
// returns it.
func (k *kubeAPI) waitEvent(t *testing.T, sb *sandbox, reason string) corev1.Event {
	t.Helper()
	var got *corev1.Event
	ok := host.Poll(30*time.Second, 100*time.Millisecond, func() bool {
		evs, err := k.events(sb.ns, sb.uid)
		require.NoError(t, err)
		for i := range evs {
			if evs[i].Reason == reason {
				got = &evs[i]
				return true
			}
		}
		return false
	})
	require.True(t, ok, "no %s Event on %s", reason, sb)
	assert.Equal(t, "netns-pin-agent", got.Source.Component)
	t.Logf("%s: %s", reason, got.Message)
	return *got
}

// eventsByReason counts the agent's Event objects on the pod by reason,
// and the posts they stand for (an Event's count folds repeats). Multus
// posts its own (AddedInterface).
func (k *kubeAPI) eventsByReason(t *testing.T, sb *sandbox) (objects, posts map[string]int) {
	t.Helper()
	evs, err := k.events(sb.ns, sb.uid)
	require.NoError(t, err)
	objects, posts = map[string]int{}, map[string]int{}
	for _, e := range evs {
		if e.Source.Component != "netns-pin-agent" {
			continue
		}
		objects[e.Reason]++
		posts[e.Reason] += int(max(e.Count, 1))
	}
	return objects, posts
}

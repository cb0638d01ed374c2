package runtime

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/internal/host"
)

// deploy/validating-admission-policy.yaml and deploy/rbac.yaml in a real
// kube-apiserver (the suite's, v1.34), with the agent's ServiceAccount
// tokens as the API server issues them: one bound to an agent pod object
// on node A (what the kubelet projects into the agent's pod; it carries
// the node's name), one bound to nothing (no node claim). The agent of
// node A may add and lift netns-pin.io/pin on pods of node A in the holder
// namespaces, and nothing else: not on another node's pods, not another
// finalizer, not the pod's spec or labels, not without the node claim, not
// outside the holder namespaces, no delete. Other users are not limited.
// Needs no runtime and no root.
func TestAgentNodePolicy(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	k, err := requireAPI(repo)
	require.NoError(t, err, "kube-apiserver")
	nodeA, nodeB := "rt-policy-a-"+host.RandHex(4), "rt-policy-b-"+host.RandHex(4)
	kcA, err := k.nodeAgentKubeconfig(repo, nodeA)
	require.NoError(t, err)
	kcNone, err := k.agentKubeconfig("unbound-"+host.RandHex(4), "", "")
	require.NoError(t, err)

	const other = "example.com/keep"
	mine, theirs, outside := "policy-mine-"+host.RandHex(4), "policy-theirs-"+host.RandHex(4), "policy-outside-"+host.RandHex(4)
	for _, p := range []podObject{
		{ns: nadNamespace, name: mine, node: nodeA, finalizers: []string{agent.Finalizer, other}},
		{ns: nadNamespace, name: theirs, node: nodeB, finalizers: []string{agent.Finalizer}},
		{ns: "default", name: outside, node: nodeA, finalizers: []string{agent.Finalizer}},
	} {
		t.Cleanup(func() { k.forgetPod(p.ns, p.name) })
		_, err := k.createPodObject(p)
		require.NoError(t, err)
	}
	finalizers := func(ns, name string) []string {
		t.Helper()
		r := k.kubectl(nil, "-n", ns, "get", "pod", name, "-o", "jsonpath={.metadata.finalizers}")
		require.NoError(t, r.Err, "%s", r)
		return strings.Fields(strings.NewReplacer("[", " ", "]", " ", `"`, " ", ",", " ").Replace(r.Stdout))
	}
	patch := func(kc, ns, name, typ, body string) host.CmdResult {
		return k.kubectlAs(kc, nil, "-n", ns, "patch", "pod", name, "--type="+typ, "-p", body)
	}
	// The agent's own patches (agent/controller.go): strategic merge,
	// with the UID.
	lift := `{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + agent.Finalizer + `"]}}`
	add := `{"metadata":{"finalizers":["` + agent.Finalizer + `"]}}`
	denied := func(r host.CmdResult, why string) {
		t.Helper()
		require.Error(t, r.Err, "must be denied (%s):\n%s", why, r)
		assert.Contains(t, r.Stderr, "ValidatingAdmissionPolicy '"+agentPolicy+"'", "denied by the policy")
		assert.Contains(t, r.Stderr, why)
	}

	// Allowed: node A's agent lifts and adds netns-pin.io/pin on a pod of
	// node A; the other finalizer stays.
	r := patch(kcA, nadNamespace, mine, "strategic", lift)
	require.NoError(t, r.Err, "lift on its own node:\n%s", r)
	assert.Equal(t, []string{other}, finalizers(nadNamespace, mine))
	r = patch(kcA, nadNamespace, mine, "strategic", add)
	require.NoError(t, r.Err, "add on its own node:\n%s", r)
	assert.ElementsMatch(t, []string{agent.Finalizer, other}, finalizers(nadNamespace, mine))

	// Denied by the policy.
	denied(patch(kcA, nadNamespace, theirs, "strategic", lift), "may patch only pods of its node, not one of node "+nodeB)
	assert.Equal(t, []string{agent.Finalizer}, finalizers(nadNamespace, theirs))
	denied(patch(kcA, nadNamespace, mine, "json", `[{"op":"remove","path":"/metadata/finalizers"}]`), "changes no finalizer but "+agent.Finalizer)
	denied(patch(kcA, nadNamespace, mine, "strategic", `{"metadata":{"labels":{"app":"x"}}}`), "changes nothing of a pod but its "+agent.Finalizer+" finalizer")
	denied(patch(kcA, nadNamespace, mine, "strategic", `{"spec":{"containers":[{"name":"holder","image":"localhost/other:1"}]}}`),
		"changes nothing of a pod but its "+agent.Finalizer+" finalizer")
	assert.ElementsMatch(t, []string{agent.Finalizer, other}, finalizers(nadNamespace, mine))
	denied(patch(kcNone, nadNamespace, mine, "strategic", lift), "may patch only pods of its node")
	assert.ElementsMatch(t, []string{agent.Finalizer, other}, finalizers(nadNamespace, mine))

	// A holder may run in any namespace: the agent lifts on its own
	// node's pods in every one, and the policy covers every one.
	r = patch(kcA, "default", outside, "strategic", lift)
	require.NoError(t, r.Err, "a pod of its node in another namespace:\n%s", r)
	assert.Empty(t, finalizers("default", outside))
	r = patch(kcA, "default", outside, "strategic", add)
	require.NoError(t, r.Err, "%s", r)
	elsewhere := "policy-elsewhere-" + host.RandHex(4)
	t.Cleanup(func() { k.forgetPod("default", elsewhere) })
	_, err = k.createPodObject(podObject{ns: "default", name: elsewhere, node: nodeB, finalizers: []string{agent.Finalizer}})
	require.NoError(t, err)
	denied(patch(kcA, "default", elsewhere, "strategic", lift), "may patch only pods of its node, not one of node "+nodeB)

	// Denied by RBAC: any delete.
	r = k.kubectlAs(kcA, nil, "-n", nadNamespace, "delete", "pod", mine, "--wait=false")
	require.Error(t, r.Err, "delete:\n%s", r)
	assert.Contains(t, r.Stderr, `cannot delete resource "pods"`)

	// Other users are not limited by the policy.
	r = k.kubectl(nil, "-n", nadNamespace, "patch", "pod", theirs, "--type=strategic", "-p", lift)
	require.NoError(t, r.Err, "an administrator lifts it:\n%s", r)
	assert.Empty(t, finalizers(nadNamespace, theirs))
}

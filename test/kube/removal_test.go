package kube

// Removing netns-pin from a node in the documented order
// (docs/operating.md, "Removing netns-pin"): out of the
// NetworkAttachmentDefinition first, the binary left as a pass-through
// until no pod attached before that runs, then `netns-pinctl uninstall`.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/internal/host"
)

// multusCacheDir is the suite's Multus cniDir (hack/kube/up.sh): its
// delegates' libcni result caches and its own cache of each pod's
// delegates.
func (c *cluster) multusCacheDir() string {
	return filepath.Join(c.env["KUBE_DIR"], "lib", "cni", "multus")
}

// uninstallArgs is `netns-pinctl uninstall` on this node's folders.
func (c *cluster) uninstallArgs(extra ...string) []string {
	return append([]string{"--pin-dir", c.pinDir, "--state-dir", c.stateDir, "uninstall",
		"--cni-bin-dir", c.env["KUBE_CNI_BIN_DIR"], "--cache-dir", c.multusCacheDir()}, extra...)
}

// withoutNetnsPin is the NAD with netns-pin taken out of its chain.
func withoutNetnsPin(t *testing.T, n *storageNet) map[string]any {
	t.Helper()
	b, err := json.Marshal(n.object)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(b, &obj))
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(str(obj, "spec", "config")), &cfg))
	plugins := cfg["plugins"].([]any)
	require.Equal(t, "netns-pin", plugins[len(plugins)-1].(map[string]any)["type"])
	cfg["plugins"] = plugins[:len(plugins)-1]
	b, err = json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	obj["spec"].(map[string]any)["config"] = string(b)
	return obj
}

// uninstallPod is the removal as an operator runs it on a node without a
// shell: the installer image's netns-pinctl runs uninstall through
// host-exec in the host's mount namespace (as the sweep container runs
// sweep), on the host's PID namespace, with the sweep container's
// securityContext of deploy/installer-daemonset.yaml: not privileged
// (host-exec and pinDir's unmount need no more than its capabilities).
func (c *cluster) uninstallPod(t *testing.T, name string) map[string]any {
	t.Helper()
	sc := c.shippedSweepContainer(t)["securityContext"]
	require.NotNil(t, sc)
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "kube-system"},
		"spec": map[string]any{
			"restartPolicy": "Never", "hostPID": true, "automountServiceAccountToken": false,
			"containers": []any{map[string]any{
				"name": "uninstall", "image": c.env["KUBE_IMAGE"],
				"command":         append([]any{"/netns-pinctl", "host-exec", "--"}, anySlice(c.uninstallArgs())...),
				"securityContext": sc,
			}},
		},
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Scenario: a holder and a pod that is no holder run on a NAD with
// netns-pin. uninstall refuses, naming the holder's record and pin and both
// pods' cached attachments. netns-pin comes out of the NAD: a pod started
// after that is not attached through it, while the two attached before
// still are (their DEL runs netns-pin from Multus' cache), and `netns-pin
// list` and `uninstall --dry-run` show them. Once they are deleted (their
// DELs go through the binary still in place: the holder released, no
// FailedKillPod), the agent and the installer DaemonSets are deleted and
// uninstall, run from the image, removes the binary, pinDir and stateDir;
// the newer pod stops without netns-pin. hack/kube/up.sh installs it again.
func TestRemovalInTheDocumentedOrder(t *testing.T) {
	c := requireCluster(t)
	c.reinstallAtEnd(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	ho := h.waitHolder(t)
	att := ho.sb.id + "." + storageIf
	nadRef := `[{"name":"` + h.nad.name + `","namespace":"` + pinNamespace + `"}]`
	before := "app-" + host.RandHex(5)
	c.apply(t, c.appPod(pinNamespace, before, nadRef))
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "pod", before, "app="+before) })
	app := c.waitRunning(t, pinNamespace, "app="+before)
	appSB := c.sandboxOf(t, app)

	// 1. uninstall refuses while netns-pin serves pods, naming them
	v := host.RunCmd(cmdTimeout, nil, nil, c.ctl, "version")
	t.Logf("%s: %s", c.ctl, v.Stdout)
	r := host.RunCmd(cmdTimeout, nil, nil, c.ctl, c.uninstallArgs()...)
	require.Error(t, r.Err, "uninstall with a holder pinned: %s", r)
	t.Logf("netns-pinctl uninstall with pods attached:\n%s%s", r.Stdout, r.Stderr)
	assert.Contains(t, r.Stdout, "remains: record "+att+" pod "+ho.pod.String())
	assert.Contains(t, r.Stdout, "remains: pin "+att)
	assert.Contains(t, r.Stdout, "pod "+app.String()+" (", "the pod that is no holder is attached through netns-pin")
	assert.Contains(t, r.Stdout, "container "+appSB.id+" (Multus delegates)")
	assert.Contains(t, r.Stdout, "remains: finalizer "+pinFinalizer+" pod "+ho.pod.String()+" (",
		"the holder carries the finalizer, by the node agent's status")
	assert.Contains(t, r.Stderr, "refused")
	assert.FileExists(t, c.pinBin)

	// 2. out of the NAD: new pods are not attached through netns-pin
	c.apply(t, withoutNetnsPin(t, h.nad))
	after := "app-" + host.RandHex(5)
	c.apply(t, c.appPod(pinNamespace, after, nadRef))
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "pod", after, "app="+after) })
	newer := c.waitRunning(t, pinNamespace, "app="+after)
	newerSB := c.sandboxOf(t, newer)
	assert.NotEmpty(t, newer.storageIP(), "the newer pod is on the storage network")

	// the pods attached before still are: list and uninstall --dry-run
	list := hostList(t, c)
	assert.Contains(t, list, att, "netns-pinctl list shows the holder still pinned")
	r = host.RunCmd(cmdTimeout, nil, nil, c.ctl, c.uninstallArgs("--dry-run")...)
	require.Error(t, r.Err, "uninstall --dry-run with pods attached before the edit: %s", r)
	t.Logf("netns-pinctl uninstall --dry-run after the NAD edit:\n%s", r.Stdout)
	assert.Contains(t, r.Stdout, "pod "+ho.pod.String())
	assert.Contains(t, r.Stdout, "pod "+app.String()+" (")
	assert.NotContains(t, r.Stdout, newerSB.id, "a pod attached after the edit does not reference netns-pin")
	assert.NotContains(t, r.Stdout, newer.String())

	// 3. the pods attached before go; their DELs run the binary still there
	c.deleteAndWait(t, pinNamespace, "daemonset", h.name, h.selector)
	require.True(t, host.Poll(releaseTimeout, 500*time.Millisecond, func() bool { return c.unpinned(ho.sb) }),
		"the holder's pin and record are still there after its pod went")
	c.deleteAndWait(t, pinNamespace, "pod", before, "app="+before)
	for _, p := range []pod{ho.pod, app} {
		for _, e := range c.eventsOf(t, p, "FailedKillPod") {
			assert.NotContains(t, e.Message, "failed to find plugin", "the DEL of %s found netns-pin", p)
		}
	}
	// the agent's next pass (every 1 s here) drops the holder from its status
	require.True(t, host.Poll(30*time.Second, 500*time.Millisecond, func() bool {
		r = host.RunCmd(cmdTimeout, nil, nil, c.ctl, c.uninstallArgs("--dry-run")...)
		return r.Err == nil
	}), "uninstall --dry-run once the pods attached before are gone: %s", r)
	assert.Contains(t, r.Stdout, "would remove "+c.pinBin+"\n")

	// 4. at a count of 0 (docs/operating.md, step 3), the DaemonSets, then
	// uninstall from the image
	require.True(t, host.Poll(time.Minute, 500*time.Millisecond, func() bool { return c.guardCount(t) == "0" }),
		"the controller's count in the removal guard: %s", c.guardCount(t))
	for _, ds := range []string{"netns-pin-agent", "netns-pin-installer"} {
		c.deleteAndWait(t, "kube-system", "daemonset", ds, "app.kubernetes.io/name="+ds)
	}
	name := "netns-pin-uninstall-" + host.RandHex(5)
	c.apply(t, c.uninstallPod(t, name))
	t.Cleanup(func() { c.kubectl("-n", "kube-system", "delete", "pod", name, "--ignore-not-found", "--wait=false") })
	var phase string
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		phase = strings.TrimSpace(c.mustKubectl(t, "-n", "kube-system", "get", "pod", name, "-o", "jsonpath={.status.phase}"))
		return phase == "Succeeded" || phase == "Failed"
	}), "the uninstall pod did not finish (phase %q)", phase)
	logs := c.mustKubectl(t, "-n", "kube-system", "logs", name)
	t.Logf("netns-pinctl uninstall (pod %s, %s):\n%s", name, phase, logs)
	require.Equal(t, "Succeeded", phase)
	for _, p := range []string{c.pinBin, c.stateDir, c.pinDir} {
		assert.Contains(t, logs, "removed "+p+"\n")
		_, err := os.Lstat(p)
		assert.True(t, os.IsNotExist(err), "%s is still there: %v", p, err)
	}
	assert.FileExists(t, filepath.Join(c.env["KUBE_CNI_BIN_DIR"], "macvlan"), "the other plugins stay")

	// 5. the newer pod stops without netns-pin
	c.deleteAndWait(t, pinNamespace, "pod", after, "app="+after)
	assert.Empty(t, c.eventsOf(t, newer, "FailedKillPod"), "the pod attached after the edit stops without netns-pin")
}

// reinstallAtEnd installs netns-pin again (hack/kube/up.sh) when the
// test that removes it ends.
func (c *cluster) reinstallAtEnd(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		r := host.RunCmd(10*time.Minute, nil, nil, filepath.Join(c.repo, "hack", "kube", "up.sh"))
		require.NoError(t, r.Err, "hack/kube/up.sh after the removal:\n%s", host.Tail(r.Stderr, 30))
		assert.FileExists(t, c.pinBin, "netns-pin installed again")
	})
}

// podsWithFinalizer lists the pods of the cluster that carry the
// finalizer, as docs/operating.md's removal step 3 looks for them.
func (c *cluster) podsWithFinalizer(t *testing.T) []string {
	t.Helper()
	var list struct {
		Items []pod `json:"items"`
	}
	c.getJSON(t, &list, "get", "pods", "-A")
	var out []string
	for _, p := range list.Items {
		if slices.Contains(p.Metadata.Finalizers, pinFinalizer) {
			out = append(out, p.String()+" on "+p.Spec.NodeName)
		}
	}
	return out
}

// Scenario: the documented removal on two nodes while node 2's holder has
// a client. netns-pin out of the NAD, the finalizer out of the holder
// template (the DaemonSet rolls: node 1's old holder goes, node 2's
// drains); node 2's uninstall refuses, naming that pod; its client leaves,
// it goes, no pod carries the finalizer any more; the agent, installer and
// controller deleted as documented, uninstall succeeds on both nodes, and
// no pod is left Terminating.
func TestRemovalOnTwoNodes(t *testing.T) {
	c := requireCluster(t)
	c.reinstallAtEnd(t)
	n2 := c.addNode(t, 2)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	h2 := h.on(n2)
	old1, old2 := h.waitHolder(t), h2.waitHolder(t)
	cl := startNodeClient(t, n2, n2.linkOf(h.cluster))
	require.Equal(t, old2.sb.netns, cl.netns)
	onNode2 := func(args ...string) host.CmdResult {
		return c.nodeScript(cmdTimeout, append([]string{"exec", "2", c.ctl}, args...)...)
	}

	// steps 1 and 3: out of the NAD, the finalizer out of the template
	c.apply(t, withoutNetnsPin(t, h.nad))
	c.mustKubectl(t, "-n", pinNamespace, "patch", "daemonset", h.name, "--type=json",
		"-p", `[{"op":"remove","path":"/spec/template/metadata/finalizers"}]`)
	c.requireReleased(t, h.selector, old1.pod, old1.sb, 500*time.Millisecond, "node 1's old holder (no client) did not go")
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := n2.readRecord(t, old2.sb)
		return rec != nil && rec.State == "draining"
	}), "node 2's old holder did not turn draining")
	assert.Equal(t, []string{old2.pod.String() + " on " + n2.nodeName}, c.podsWithFinalizer(t))
	var r host.CmdResult
	require.True(t, host.Poll(30*time.Second, 500*time.Millisecond, func() bool {
		r = onNode2(c.uninstallArgs("--dry-run")...)
		return strings.Contains(r.Stdout, "remains: finalizer "+pinFinalizer+" pod "+old2.pod.String()+" (")
	}), "uninstall on node 2 does not name the pod that carries the finalizer: %s", r)
	require.Error(t, r.Err)
	t.Logf("netns-pinctl uninstall --dry-run on node 2 while its old holder drains:\n%s%s", r.Stdout, r.Stderr)

	cl.stop(t)
	n2.requireReleased(t, h.selector, old2.pod, old2.sb, 500*time.Millisecond, "node 2's old holder did not go after its client left")
	require.True(t, host.Poll(podTimeout, time.Second, func() bool { return len(c.podsWithFinalizer(t)) == 0 }),
		"pods still carry the finalizer: %v", c.podsWithFinalizer(t))
	require.True(t, host.Poll(podTimeout, 200*time.Millisecond, func() bool { return c.guardCount(t) == "0" }),
		"the controller's count of pods carrying the finalizer is %q, not 0", c.guardCount(t))

	// step 3's deletes, then uninstall on each node
	c.mustKubectl(t, "delete", "--wait=true", "-f", filepath.Join(c.repo, "deploy", "agent-daemonset.yaml"),
		"-f", filepath.Join(c.repo, "deploy", "installer-daemonset.yaml"), "-f", filepath.Join(c.repo, "deploy", "controller.yaml"))
	require.True(t, host.Poll(podTimeout, time.Second, func() bool {
		return len(c.allPods(t, agentNS, controller.AgentLabel+"="+controller.AgentName)) == 0
	}), "agent pods left")
	require.True(t, host.Poll(30*time.Second, 500*time.Millisecond, func() bool {
		r = onNode2(c.uninstallArgs()...)
		return r.Err == nil
	}), "uninstall on node 2: %s", r)
	t.Logf("netns-pinctl uninstall on node 2:\n%s", r.Stdout)
	r = host.RunCmd(cmdTimeout, nil, nil, c.ctl, c.uninstallArgs()...)
	require.NoError(t, r.Err, "uninstall on node 1: %s", r)
	t.Logf("netns-pinctl uninstall on node 1:\n%s", r.Stdout)
	assert.NoFileExists(t, c.pinBin)
	assert.NoFileExists(t, n2.hostPath(c.pinBin))

	// no pod stuck: the holders run, none is being deleted
	for _, p := range c.allPods(t, pinNamespace, h.selector) {
		assert.Nil(t, p.Metadata.DeletionTimestamp, "%s on %s is left Terminating", p, p.Spec.NodeName)
	}
	assert.Empty(t, c.podsWithFinalizer(t))
}

// hostList is `netns-pinctl list` by the installed binary on this node's
// folders (a person's table).
func hostList(t *testing.T, c *cluster) string {
	t.Helper()
	r := c.pinCLI("list")
	require.NoError(t, r.Err, "netns-pinctl list: %s", r)
	t.Logf("netns-pinctl list:\n%s", r.Stdout)
	return r.Stdout
}

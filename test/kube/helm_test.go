package kube

// netns-pin installed the way README.md's "Install" says, with Helm: the
// packaged chart pushed to a registry and installed from it, the image
// pulled by the kubelet from that registry; upgraded, rolled back and
// uninstalled while a holder is pinned and a client uses it.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/deploy"
	"github.com/netns-pin/netns-pin/internal/host"
)

// helmRelease is the release's name and namespace, README.md's.
const (
	helmRelease   = "netns-pin"
	helmNamespace = "kube-system"
)

// helmTimeout bounds one helm command (an install waits for nothing; an
// uninstall waits for its pre-delete hook's Job).
const helmTimeout = 5 * time.Minute

// helm runs the chart's helm (make tools) on the suite's cluster, with its
// own folders, and the suite's post-renderer within reach
// (hack/kube/helm-plugins).
func (c *cluster) helm(t *testing.T, args ...string) host.CmdResult {
	t.Helper()
	home := filepath.Join(c.env["KUBE_DIR"], "helm")
	env := append(os.Environ(), "KUBECONFIG="+c.kubeconfig,
		"HELM_PLUGINS="+filepath.Join(c.repo, "hack", "kube", "helm-plugins"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	r := host.RunCmd(helmTimeout, env, nil, deploy.HelmPath(c.repo), args...)
	out := r.Stdout
	if args[0] == "template" || args[0] == "status" {
		out = "" // the manifests; what the test reads of them it says
	}
	t.Logf("helm %s: %v\n%s%s", strings.Join(args, " "), r.Err, host.Tail(out, 40), host.Tail(r.Stderr, 40))
	return r
}

// nodeValues are what the suite's node needs beyond README.md's command:
// its folders, one controller replica (its metrics port is a host port
// here, hack/kube/up.sh), and the post-renderer that gives netns-pin's
// pods the host's network and the API's address, as deploy/'s are given
// them (hack/kube/up.sh node_patch).
func (c *cluster) nodeValues() []string {
	return []string{
		"--set", "cniBinDir=" + c.env["KUBE_CNI_BIN_DIR"],
		"--set", "cniConfDir=" + filepath.Join(c.env["KUBE_DIR"], "cni", "net.d"),
		"--set", "kubeletDir=" + c.env["KUBELET_DIR"],
		"--set", "controller.replicas=1",
		"--post-renderer", "netns-pin-node-patch",
	}
}

// pushImage copies an OCI archive of make image to the node's registry
// as repository:tag, as README.md's install pushes it.
func (c *cluster) pushImage(t *testing.T, archive, ref string) {
	t.Helper()
	r := host.RunCmd(helmTimeout, nil, nil, "skopeo", "copy", "--all", "--dest-tls-verify=false",
		"oci-archive:"+archive, "docker://"+ref)
	require.NoError(t, r.Err, "push %s: %s", ref, r)
}

// forgetImage removes ref from the node's image store, so that the next
// pod that names it pulls it.
func (c *cluster) forgetImage(t *testing.T, ref string) {
	t.Helper()
	if r := c.crictlRun("inspecti", ref); r.Err == nil {
		r = c.crictlRun("rmi", ref)
		require.NoError(t, r.Err, "crictl rmi %s: %s", ref, r)
	}
}

// pulled reports whether the kubelet pulled ref for a pod of
// kube-system since start (an Event "Successfully pulled image").
func (c *cluster) pulled(t *testing.T, ref string, since time.Time) bool {
	t.Helper()
	var list struct {
		Items []struct {
			Message       string     `json:"message"`
			LastTimestamp *time.Time `json:"lastTimestamp"`
			EventTime     *time.Time `json:"eventTime"`
		} `json:"items"`
	}
	c.getJSON(t, &list, "-n", helmNamespace, "get", "events", "--field-selector", "reason=Pulled")
	for _, e := range list.Items {
		at := e.LastTimestamp
		if at == nil {
			at = e.EventTime
		}
		if strings.Contains(e.Message, `Successfully pulled image "`+ref+`"`) && at != nil && !at.Before(since.Truncate(time.Second)) {
			return true
		}
	}
	return false
}

// rolledOut waits for netns-pin's three workloads to run the image ref.
func (c *cluster) rolledOut(t *testing.T, ref string) {
	t.Helper()
	for _, w := range []string{"daemonset/netns-pin-installer", "daemonset/netns-pin-agent", "deployment/netns-pin-controller"} {
		c.mustKubectl(t, "-n", helmNamespace, "rollout", "status", w, "--timeout=180s")
		img := c.mustKubectl(t, "-n", helmNamespace, "get", w, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		assert.Equal(t, ref, strings.TrimSpace(img), "%s's image", w)
	}
}

// removeKustomizeInstall deletes what hack/kube/up.sh applied of deploy/
// (no pod carries the finalizer: the removal guard lets it go), leaving
// the node's binary and store: a node that moves from kustomize to Helm.
func (c *cluster) removeKustomizeInstall(t *testing.T) {
	t.Helper()
	require.Empty(t, c.podsWithFinalizer(t), "a pod carries the finalizer before the chart scenario")
	require.True(t, host.Poll(time.Minute, 500*time.Millisecond, func() bool { return c.guardCount(t) == "0" }),
		"the controller has not counted 0 pods carrying the finalizer: %s", c.guardCount(t))
	args := []string{"delete", "--ignore-not-found", "--wait=true", "--timeout=120s"}
	for _, f := range []string{"controller.yaml", "agent-daemonset.yaml", "installer-daemonset.yaml", "removal-guard.yaml",
		"controller-admission-policy.yaml", "validating-admission-policy.yaml", "controller-rbac.yaml", "rbac.yaml"} {
		args = append(args, "-f", filepath.Join(c.repo, "deploy", f))
	}
	c.mustKubectl(t, args...)
	for _, name := range []string{"netns-pin-installer", "netns-pin-agent", "netns-pin-controller"} {
		ok := host.Poll(podTimeout, 500*time.Millisecond, func() bool {
			return len(c.allPods(t, helmNamespace, "app.kubernetes.io/name="+name)) == 0
		})
		require.True(t, ok, "pods of %s still there", name)
	}
}

// Scenario: the node moves from deploy/ to the chart. The packaged chart
// (make chart) is pushed to the node's registry with helm push and make
// image's archive with skopeo, as CHANGELOG.md's release procedure pushes
// both; README.md's helm install installs it from there and the kubelet
// pulls the image. A holder is pinned, a client uses its netns and pings
// across the storage network throughout. helm upgrade to a new image and
// a changed value, then helm rollback: each time the three workloads roll,
// and the pin, the link and the finalizer stay, the client's pings all
// answered. helm uninstall is refused by the pre-delete hook, which names
// the holder, and nothing of the release is deleted (Helm records it as
// uninstalling; a rollback to its revision puts it back); once the holder is
// gone (its client left) helm uninstall removes the release. The chart
// rendered with its default values and with each example applies on the
// API server (server-side dry run).
func TestHelmLifecycleWithLivePins(t *testing.T) {
	c := requireCluster(t)
	if c.env["KUBE_RUNTIME"] != "containerd" {
		t.Fatalf("the chart scenario pulls from the node's registry through containerd's hosts.toml; this node runs %s", c.env["KUBE_RUNTIME"])
	}
	registry := c.env["KUBE_REGISTRY"]
	require.NotEmpty(t, registry, "hack/kube/up.sh names the node's registry")

	// 0. the chart's renderings on the real API server
	tmp := t.TempDir()
	r := host.RunCmd(helmTimeout, append(os.Environ(), "CHART_DIR="+tmp), nil, filepath.Join(c.repo, "hack", "chart.sh"))
	require.NoError(t, r.Err, "make chart: %s", r)
	tgz := strings.Fields(r.Stdout)[0]
	examples, err := filepath.Glob(filepath.Join(c.repo, "deploy", "chart", "examples", "*.yaml"))
	require.NoError(t, err)
	for _, values := range append([]string{""}, examples...) {
		args := []string{"template", helmRelease, tgz, "--namespace", helmNamespace}
		if values != "" {
			args = append(args, "--values", values)
		}
		rendered := c.helm(t, args...)
		require.NoError(t, rendered.Err)
		// the namespaces the values name are the user's (ceph-csi's, Rook's)
		for _, m := range regexp.MustCompile(`(?m)^  namespace: (\S+)$`).FindAllStringSubmatch(rendered.Stdout, -1) {
			if c.object(t, "namespace/"+m[1]) == nil {
				c.ensureNamespace(t, m[1])
				t.Cleanup(func() { c.kubectl("delete", "namespace", m[1], "--wait=false") })
			}
		}
		a := c.kubectlIn([]byte(rendered.Stdout), "apply", "--dry-run=server", "-f", "-")
		require.NoError(t, a.Err, "helm template %s | kubectl apply --dry-run=server: %s", filepath.Base(values), a)
		assert.Contains(t, a.Stdout, "(server dry run)")
	}

	// 1. from deploy/ to the chart; hack/kube/up.sh puts deploy/ back at
	// the end, after the release is gone
	c.reinstallAtEnd(t)
	c.removeKustomizeInstall(t)
	installed := false
	t.Cleanup(func() {
		if installed {
			c.helm(t, "uninstall", helmRelease, "--namespace", helmNamespace, "--no-hooks", "--wait")
		}
	})

	// 2. the release procedure's pushes, README.md's install
	var chart struct{ Version, AppVersion string }
	show := c.helm(t, "show", "chart", tgz)
	require.NoError(t, show.Err)
	for _, line := range strings.Split(show.Stdout, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "version":
			chart.Version = v
		case "appVersion":
			chart.AppVersion = v
		}
	}
	require.NotEmpty(t, chart.Version)
	require.NotEmpty(t, chart.AppVersion)
	require.NoError(t, c.helm(t, "push", tgz, "oci://"+registry+"/charts", "--plain-http").Err)
	repo := registry + "/netns-pin"
	first := repo + ":" + chart.AppVersion
	c.pushImage(t, c.env["KUBE_IMAGE_ARCHIVE"], first)
	c.forgetImage(t, first)
	start := time.Now()
	install := append([]string{"install", helmRelease, "oci://" + registry + "/charts/netns-pin", "--version", chart.Version,
		"--plain-http", "--namespace", helmNamespace, "--set", "image.repository=" + repo}, c.nodeValues()...)
	require.NoError(t, c.helm(t, install...).Err, "README.md's helm install")
	installed = true
	c.rolledOut(t, first)
	assert.True(t, c.pulled(t, first, start), "the kubelet pulled %s from the node's registry", first)
	c.requireInstalledBinary(t)

	// 3. a holder pinned, a client in its netns, pings across the network
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	ho := h.waitHolder(t)
	cl := startClient(t, h.link)
	nadRef := `[{"name":"` + h.nad.name + `","namespace":"` + pinNamespace + `"}]`
	peer := "app-" + host.RandHex(5)
	c.apply(t, c.appPod(pinNamespace, peer, nadRef))
	t.Cleanup(func() { c.deleteAndWait(t, pinNamespace, "pod", peer, "app="+peer) })
	peerPod := c.waitRunning(t, pinNamespace, "app="+peer)
	peerSB := c.sandboxOf(t, peerPod)
	loop := startPingLoop(h.link, peerPod.storageIP(), peerSB.netnsPath, ho.ip)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			loop.stop()
		}
	})
	kept := func(what string) {
		t.Helper()
		c.requirePinned(t, ho.pod, ho.sb, h.cluster, "active")
		h.requireLinkTo(t, ho)
		assert.Contains(t, c.podsWithFinalizer(t), ho.pod.String()+" on "+ho.pod.Spec.NodeName, "the holder keeps the finalizer %s", what)
	}
	kept("after the install")

	// 4. helm upgrade: a new image (the same binaries, another build time:
	// another digest) and a changed value
	epoch := strings.TrimSpace(host.RunCmd(cmdTimeout, nil, nil, filepath.Join(c.repo, "hack", "version.sh"), "epoch").Stdout)
	e, err := strconv.ParseInt(epoch, 10, 64)
	require.NoError(t, err, "hack/version.sh epoch: %q", epoch)
	imgDir := filepath.Join(tmp, "image")
	r = host.RunCmd(10*time.Minute, append(os.Environ(), "IMAGE_DIR="+imgDir, "IMAGE_PLATFORMS=linux/amd64",
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(e+1, 10)), nil, filepath.Join(c.repo, "hack", "image.sh"))
	require.NoError(t, r.Err, "the upgrade's image: %s", r)
	second := repo + ":" + chart.AppVersion + "-upgrade"
	c.pushImage(t, filepath.Join(imgDir, "netns-pin.oci.tar"), second)
	c.forgetImage(t, second)
	start = time.Now()
	upgrade := append([]string{"upgrade", helmRelease, "oci://" + registry + "/charts/netns-pin", "--version", chart.Version,
		"--plain-http", "--namespace", helmNamespace, "--reuse-values", "--set", "image.tag=" + chart.AppVersion + "-upgrade",
		"--set", "controller.quarantine=45s"}, c.nodeValues()...)
	require.NoError(t, c.helm(t, upgrade...).Err, "helm upgrade with a holder pinned")
	c.rolledOut(t, second)
	assert.True(t, c.pulled(t, second, start), "the kubelet pulled %s", second)
	args := c.mustKubectl(t, "-n", helmNamespace, "get", "deployment/netns-pin-controller", "-o", "jsonpath={.spec.template.spec.containers[0].command}")
	assert.Contains(t, args, "--quarantine=45s", "the changed value is in force")
	kept("after the upgrade")

	// 5. helm rollback to the install. Its manifest has the guard's count
	// as the install rendered it ("-1", not counted yet), which the
	// controller's count replaced: Helm's server-side apply refuses to
	// overwrite another manager's field without --force-conflicts. The
	// controller watches the policy and writes the count back at once.
	require.True(t, host.Poll(time.Minute, 500*time.Millisecond, func() bool { return c.guardCount(t) == "1" }),
		"the controller's count before the rollback: %s", c.guardCount(t))
	require.NoError(t, c.helm(t, "rollback", helmRelease, "1", "--namespace", helmNamespace, "--force-conflicts").Err,
		"helm rollback with a holder pinned")
	counted := time.Now()
	require.True(t, host.Poll(10*time.Second, 200*time.Millisecond, func() bool { return c.guardCount(t) == "1" }),
		"the controller did not write the count back after the rollback: %s", c.guardCount(t))
	t.Logf("the guard's count back %s after the rollback", time.Since(counted).Round(time.Millisecond))
	c.rolledOut(t, first)
	args = c.mustKubectl(t, "-n", helmNamespace, "get", "deployment/netns-pin-controller", "-o", "jsonpath={.spec.template.spec.containers[0].command}")
	assert.Contains(t, args, "--quarantine=40s", "the install's value again")
	kept("after the rollback")
	c.requireInstalledBinary(t)

	// 6. helm uninstall while the holder carries the finalizer: refused
	// before anything is deleted, naming the holder
	un := c.helm(t, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "3m")
	require.Error(t, un.Err, "helm uninstall with a holder pinned")
	out := un.Stdout + un.Stderr
	assert.Contains(t, out, "refusing the uninstall")
	assert.Contains(t, out, ho.pod.String()+" on node "+ho.pod.Spec.NodeName, "the refusal names the holder")
	for _, o := range append([]string{"daemonset/netns-pin-installer", "daemonset/netns-pin-agent", "deployment/netns-pin-controller",
		"serviceaccount/netns-pin-agent", "clusterrole/netns-pin-agent"}, prefixed("validatingadmissionpolicy/", guardPolicies)...) {
		meta := c.object(t, o)
		if assert.NotNil(t, meta, "%s is still there after the refused uninstall", o) {
			assert.Nil(t, meta.Metadata.DeletionTimestamp, "%s is not being deleted", o)
		}
	}
	// Helm records the release as uninstalling (docs/operating.md says
	// so, and how to put it back: a rollback to its revision)
	assert.Equal(t, "uninstalling", c.helmStatus(t), "the release after the refused uninstall")
	require.NoError(t, c.helm(t, "rollback", helmRelease, "3", "--namespace", helmNamespace, "--force-conflicts").Err)
	assert.Equal(t, "deployed", c.helmStatus(t), "the release rolled back to its revision")
	kept("after the refused uninstall")
	c.rolledOut(t, first)
	okPings, failed, failures := loop.stop()
	stopped = true
	t.Logf("pings across the storage network: %d answered, %d failed", okPings, failed)
	assert.Zero(t, failed, "the client's I/O across install, upgrade, rollback and the refused uninstall: %v", failures)
	assert.Positive(t, okPings)

	// 7. the documented order: the client leaves, the holder goes, then
	// the release
	cl.stop(t)
	c.deleteAndWait(t, pinNamespace, "daemonset", h.name, h.selector)
	require.True(t, host.Poll(releaseTimeout, 500*time.Millisecond, func() bool { return c.unpinned(ho.sb) }),
		"the holder's pin is still there after its client left")
	require.True(t, host.Poll(releaseTimeout, 500*time.Millisecond, func() bool { return len(c.podsWithFinalizer(t)) == 0 }),
		"pods carry the finalizer: %v", c.podsWithFinalizer(t))
	un = c.helm(t, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "3m")
	require.NoError(t, un.Err, "helm uninstall once no pod carries the finalizer")
	installed = false
	for _, o := range append([]string{"daemonset/netns-pin-installer", "daemonset/netns-pin-agent", "deployment/netns-pin-controller",
		"job/netns-pin-uninstall-check", "serviceaccount/netns-pin-uninstall-check"}, prefixed("validatingadmissionpolicy/", guardPolicies)...) {
		assert.Nil(t, c.object(t, o), "%s is gone with the release", o)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	c.getJSON(t, &list, "get", "secrets", "-n", helmNamespace, "-l", "owner=helm,name="+helmRelease)
	assert.Empty(t, list.Items, "helm's record of the release is gone")
}

// helmStatus is the release's status as Helm records it.
func (c *cluster) helmStatus(t *testing.T) string {
	t.Helper()
	r := c.helm(t, "status", helmRelease, "--namespace", helmNamespace, "-o", "json")
	require.NoError(t, r.Err)
	var status struct {
		Info struct{ Status string } `json:"info"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &status), "helm status -o json: %s", r.Stdout)
	return status.Info.Status
}

// requireInstalledBinary: the plugin in the node's CNI bin folder is make
// image's.
func (c *cluster) requireInstalledBinary(t *testing.T) {
	t.Helper()
	installed, err := os.ReadFile(c.pinBin)
	require.NoError(t, err)
	built, err := os.ReadFile(filepath.Join(c.env["KUBE_IMAGE_BIN_DIR"], "netns-pin"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(built, installed), "the installer put make image's netns-pin in place")
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

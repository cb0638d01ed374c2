package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/deploy"
)

// object is one Kubernetes object from a manifest.
type object struct {
	file string
	raw  map[string]any
}

func (o object) kind() string { return str(o.raw, "kind") }
func (o object) name() string { return str(o.raw, "metadata", "name") }
func (o object) namespace() string {
	return str(o.raw, "metadata", "namespace")
}
func (o object) String() string {
	return o.file + ": " + o.kind() + " " + o.namespace() + "/" + o.name()
}

// get and str read a field of an object (deploy.Field, deploy.String).
var get, str = deploy.Field, deploy.String

// loadManifests decodes every YAML document of every *.yaml here.
func loadManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var objs []object
	for _, f := range files {
		if f == "kustomization.yaml" {
			continue // no Kubernetes object (TestKustomization)
		}
		docs, err := deploy.Objects(f)
		require.NoError(t, err)
		for _, doc := range docs {
			o := object{file: f, raw: doc}
			require.NotEmpty(t, str(doc, "apiVersion"), "%s: object without apiVersion", f)
			require.NotEmpty(t, o.kind(), "%s: object without kind", f)
			require.NotEmpty(t, o.name(), "%s: object without metadata.name", f)
			if !clusterScoped[o.kind()] {
				require.NotEmpty(t, o.namespace(), "%s: %s without metadata.namespace", f, o.kind())
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// clusterScoped are the kinds of deploy/ that have no namespace.
var clusterScoped = map[string]bool{"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "ClusterRole": true, "ClusterRoleBinding": true}

// inFile is the object of kind ("": of any kind) in the manifest file; the
// test fails when there is none.
func inFile(t *testing.T, objs []object, kind, file string) object {
	t.Helper()
	for _, o := range objs {
		if o.file == file && (kind == "" || o.kind() == kind) {
			return o
		}
	}
	require.FailNow(t, "no object of kind "+kind+" in "+file)
	return object{}
}

func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// nadConfig runs a NetworkAttachmentDefinition through netns-pin's own
// parsing, as `netns-pinctl --conf` and the plugin do: the NAD as JSON to
// conf.PluginEntry, then conf.Parse. extra is merged into the entry first
// (Multus' injection of cni-args into args.cni).
func nadConfig(t *testing.T, nad object, extra map[string]any) *conf.Config {
	t.Helper()
	js, err := json.Marshal(nad.raw)
	require.NoError(t, err)
	entry, err := conf.PluginEntry(js)
	require.NoError(t, err, "%s", nad)
	if extra != nil {
		var m map[string]any
		require.NoError(t, json.Unmarshal(entry, &m))
		for k, v := range extra {
			m[k] = v
		}
		entry, err = json.Marshal(m)
		require.NoError(t, err)
	}
	c, err := conf.Parse(entry)
	require.NoError(t, err, "%s: netns-pin rejects its configuration", nad)
	return c
}

func TestManifestsParse(t *testing.T) {
	objs := loadManifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind()]++
	}
	assert.Equal(t, 4, kinds["DaemonSet"], "installer, agent and holder DaemonSets, the Multus thick patch")
	assert.Equal(t, 2, kinds["ServiceAccount"], "the agent's and the controller's")
	assert.Equal(t, 1, kinds["Role"], "the controller's Lease; the agent's rights are one ClusterRole: holders run in any namespace")
	assert.Equal(t, 2, kinds["ClusterRole"], "the agent's and the controller's")
	assert.Equal(t, 2, kinds["ClusterRoleBinding"], "the agent's and the controller's")
	assert.Equal(t, 1, kinds["Deployment"], "the controller")
	assert.Equal(t, 3, kinds["ValidatingAdmissionPolicy"], "the agent's own node, the controller's lift only, the removal guard")
	assert.Equal(t, 2, kinds["NetworkAttachmentDefinition"], "ceph-public and its Rook-links variant")
	assert.Equal(t, 1, kinds["ConfigMap"], "ceph-csi config")
}

// Every CNI configuration in the manifests is one netns-pin accepts, with
// netns-pin last in the chain.
func TestNetworkAttachmentDefinitionsValidate(t *testing.T) {
	for _, nad := range byKind(loadManifests(t), "NetworkAttachmentDefinition") {
		t.Run(nad.file, func(t *testing.T) {
			assert.Equal(t, "k8s.cni.cncf.io/v1", str(nad.raw, "apiVersion"))
			var list struct {
				CNIVersion string           `json:"cniVersion"`
				Name       string           `json:"name"`
				Plugins    []map[string]any `json:"plugins"`
			}
			require.NoError(t, json.Unmarshal([]byte(str(nad.raw, "spec", "config")), &list), "spec.config is not JSON")
			assert.Equal(t, nad.name(), list.Name, "the conflist's name is the NAD's")
			require.NotEmpty(t, list.Plugins)
			assert.Equal(t, "netns-pin", list.Plugins[len(list.Plugins)-1]["type"], "netns-pin must be the last plugin")
			c := nadConfig(t, nad, nil)
			assert.Equal(t, conf.DefaultPinDir, c.PinDir)
			assert.Equal(t, conf.DefaultStateDir, c.StateDir)
			assert.Contains(t, c.CNIArgsNamespaces, nad.namespace())
		})
	}
}

// The Rook-compatible variant keeps Rook's holder paths up to date.
func TestRookLinks(t *testing.T) {
	nad := inFile(t, loadManifests(t), "NetworkAttachmentDefinition", "network-attachment-definition-rook-links.yaml")
	c := nadConfig(t, nad, nil)
	cl, err := conf.ParseCluster("rook-ceph/my-cluster")
	require.NoError(t, err)
	links, err := c.LinkPaths(cl)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"/var/lib/kubelet/plugins/netns-pin/rook-ceph/my-cluster.net",
		"/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/rook-ceph.net.ns",
		"/var/lib/kubelet/plugins/rook-ceph.cephfs.csi.ceph.com/rook-ceph.net.ns",
	}, links)
}

func podSpec(ds object) map[string]any {
	spec, _ := get(ds.raw, "spec", "template", "spec").(map[string]any)
	return spec
}

func containersOf(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := spec[key].([]any)
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// The holder claims its cluster through the network selection annotation;
// run that claim through netns-pin as Multus would deliver it, and check the
// DaemonSet is unprivileged and rolls surge-first.
func TestHolderDaemonSet(t *testing.T) {
	objs := loadManifests(t)
	ds := inFile(t, objs, "DaemonSet", "holder-daemonset.yaml")
	assert.Equal(t, "RollingUpdate", str(ds.raw, "spec", "updateStrategy", "type"))
	assert.Equal(t, 1, get(ds.raw, "spec", "updateStrategy", "rollingUpdate", "maxSurge"))
	assert.Equal(t, 0, get(ds.raw, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"))

	spec := podSpec(ds)
	require.NotNil(t, spec)
	for _, k := range []string{"hostPID", "hostNetwork", "hostIPC"} {
		assert.NotEqual(t, true, spec[k], "holder must not use %s", k)
	}
	assert.Nil(t, spec["volumes"], "the holder needs no volumes")
	cs := containersOf(spec)
	require.Len(t, cs, 1)
	assert.Contains(t, str(cs[0], "image"), "pause")
	assert.NotEqual(t, true, get(cs[0], "securityContext", "privileged"))
	assert.Equal(t, false, get(cs[0], "securityContext", "allowPrivilegeEscalation"))
	assert.Equal(t, []any{"ALL"}, get(cs[0], "securityContext", "capabilities", "drop"))
	assert.Equal(t, true, get(spec, "securityContext", "runAsNonRoot"))
	assert.Equal(t, []any{"netns-pin.io/pin"}, get(ds.raw, "spec", "template", "metadata", "finalizers"),
		"the object stays until the agent sees the pin released")

	// The annotation, parsed as Multus does (a JSON list of selection
	// elements), names the NAD and claims the cluster.
	annot := str(ds.raw, "spec", "template", "metadata", "annotations", "k8s.v1.cni.cncf.io/networks")
	var elems []struct {
		Name      string         `json:"name"`
		Namespace string         `json:"namespace"`
		CNIArgs   map[string]any `json:"cni-args"`
	}
	require.NoError(t, json.Unmarshal([]byte(annot), &elems), "network selection annotation")
	require.Len(t, elems, 1)
	claim, _ := elems[0].CNIArgs["pinCluster"].(string)
	cl, err := conf.ParseCluster(claim)
	require.NoError(t, err)
	nadNS := elems[0].Namespace
	if nadNS == "" {
		nadNS = ds.namespace()
	}
	nads := byKind(objs, "NetworkAttachmentDefinition")
	require.True(t, slices.ContainsFunc(nads, func(o object) bool { return o.namespace() == nadNS && o.name() == elems[0].Name }),
		"the annotation names NAD %s/%s, which is not in deploy/", nadNS, elems[0].Name)
	for _, nad := range nads {
		if nad.namespace() != nadNS || nad.name() != elems[0].Name {
			continue
		}
		// Multus merges cni-args into every delegate's args.cni.
		c := nadConfig(t, nad, map[string]any{"args": map[string]any{"cni": elems[0].CNIArgs}})
		pod := conf.Pod{Namespace: ds.namespace(), Name: ds.name() + "-x7k2p", UID: "0b7c6f0e-1b1e-4c55-9b53-5f7d2f1a9c01"}
		got, ok, err := c.Holder(pod)
		require.NoError(t, err, "%s: the holder's claim is refused", nad.file)
		assert.True(t, ok)
		assert.Equal(t, cl, got)
		// the same claim from another namespace is refused
		_, _, err = c.Holder(conf.Pod{Namespace: "default", Name: "intruder"})
		assert.ErrorIs(t, err, conf.ErrClaimRefused)
	}
}

// The installer writes the binary into /opt/cni/bin and touches nothing else
// on the host; the sweeper runs that binary in the host's mount namespace.
func TestInstallerDaemonSet(t *testing.T) {
	ds := inFile(t, loadManifests(t), "DaemonSet", "installer-daemonset.yaml")
	spec := podSpec(ds)
	assert.Equal(t, true, spec["hostPID"], "the sweeper enters PID 1's mount namespace")
	for _, k := range []string{"hostNetwork", "hostIPC"} {
		assert.NotEqual(t, true, spec[k], "installer must not use %s", k)
	}
	vols, _ := spec["volumes"].([]any)
	require.Len(t, vols, 1, "one host path")
	assert.Equal(t, "/opt/cni/bin", str(vols[0], "hostPath", "path"))
	var install, sweep []string
	for _, c := range containersOf(spec) {
		cmd, _ := c["command"].([]any)
		var args []string
		for _, a := range cmd {
			s, _ := a.(string)
			args = append(args, s)
		}
		switch str(c, "name") {
		case "install":
			assert.NotEqual(t, true, get(c, "securityContext", "privileged"))
			assert.Equal(t, false, get(c, "securityContext", "allowPrivilegeEscalation"))
			install = args
		case "sweep":
			sweep = args
			assert.NotEmpty(t, get(c, "resources", "limits", "memory"), "the sweeper has a memory limit")
			requireSweeperSecurityContext(t, c)
		default:
			t.Errorf("unexpected container %s", str(c, "name"))
		}
	}
	// The image has no shell: each command is netns-pinctl of the image,
	// run directly.
	assert.Equal(t, []string{"/netns-pinctl", "install", "--cni-bin-dir", "/host/cni-bin"}, install)
	assert.Equal(t, []string{"/netns-pinctl", "host-exec", "--", "sweep", "--interval=10s"}, sweep,
		"the sweeper, in the host mount namespace")
	assert.Equal(t, false, spec["automountServiceAccountToken"], "no API credentials in the pod with capabilities")
	for _, c := range containersOf(spec) {
		assert.Nil(t, c["ports"], "the pod with capabilities listens on nothing (%s)", str(c, "name"))
		assert.NotEqual(t, true, get(c, "securityContext", "privileged"), "%s is privileged", str(c, "name"))
		assert.Equal(t, "RuntimeDefault", str(c, "securityContext", "seccompProfile", "type"), "%s: the runtime's seccomp filter", str(c, "name"))
	}
}

// sweeperCapabilities is what the sweep container runs with instead of
// privilege; docs/security.md says what fails without each, and the
// Kubernetes suite (test/kube TestSweeperRunsWithItsCapabilitiesOnly)
// reads the running sweeper's CapEff.
var sweeperCapabilities = []any{"SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE", "NET_ADMIN"}

// requireSweeperSecurityContext checks the sweep container's
// securityContext: not privileged, every capability dropped but the four,
// no privilege escalation, read-only root, the runtime's seccomp profile,
// and AppArmor unconfined (the runtimes' default profiles deny mount).
func requireSweeperSecurityContext(t *testing.T, c map[string]any) {
	t.Helper()
	sc, _ := c["securityContext"].(map[string]any)
	require.NotNil(t, sc, "the sweep container states its securityContext")
	assert.Equal(t, false, sc["privileged"], "the sweep container is not privileged")
	assert.Equal(t, false, sc["allowPrivilegeEscalation"])
	assert.Equal(t, true, sc["readOnlyRootFilesystem"])
	assert.Equal(t, 0, sc["runAsUser"], "root: the store's files are root's")
	assert.Equal(t, []any{"ALL"}, get(sc, "capabilities", "drop"))
	assert.Equal(t, sweeperCapabilities, get(sc, "capabilities", "add"), "exactly the capabilities the sweeper needs")
	assert.Equal(t, "RuntimeDefault", str(sc, "seccompProfile", "type"))
	assert.Equal(t, "Unconfined", str(sc, "appArmorProfile", "type"), "an AppArmor default profile denies mount")
	for k := range sc {
		assert.Contains(t, []string{"privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsUser",
			"capabilities", "seccompProfile", "appArmorProfile"}, k, "a securityContext field this test does not check")
	}
}

// The image reference is the same everywhere an operator reads it: both
// containers of the installer, the README's push command and kustomize
// example, and the repository that make image writes into the archive
// (hack/image.sh); its tag is the newest release of CHANGELOG.md.
func TestImageReference(t *testing.T) {
	ds := inFile(t, loadManifests(t), "DaemonSet", "installer-daemonset.yaml")
	var refs []string
	for _, c := range containersOf(podSpec(ds)) {
		refs = append(refs, str(c, "image"))
	}
	require.NotEmpty(t, refs)
	ref := refs[0]
	for _, r := range refs {
		assert.Equal(t, ref, r, "one image for every container")
	}
	repo, tag, ok := strings.Cut(ref, ":")
	require.True(t, ok, "%s: a tag", ref)

	changelog, err := os.ReadFile("../CHANGELOG.md")
	require.NoError(t, err)
	latest := regexp.MustCompile(`(?m)^## \[?(v\d+\.\d+\.\d+)\]?`).FindSubmatch(changelog)
	require.NotNil(t, latest, "CHANGELOG.md: no release section")
	assert.Equal(t, string(latest[1]), tag, "the manifests' tag is the newest release")

	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	named := regexp.MustCompile(`[a-z0-9.<>-]+(?:/[a-z0-9<>-]+)+:v\d+\.\d+\.\d+`).FindAllString(string(readme), -1)
	require.NotEmpty(t, named, "README.md names no image")
	for _, r := range named {
		if strings.HasPrefix(r, "<registry>/") {
			// the operator's own registry, same path and tag
			assert.Equal(t, strings.TrimPrefix(repo, "registry.example.org/")+":"+tag, strings.TrimPrefix(r, "<registry>/"), "README.md: %s", r)
			continue
		}
		assert.Equal(t, ref, r, "README.md names another image")
	}
	kustomize := "kustomize edit set image " + repo + "=<registry>/" + strings.TrimPrefix(repo, "registry.example.org/") + ":" + tag
	assert.True(t, strings.Contains(string(readme), kustomize), "README.md: no %q", kustomize)

	script, err := os.ReadFile("../hack/image.sh")
	require.NoError(t, err)
	assert.Contains(t, string(script), `IMAGE_NAME="${IMAGE_NAME:-`+repo+`}"`, "make image names deploy/'s repository")
}

// The agent is unprivileged, reads stateDir read-only, probes its own
// /healthz and /readyz, runs as the ServiceAccount that rbac.yaml binds in
// the holder namespace, and the policy binds the same user.
func TestAgentDaemonSet(t *testing.T) {
	objs := loadManifests(t)
	ds := inFile(t, objs, "DaemonSet", "agent-daemonset.yaml")
	spec := podSpec(ds)
	for _, k := range []string{"hostPID", "hostNetwork", "hostIPC"} {
		assert.NotEqual(t, true, spec[k], "the agent must not use %s", k)
	}
	assert.Equal(t, "netns-pin-agent", spec["serviceAccountName"])
	cs := containersOf(spec)
	require.Len(t, cs, 1)
	c := cs[0]
	assert.NotEqual(t, true, get(c, "securityContext", "privileged"))
	assert.Equal(t, false, get(c, "securityContext", "allowPrivilegeEscalation"))
	assert.Equal(t, true, get(c, "securityContext", "readOnlyRootFilesystem"))
	assert.Equal(t, []any{"ALL"}, get(c, "securityContext", "capabilities", "drop"))
	assert.Equal(t, "/healthz", str(c, "livenessProbe", "httpGet", "path"))
	assert.Equal(t, "/readyz", str(c, "readinessProbe", "httpGet", "path"))
	mounts, _ := c["volumeMounts"].([]any)
	var hostRO bool
	for _, m := range mounts {
		if str(m, "mountPath") == "/host" {
			hostRO = get(m, "readOnly") == true && str(m, "mountPropagation") == "HostToContainer"
		}
	}
	assert.True(t, hostRO, "the host's / is mounted read-only at /host, HostToContainer")
	var hostRoot string
	for _, v := range get(spec, "volumes").([]any) {
		if str(v, "name") == "host" {
			hostRoot = str(v, "hostPath", "path")
		}
	}
	assert.Equal(t, "/", hostRoot)
	cmd, _ := c["command"].([]any)
	assert.Contains(t, cmd, "--host-root=/host")
	for _, a := range cmd {
		assert.NotContains(t, a, "--holder-namespaces", "no hard-coded namespace")
		assert.NotContains(t, a, "--state-dir", "every registered store is read")
	}
	ports, _ := c["ports"].([]any)
	require.Len(t, ports, 1)
	assert.Equal(t, "metrics", str(ports[0], "name"))

	sa := inFile(t, objs, "ServiceAccount", "agent-daemonset.yaml")
	assert.Equal(t, "netns-pin-agent", sa.name())
	role := inFile(t, objs, "ClusterRole", "rbac.yaml")
	rules, _ := get(role.raw, "rules").([]any)
	verbs := map[string][]any{}
	for _, r := range rules {
		res, _ := get(r, "resources").([]any)
		v, _ := get(r, "verbs").([]any)
		for _, x := range res {
			verbs[x.(string)] = v
		}
	}
	assert.Equal(t, map[string][]any{"pods": {"get", "list", "watch", "patch"}, "events": {"create", "patch"}}, verbs, "least rights")
	rb := inFile(t, objs, "ClusterRoleBinding", "rbac.yaml")
	assert.Equal(t, role.name(), str(rb.raw, "roleRef", "name"))
	assert.Equal(t, "ClusterRole", str(rb.raw, "roleRef", "kind"))
	subjects, _ := get(rb.raw, "subjects").([]any)
	require.Len(t, subjects, 1)
	assert.Equal(t, sa.name(), str(subjects[0], "name"))
	assert.Equal(t, sa.namespace(), str(subjects[0], "namespace"))
	vap := inFile(t, objs, "ValidatingAdmissionPolicy", "validating-admission-policy.yaml")
	conds, _ := get(vap.raw, "spec", "matchConditions").([]any)
	require.Len(t, conds, 1)
	assert.Contains(t, str(conds[0], "expression"), "system:serviceaccount:"+sa.namespace()+":"+sa.name())
	// The policy covers every namespace: no namespaceSelector narrows it.
	assert.Nil(t, get(vap.raw, "spec", "matchConstraints", "namespaceSelector"), "the node policy covers the pods of every namespace")
	b := inFile(t, objs, "ValidatingAdmissionPolicyBinding", "validating-admission-policy.yaml")
	assert.Equal(t, vap.name(), str(b.raw, "spec", "policyName"))
	assert.Nil(t, get(b.raw, "spec", "matchResources"), "the binding covers every namespace")
}

// Every DaemonSet runs on Linux nodes only.
func TestDaemonSetsOnLinux(t *testing.T) {
	for _, o := range loadManifests(t) {
		if o.kind() != "DaemonSet" || o.file == "multus-thick-patch.yaml" {
			continue
		}
		assert.Equal(t, "linux", str(podSpec(o), "nodeSelector", "kubernetes.io/os"), "%s", o)
	}
}

// kubectl apply -k deploy/ installs the installer, the storage network and
// the holder; every other manifest here is named in the kustomization with
// the reason it is left out, and deploy/monitoring/ is a kustomization of
// its own.
func TestKustomization(t *testing.T) {
	for _, dir := range []string{".", "monitoring"} {
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		require.NoError(t, err)
		var k struct {
			APIVersion string   `yaml:"apiVersion"`
			Kind       string   `yaml:"kind"`
			Resources  []string `yaml:"resources"`
		}
		require.NoError(t, yaml.Unmarshal(raw, &k))
		assert.Equal(t, "kustomize.config.k8s.io/v1beta1", k.APIVersion)
		assert.Equal(t, "Kustomization", k.Kind)
		require.NotEmpty(t, k.Resources)
		for _, r := range k.Resources {
			objs, err := deploy.Objects(filepath.Join(dir, r))
			require.NoError(t, err, "%s/kustomization.yaml: resource %s", dir, r)
			assert.NotEmpty(t, objs, "%s/%s", dir, r)
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		require.NoError(t, err)
		for _, f := range files {
			base := filepath.Base(f)
			if base == "kustomization.yaml" || slices.Contains(k.Resources, base) {
				continue
			}
			assert.Contains(t, string(raw), base, "%s is neither a resource of %s/kustomization.yaml nor said to be left out", f, dir)
		}
		if dir == "." {
			assert.Contains(t, k.Resources, "installer-daemonset.yaml")
			assert.NotContains(t, k.Resources, "ceph-csi-config.yaml", "it would replace the user's ceph-csi config.json")
			assert.Contains(t, string(raw), "monitoring/")
		}
	}
}

// The PodMonitor scrapes the agent's metrics port, and every example
// alert is on metrics the agent exports.
func TestMonitoring(t *testing.T) {
	agent, err := os.ReadFile(filepath.Join("..", "agent", "metrics.go"))
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(netns_pin_[a-z_]+)"`).FindAllSubmatch(agent, -1) {
		exported[string(m[1])] = true
	}
	require.GreaterOrEqual(t, len(exported), 8, "the agent's metric names, read from agent/metrics.go")

	pm, err := deploy.Objects(filepath.Join("monitoring", "podmonitor.yaml"))
	require.NoError(t, err)
	require.Len(t, pm, 1)
	assert.Equal(t, "PodMonitor", str(pm[0], "kind"))
	installer := inFile(t, loadManifests(t), "DaemonSet", "agent-daemonset.yaml")
	sel, _ := get(pm[0], "spec", "selector", "matchLabels").(map[string]any)
	require.NotEmpty(t, sel)
	for k, v := range sel {
		assert.Equal(t, v, get(installer.raw, "spec", "template", "metadata", "labels", k), "the PodMonitor selects the agent's pods (%s)", k)
	}
	eps, _ := get(pm[0], "spec", "podMetricsEndpoints").([]any)
	require.Len(t, eps, 1)
	assert.Equal(t, "metrics", str(eps[0], "port"))

	rules, err := deploy.Objects(filepath.Join("monitoring", "prometheusrule.yaml"))
	require.NoError(t, err)
	require.Len(t, rules, 1)
	assert.Equal(t, "PrometheusRule", str(rules[0], "kind"))
	groups, _ := get(rules[0], "spec", "groups").([]any)
	require.Len(t, groups, 1)
	alerts := map[string]string{}
	list, _ := get(groups[0], "rules").([]any)
	for _, r := range list {
		alerts[str(r, "alert")] = str(r, "expr")
		assert.NotEmpty(t, str(r, "annotations", "description"), "%s says what to do", str(r, "alert"))
	}
	for name, metric := range map[string]string{
		"NetnsPinDrainingTooLong":              "netns_pin_oldest_draining_seconds",
		"NetnsPinSweeperNotSweeping":           "netns_pin_last_sweep_timestamp_seconds",
		"NetnsPinRefusalsRising":               "netns_pin_refusals_total",
		"NetnsPinAgentNotReady":                "netns_pin_agent_ready",
		"NetnsPinLiftBlockedByUnreadableStore": "netns_pin_agent_stores_unreadable",
	} {
		assert.Contains(t, alerts[name], metric, "alert %s", name)
	}
	for name, expr := range alerts {
		for _, m := range regexp.MustCompile(`netns_pin_[a-z_]+`).FindAllString(expr, -1) {
			assert.True(t, exported[m], "alert %s uses %s, which the agent does not export", name, m)
		}
	}
}

// The NetworkPolicy of deploy/monitoring/ selects the agent's pods (the
// labels of deploy/agent-daemonset.yaml's template, in its namespace) and
// admits, for Ingress only, TCP to the agent's metrics port and nothing
// else, from one peer: the Prometheus pods of one namespace, both
// selectors set, the ones the PodMonitor's scrapes come from.
func TestMonitoringNetworkPolicy(t *testing.T) {
	objs, err := deploy.Objects(filepath.Join("monitoring", "networkpolicy.yaml"))
	require.NoError(t, err)
	require.Len(t, objs, 1)
	np := objs[0]
	assert.Equal(t, "networking.k8s.io/v1", str(np, "apiVersion"))
	assert.Equal(t, "NetworkPolicy", str(np, "kind"))
	agent := inFile(t, loadManifests(t), "DaemonSet", "agent-daemonset.yaml")
	assert.Equal(t, agent.namespace(), str(np, "metadata", "namespace"), "in the agent's namespace")
	sel, _ := get(np, "spec", "podSelector", "matchLabels").(map[string]any)
	require.NotEmpty(t, sel, "it selects pods by label")
	assert.Nil(t, get(np, "spec", "podSelector", "matchExpressions"))
	labels, _ := get(agent.raw, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range sel {
		assert.Equal(t, v, labels[k], "the policy selects the agent's pods (%s)", k)
	}
	// ... and no other pod of deploy/ in that namespace
	for _, o := range byKind(loadManifests(t), "DaemonSet") {
		if o.name() == agent.name() || o.namespace() != agent.namespace() {
			continue
		}
		other, _ := get(o.raw, "spec", "template", "metadata", "labels").(map[string]any)
		matches := true
		for k, v := range sel {
			matches = matches && other[k] == v
		}
		assert.False(t, matches, "the policy also selects %s", o)
	}
	assert.Equal(t, []any{"Ingress"}, get(np, "spec", "policyTypes"), "ingress only: the agent's own connections to the API are untouched")
	assert.Nil(t, get(np, "spec", "egress"))

	rules, _ := get(np, "spec", "ingress").([]any)
	require.Len(t, rules, 1, "one rule")
	ports, _ := get(rules[0], "ports").([]any)
	require.Len(t, ports, 1, "one port")
	cs := containersOf(podSpec(agent))
	require.Len(t, cs, 1)
	cports, _ := cs[0]["ports"].([]any)
	require.Len(t, cports, 1)
	assert.Equal(t, str(cports[0], "name"), get(ports[0], "port"), "the agent's metrics port, by name")
	assert.Equal(t, "metrics", str(cports[0], "name"))
	assert.Equal(t, "TCP", str(ports[0], "protocol"))
	assert.Nil(t, get(ports[0], "endPort"))

	from, _ := get(rules[0], "from").([]any)
	require.Len(t, from, 1, "one peer: the monitoring stack")
	peer, _ := from[0].(map[string]any)
	assert.Nil(t, peer["ipBlock"])
	nsSel, _ := get(peer, "namespaceSelector", "matchLabels").(map[string]any)
	podSel, _ := get(peer, "podSelector", "matchLabels").(map[string]any)
	assert.Equal(t, map[string]any{"kubernetes.io/metadata.name": "monitoring"}, nsSel, "the monitoring namespace, by its name label")
	assert.Equal(t, map[string]any{"app.kubernetes.io/name": "prometheus"}, podSel, "the Prometheus Operator's pods")

	raw, err := os.ReadFile(filepath.Join("monitoring", "networkpolicy.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(raw), "# the monitoring stack: edit to match your Prometheus", "the selector to edit is marked")
}

// The node's CNI bin folder is a setting of one field, the cni-bin
// volume's hostPath, marked "CNI bin folder" in the manifest; nothing else
// in the pod names a host folder of CNI binaries, so an install into
// another folder (OpenShift's Multus runs plugins from /var/lib/cni/bin)
// changes that field and nothing else. hack/kube/up.sh installs this way
// into its own folder.
func TestInstallerCNIBinFolderSetting(t *testing.T) {
	raw, err := os.ReadFile("installer-daemonset.yaml")
	require.NoError(t, err)
	ds := inFile(t, loadManifests(t), "DaemonSet", "installer-daemonset.yaml")
	vols, _ := podSpec(ds)["volumes"].([]any)
	require.Len(t, vols, 1)
	assert.Equal(t, "/opt/cni/bin", str(vols[0], "hostPath", "path"), "the default")
	// Outside comments, the folder is named exactly in that field.
	var named []string
	for _, l := range strings.Split(string(raw), "\n") {
		if code, _, _ := strings.Cut(l, "#"); strings.Contains(code, "/opt/cni/bin") {
			named = append(named, strings.TrimSpace(code))
		}
	}
	assert.Equal(t, []string{"path: /opt/cni/bin"}, named)
	assert.Equal(t, 1, strings.Count(string(raw), "# CNI bin folder"), "the field is marked")
}

// ceph-csi's netNamespaceFilePath is the cluster's link as netns-pin
// computes it from the NAD.
func TestCephCSIConfigPointsAtLink(t *testing.T) {
	objs := loadManifests(t)
	cms := []object{inFile(t, objs, "ConfigMap", "ceph-csi-config.yaml")}
	var clusters []struct {
		ClusterID string `json:"clusterID"`
		RBD       struct {
			NetNamespaceFilePath string `json:"netNamespaceFilePath"`
		} `json:"rbd"`
		CephFS struct {
			NetNamespaceFilePath string `json:"netNamespaceFilePath"`
		} `json:"cephFS"`
	}
	require.NoError(t, json.Unmarshal([]byte(str(cms[0].raw, "data", "config.json")), &clusters), "config.json")
	require.Len(t, clusters, 1)
	cl, err := conf.ParseCluster("rook-ceph/my-cluster")
	require.NoError(t, err)
	for _, nad := range byKind(objs, "NetworkAttachmentDefinition") {
		links, err := nadConfig(t, nad, nil).LinkPaths(cl)
		require.NoError(t, err)
		assert.Contains(t, links, clusters[0].RBD.NetNamespaceFilePath, "%s", nad.file)
		assert.Contains(t, links, clusters[0].CephFS.NetNamespaceFilePath, "%s", nad.file)
	}
	assert.True(t, strings.HasPrefix(clusters[0].RBD.NetNamespaceFilePath, "/var/lib/kubelet/plugins/"),
		"under the kubelet plugins folder the csi node plugins mount Bidirectional")
}

// The Multus thick patch mounts the default pinDir into Multus' daemon at
// /hostroot + pinDir (its chrootDir) with Bidirectional propagation, the
// volume netns-pin's check names when it is missing.
func TestMultusThickPatch(t *testing.T) {
	ds := inFile(t, loadManifests(t), "", "multus-thick-patch.yaml")
	assert.Equal(t, "DaemonSet kube-system/kube-multus-ds", ds.kind()+" "+ds.namespace()+"/"+ds.name(), "Multus' own DaemonSet")
	containers, _ := get(ds.raw, "spec", "template", "spec", "containers").([]any)
	require.Len(t, containers, 1)
	assert.Equal(t, "kube-multus", str(containers[0], "name"))
	mounts, _ := get(containers[0], "volumeMounts").([]any)
	require.Len(t, mounts, 1)
	assert.Equal(t, "/hostroot"+conf.DefaultPinDir, str(mounts[0], "mountPath"))
	assert.Equal(t, "Bidirectional", str(mounts[0], "mountPropagation"))
	volumes, _ := get(ds.raw, "spec", "template", "spec", "volumes").([]any)
	require.Len(t, volumes, 1)
	assert.Equal(t, str(mounts[0], "name"), str(volumes[0], "name"))
	assert.Equal(t, conf.DefaultPinDir, str(volumes[0], "hostPath", "path"))
}

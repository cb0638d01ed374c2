package deploy_test

import (
	"bytes"
	"maps"
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

// helmBin is the helm binary of make tools. Its absence fails the test
// with the command that builds it: the chart is tested wherever deploy/ is.
func helmBin(t *testing.T) string {
	t.Helper()
	helm, err := filepath.Abs(deploy.HelmPath(".."))
	require.NoError(t, err)
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("no helm at %s: build it with `hack/tools.sh helm` (part of make tools), or name one in NETNS_PIN_HELM: %v", helm, err)
	}
	return helm
}

// render is `helm template` of the chart as deploy/ renders it, with the
// values files (under the repository) and --set values: the objects of
// each template, by its path under templates/.
func render(t *testing.T, values []string, set ...string) map[string][]object {
	t.Helper()
	docs, err := deploy.Template(helmBin(t), "..", values, set)
	require.NoError(t, err)
	out := map[string][]object{}
	for tmpl, texts := range docs {
		for _, text := range texts {
			objs, err := deploy.ObjectsOf(tmpl, []byte(text))
			require.NoError(t, err)
			for _, o := range objs {
				out[tmpl] = append(out[tmpl], object{file: tmpl, raw: o})
			}
		}
	}
	return out
}

// renderErr is the error of a `helm template` that must fail.
func renderErr(t *testing.T, set ...string) string {
	t.Helper()
	_, err := deploy.Template(helmBin(t), "..", nil, set)
	require.Error(t, err, "helm template --set %v rendered", set)
	return err.Error()
}

// handWritten are deploy/'s files that are no objects of the chart: the
// kustomizations, and what changes other projects' objects or
// configuration. Every other manifest is rendered from the chart.
var handWritten = []string{
	"kustomization.yaml",
	"ceph-csi-config.yaml",
	"multus-thick-patch.yaml",
	"monitoring/kustomization.yaml",
	"nodeplugin/kustomization.yaml",
	"nodeplugin/daemonset-patch.yaml",
}

// deploy/'s manifests are the chart's templates rendered (make manifests):
// each file byte for byte, and no manifest that is neither rendered nor
// written by hand.
func TestManifestsAreTheChartRendered(t *testing.T) {
	files, err := deploy.Render(helmBin(t), "..")
	require.NoError(t, err)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		have, err := os.ReadFile(filepath.FromSlash(name))
		if !assert.NoError(t, err, "deploy/%s is rendered from the chart but missing: run `make manifests`", name) {
			continue
		}
		if line, ok := firstDifference(have, files[name]); ok {
			t.Errorf("deploy/%s is not the chart rendered (line %d differs): edit deploy/chart/netns-pin/templates/ or deploy/chart/examples/, then run `make manifests`", name, line)
		}
	}
	var all []string
	for _, pattern := range []string{"*.yaml", "*/*.yaml"} {
		m, err := filepath.Glob(pattern)
		require.NoError(t, err)
		all = append(all, m...)
	}
	for _, f := range all {
		name := filepath.ToSlash(f)
		if _, ok := files[name]; !ok && !slices.Contains(handWritten, name) {
			t.Errorf("deploy/%s is neither rendered from the chart (deploy.Renderings) nor one of the files written by hand", name)
		}
	}
}

// firstDifference is the first line (from 1) where a and b differ.
func firstDifference(a, b []byte) (int, bool) {
	if bytes.Equal(a, b) {
		return 0, false
	}
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i + 1, true
		}
	}
	return min(len(la), len(lb)) + 1, true
}

// chartMeta is Chart.yaml.
type chartMeta struct {
	APIVersion  string `yaml:"apiVersion"`
	Name        string `yaml:"name"`
	Version     string `yaml:"version"`
	AppVersion  string `yaml:"appVersion"`
	KubeVersion string `yaml:"kubeVersion"`
}

func readChartMeta(t *testing.T) chartMeta {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("chart", "netns-pin", "Chart.yaml"))
	require.NoError(t, err)
	var m chartMeta
	require.NoError(t, yaml.Unmarshal(raw, &m))
	return m
}

// The chart is the release's: apiVersion v2, its appVersion the newest
// release of CHANGELOG.md and its version the same without the v; the
// default image tag is the appVersion, in every container of netns-pin.
func TestChartVersionIsTheRelease(t *testing.T) {
	m := readChartMeta(t)
	assert.Equal(t, "v2", m.APIVersion)
	assert.Equal(t, "netns-pin", m.Name)
	changelog, err := os.ReadFile("../CHANGELOG.md")
	require.NoError(t, err)
	latest := regexp.MustCompile(`(?m)^## \[?(v\d+\.\d+\.\d+)\]?`).FindSubmatch(changelog)
	require.NotNil(t, latest, "CHANGELOG.md: no release section")
	assert.Equal(t, string(latest[1]), m.AppVersion, "Chart.yaml's appVersion is the newest release")
	assert.Equal(t, strings.TrimPrefix(m.AppVersion, "v"), m.Version, "Chart.yaml's version is the release's")

	objs := render(t, nil)
	var images []string
	for _, tmpl := range []string{"installer-daemonset.yaml", "agent-daemonset.yaml", "controller.yaml"} {
		for _, o := range objs[tmpl] {
			for _, c := range containersOf(podSpec(o)) {
				images = append(images, str(c, "image"))
			}
		}
	}
	require.Len(t, images, 4, "install, sweep, agent, controller")
	for _, img := range images {
		assert.Equal(t, "registry.example.org/netns-pin:"+m.AppVersion, img, "the default tag is the appVersion")
	}
	objs = render(t, nil, "image.repository=reg.example.com/x/netns-pin", "image.tag=v9.9.9")
	c := containersOf(podSpec(objs["controller.yaml"][1]))[0]
	assert.Equal(t, "reg.example.com/x/netns-pin:v9.9.9", str(c, "image"))
}

// With its default values the chart renders netns-pin itself and
// nothing of the user's: the installer, the agent, the controller, their
// rights and admission policies, the removal guard, the pre-delete hook
// of `helm uninstall`; no network, no holder, no monitoring object.
func TestChartDefaults(t *testing.T) {
	objs := render(t, nil)
	var got []string
	for tmpl, list := range objs {
		for _, o := range list {
			got = append(got, tmpl+": "+o.kind()+" "+o.name())
		}
	}
	assert.ElementsMatch(t, []string{
		"installer-daemonset.yaml: DaemonSet netns-pin-installer",
		"agent-daemonset.yaml: ServiceAccount netns-pin-agent",
		"agent-daemonset.yaml: DaemonSet netns-pin-agent",
		"rbac.yaml: ClusterRole netns-pin-agent",
		"rbac.yaml: ClusterRoleBinding netns-pin-agent",
		"validating-admission-policy.yaml: ValidatingAdmissionPolicy netns-pin-agent-own-node",
		"validating-admission-policy.yaml: ValidatingAdmissionPolicyBinding netns-pin-agent-own-node",
		"controller.yaml: ServiceAccount netns-pin-controller",
		"controller.yaml: Deployment netns-pin-controller",
		"controller-rbac.yaml: ClusterRole netns-pin-controller",
		"controller-rbac.yaml: ClusterRoleBinding netns-pin-controller",
		"controller-rbac.yaml: Role netns-pin-controller-lease",
		"controller-rbac.yaml: RoleBinding netns-pin-controller-lease",
		"controller-admission-policy.yaml: ValidatingAdmissionPolicy netns-pin-controller-lift-only",
		"controller-admission-policy.yaml: ValidatingAdmissionPolicyBinding netns-pin-controller-lift-only",
		"removal-guard.yaml: ValidatingAdmissionPolicy netns-pin-removal-guard",
		"removal-guard.yaml: ValidatingAdmissionPolicyBinding netns-pin-removal-guard",
		"uninstall-check.yaml: ServiceAccount netns-pin-uninstall-check",
		"uninstall-check.yaml: ClusterRole netns-pin-uninstall-check",
		"uninstall-check.yaml: ClusterRoleBinding netns-pin-uninstall-check",
		"uninstall-check.yaml: Job netns-pin-uninstall-check",
	}, got)
	for _, tmpl := range []string{"installer-daemonset.yaml", "agent-daemonset.yaml"} {
		spec := podSpec(objs[tmpl][len(objs[tmpl])-1])
		assert.Equal(t, "system-node-critical", spec["priorityClassName"], tmpl)
		assert.Equal(t, "linux", str(spec, "nodeSelector", "kubernetes.io/os"), tmpl)
		for _, c := range containersOf(spec) {
			assert.NotEmpty(t, get(c, "resources", "requests"), "%s: %s has resources", tmpl, str(c, "name"))
			assert.Equal(t, "IfNotPresent", str(c, "imagePullPolicy"), tmpl)
		}
	}
}

// The node-plugin example (deploy/chart/examples/nodeplugin.yaml)
// renders netns-pin and one network that netns-pin accepts, with no link
// and a holder rule for each node plugin DaemonSet, and no holder
// DaemonSet.
func TestChartNodePlugin(t *testing.T) {
	objs := render(t, []string{"deploy/chart/examples/nodeplugin.yaml"})
	assert.Empty(t, objs["holder-daemonset.yaml"], "no holder DaemonSet: the node plugin is its own holder")
	require.NotEmpty(t, objs["installer-daemonset.yaml"])
	nads := objs["network-attachment-definition.yaml"]
	require.Len(t, nads, 1)
	assert.Equal(t, "ceph-csi", nads[0].namespace())
	c := nadConfig(t, nads[0], nil)
	assert.Empty(t, c.Links)
	for _, pod := range []string{"csi-rbdplugin-x7k2p", "csi-cephfsplugin-9qz4m"} {
		_, ok, err := c.Holder(conf.Pod{Namespace: "ceph-csi", Name: pod, UID: "0b7c6f0e-1b1e-4c55-9b53-5f7d2f1a9c01"})
		require.NoError(t, err)
		assert.True(t, ok, "%s is a holder", pod)
	}
}

// The values a user sets reach their fields: the host folders, the
// scheduling of each component, the pull secrets, the pod annotations, a
// container's resources; kubeletDir moves a network's pinDir.
func TestChartValues(t *testing.T) {
	objs := render(t, []string{"deploy/chart/examples/holder-link.yaml"},
		"cniBinDir=/var/lib/cni/bin",
		"kubeletDir=/var/lib/k0s/kubelet",
		"imagePullSecrets[0].name=regcred",
		"installer.podAnnotations.a=b",
		"agent.priorityClassName=my-class",
		"controller.replicas=3",
		"controller.tolerations[0].operator=Exists",
		"holder.resources.limits.memory=32Mi",
		"installer.sweep.interval=30s",
	)
	inst := objs["installer-daemonset.yaml"][0]
	spec := podSpec(inst)
	assert.Equal(t, "/var/lib/cni/bin", str(get(spec, "volumes").([]any)[0], "hostPath", "path"))
	assert.Equal(t, []any{map[string]any{"name": "regcred"}}, spec["imagePullSecrets"])
	assert.Equal(t, "b", str(inst.raw, "spec", "template", "metadata", "annotations", "a"))
	assert.Contains(t, containersOf(spec)[1]["command"], "--interval=30s")
	assert.Equal(t, "my-class", podSpec(objs["agent-daemonset.yaml"][1])["priorityClassName"])
	ctl := objs["controller.yaml"][1]
	assert.Equal(t, 3, get(ctl.raw, "spec", "replicas"))
	assert.Equal(t, []any{map[string]any{"operator": "Exists"}}, podSpec(ctl)["tolerations"])
	holder := objs["holder-daemonset.yaml"][0]
	assert.Equal(t, "32Mi", str(containersOf(podSpec(holder))[0], "resources", "limits", "memory"))
	c := nadConfig(t, objs["network-attachment-definition.yaml"][0], nil)
	assert.Equal(t, "/var/lib/k0s/kubelet/plugins/netns-pin", c.PinDir)

	// netns-pin's default pinDir is under the default kubeletDir: not written
	objs = render(t, []string{"deploy/chart/examples/holder-link.yaml"})
	assert.NotContains(t, str(objs["network-attachment-definition.yaml"][0].raw, "spec", "config"), "pinDir")
}

// values.schema.json refuses, naming the value and why: a relative host
// path, a key it does not know (at the top and inside), a value of the
// wrong type, netns-pin's own type in a network's main plugin.
func TestChartSchemaRefuses(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"cniBinDir=opt/cni/bin"}, "at '/cniBinDir': 'opt/cni/bin' does not match pattern '^/'"},
		{[]string{"kubeletDir=var/lib/kubelet"}, "at '/kubeletDir': 'var/lib/kubelet' does not match pattern '^/'"},
		{[]string{"cniBinDri=/opt/cni/bin"}, "additional properties 'cniBinDri' not allowed"},
		{[]string{"installer.nodeSelectr.a=b"}, "at '/installer': additional properties 'nodeSelectr' not allowed"},
		{[]string{"controller.replicas=two"}, "at '/controller/replicas': got string, want integer"},
		{[]string{"monitoring.enabled=yes"}, "at '/monitoring/enabled': got string, want boolean"},
		{[]string{"uninstallCheck.enable=false"}, "at '/uninstallCheck': additional properties 'enable' not allowed"},
		{[]string{"networks[0].name=n", "networks[0].namespace=ns", "networks[0].plugin.type=macvlan", "networks[0].netnsPin.stateDir=var/lib/x"},
			"at '/networks/0/netnsPin/stateDir': 'var/lib/x' does not match pattern '^/'"},
		{[]string{"holders[0].cluster=my-cluster", "holders[0].network=ceph-public"}, "at '/holders/0/cluster'"},
	} {
		msg := renderErr(t, tc.set...)
		assert.Contains(t, msg, tc.want, "--set %v", tc.set)
		assert.Contains(t, msg, "values don't meet the specifications of the schema", "--set %v", tc.set)
	}
}

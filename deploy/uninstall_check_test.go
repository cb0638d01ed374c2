package deploy_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/deploy"
)

// uninstallCheck is the name of every object of the pre-delete hook.
const uninstallCheck = "netns-pin-uninstall-check"

// The chart's pre-delete hook: a ServiceAccount that may list pods and
// nothing else, then a Job that runs the check once, unprivileged, with
// the controller's image and scheduling; helm prints its output when it
// fails. None of them is guarded: the guard must let helm delete them.
func TestChartUninstallCheck(t *testing.T) {
	objs := render(t, nil)
	hooks := objs["uninstall-check.yaml"]
	var got []string
	for _, o := range hooks {
		got = append(got, o.kind()+" "+o.name())
		annot := func(key string) string { return str(o.raw, "metadata", "annotations", key) }
		assert.Equal(t, "pre-delete", annot(deploy.HookAnnotation), "%s", o)
		assert.Equal(t, "before-hook-creation,hook-succeeded", annot("helm.sh/hook-delete-policy"), "%s", o)
		weight := "-10"
		if o.kind() == "Job" {
			weight = "0"
			assert.Equal(t, "hook-failed", annot("helm.sh/hook-output-log-policy"), "%s: helm prints the refusal", o)
		}
		assert.Equal(t, weight, annot("helm.sh/hook-weight"), "%s", o)
		assert.Equal(t, "netns-pin", str(o.raw, "metadata", "labels", "app.kubernetes.io/part-of"), "%s", o)
		assert.Empty(t, str(o.raw, "metadata", "labels", "netns-pin.io/removal"), "%s must not be guarded", o)
	}
	assert.Equal(t, []string{
		"ServiceAccount " + uninstallCheck, "ClusterRole " + uninstallCheck,
		"ClusterRoleBinding " + uninstallCheck, "Job " + uninstallCheck,
	}, got)
	require.Len(t, hooks, 4)
	assert.Equal(t, map[string][]any{"pods": {"list"}}, rulesOf(hooks[1]))
	assert.Equal(t, []any{map[string]any{"kind": "ServiceAccount", "name": uninstallCheck, "namespace": "kube-system"}},
		get(hooks[2].raw, "subjects"))

	job := hooks[3]
	assert.Equal(t, 0, get(job.raw, "spec", "backoffLimit"), "a refusal is an answer: no second try")
	assert.Equal(t, 120, get(job.raw, "spec", "activeDeadlineSeconds"))
	spec := podSpec(job)
	assert.Equal(t, uninstallCheck, spec["serviceAccountName"])
	assert.Equal(t, "Never", spec["restartPolicy"])
	ctl := podSpec(objs["controller.yaml"][1])
	for _, k := range []string{"priorityClassName", "nodeSelector", "affinity", "securityContext"} {
		assert.Equal(t, ctl[k], spec[k], "%s: the controller's", k)
	}
	cs := containersOf(spec)
	require.Len(t, cs, 1)
	c, ctlc := cs[0], containersOf(ctl)[0]
	assert.Equal(t, []any{"/netns-pin-controller", "--uninstall-check"}, c["command"])
	for _, k := range []string{"image", "imagePullPolicy", "securityContext"} {
		assert.Equal(t, ctlc[k], c[k], "%s: the controller's", k)
	}
	assert.Equal(t, map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"}, "limits": map[string]any{"memory": "64Mi"}},
		c["resources"])

	// the pod spec's first field, as in the other pod templates
	docs, err := deploy.Template(helmBin(t), "..", nil, nil)
	require.NoError(t, err)
	require.Len(t, docs["uninstall-check.yaml"], 4)
	assert.Contains(t, docs["uninstall-check.yaml"][3], "\n    spec:\n      serviceAccountName: "+uninstallCheck+"\n")

	// the controller's scheduling values and the chart's pull secrets
	objs = render(t, nil, "controller.tolerations[0].operator=Exists", "imagePullSecrets[0].name=regcred",
		"controller.priorityClassName=my-class", "uninstallCheck.resources.limits.memory=128Mi")
	spec = podSpec(objs["uninstall-check.yaml"][3])
	assert.Equal(t, []any{map[string]any{"operator": "Exists"}}, spec["tolerations"])
	assert.Equal(t, []any{map[string]any{"name": "regcred"}}, spec["imagePullSecrets"])
	assert.Equal(t, "my-class", spec["priorityClassName"])
	assert.Equal(t, "128Mi", str(containersOf(spec)[0], "resources", "limits", "memory"))

	// off: no hook at all
	for tmpl, list := range render(t, nil, "uninstallCheck.enabled=false") {
		for _, o := range list {
			assert.Empty(t, str(o.raw, "metadata", "annotations", deploy.HookAnnotation), "%s", o)
		}
		assert.NotEqual(t, "uninstall-check.yaml", tmpl)
	}
}

// Without a cluster to look the removal guard up in (helm template, make
// manifests), its two variables are the shipped "not counted yet".
func TestChartRemovalGuardShipped(t *testing.T) {
	vap := render(t, nil)["removal-guard.yaml"][0]
	vars, _ := get(vap.raw, "spec", "variables").([]any)
	require.GreaterOrEqual(t, len(vars), 2)
	assert.Equal(t, map[string]any{"name": "podsWithFinalizer", "expression": "-1"}, vars[0])
	assert.Equal(t, map[string]any{"name": "pods", "expression": "''"}, vars[1])
}

// deploy/ has no Helm hook (deploy.Render leaves them out): kustomize
// has no event to run one at, and would apply the Job as an object.
func TestDeployHasNoHook(t *testing.T) {
	var files []string
	for _, pattern := range []string{"*.yaml", "*/*.yaml"} {
		m, err := filepath.Glob(pattern)
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	for _, f := range files {
		assert.False(t, strings.Contains(f, "uninstall-check"), "deploy/%s", f)
		objs, err := deploy.Objects(f)
		require.NoError(t, err)
		for _, o := range objs {
			annotations, _ := deploy.Field(o, "metadata", "annotations").(map[string]any)
			_, hook := annotations[deploy.HookAnnotation]
			assert.False(t, hook, "deploy/%s: %s %s is a Helm hook", f, str(o, "kind"), str(o, "metadata", "name"))
		}
	}
}

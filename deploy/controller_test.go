package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/deploy"
)

// rulesOf maps each resource of an RBAC role to its verbs.
func rulesOf(role object) map[string][]any {
	rules, _ := get(role.raw, "rules").([]any)
	verbs := map[string][]any{}
	for _, r := range rules {
		res, _ := get(r, "resources").([]any)
		v, _ := get(r, "verbs").([]any)
		for _, x := range res {
			verbs[x.(string)] = v
		}
	}
	return verbs
}

// The cluster controller: two unprivileged replicas of a Deployment, the
// quarantine of the pod GC (40 s), its own ServiceAccount with the least
// rights, and the policy that admits its one patch bound to the same user.
func TestControllerDeployment(t *testing.T) {
	objs := loadManifests(t)
	d := inFile(t, objs, "Deployment", "controller.yaml")
	assert.Equal(t, 2, get(d.raw, "spec", "replicas"), "two replicas, one leader")
	spec, _ := get(d.raw, "spec", "template", "spec").(map[string]any)
	require.NotNil(t, spec)
	for _, k := range []string{"hostPID", "hostNetwork", "hostIPC", "volumes"} {
		assert.Nil(t, spec[k], "the controller needs no %s", k)
	}
	assert.Equal(t, "linux", get(spec, "nodeSelector", "kubernetes.io/os"))
	cs := containersOf(spec)
	require.Len(t, cs, 1)
	c := cs[0]
	assert.Equal(t, false, get(c, "securityContext", "privileged"))
	assert.Equal(t, false, get(c, "securityContext", "allowPrivilegeEscalation"))
	assert.Equal(t, true, get(c, "securityContext", "readOnlyRootFilesystem"))
	assert.Equal(t, []any{"ALL"}, get(c, "securityContext", "capabilities", "drop"))
	assert.Equal(t, true, get(spec, "securityContext", "runAsNonRoot"))
	assert.Equal(t, "/healthz", str(c, "livenessProbe", "httpGet", "path"))
	assert.Equal(t, "/readyz", str(c, "readinessProbe", "httpGet", "path"))
	assert.Equal(t, "metrics", str(c, "livenessProbe", "httpGet", "port"))
	ports, _ := c["ports"].([]any)
	require.Len(t, ports, 1)
	assert.Equal(t, "metrics", str(ports[0], "name"))
	assert.Equal(t, 9854, get(ports[0], "containerPort"))
	cmd, _ := c["command"].([]any)
	require.NotEmpty(t, cmd)
	assert.Equal(t, "/netns-pin-controller", cmd[0])
	assert.Contains(t, cmd, "--listen-address=:9854")
	assert.Contains(t, cmd, "--quarantine=40s", "the pod GC's quarantine")
	assert.Equal(t, 40*time.Second, controller.DefaultQuarantine, "the flag's default is the same")
	img := inFile(t, objs, "DaemonSet", "installer-daemonset.yaml")
	assert.Equal(t, str(containersOf(podSpec(img))[0], "image"), str(c, "image"), "the one image of netns-pin")

	sa := inFile(t, objs, "ServiceAccount", "controller.yaml")
	assert.Equal(t, "netns-pin-controller", sa.name())
	assert.Equal(t, sa.name(), spec["serviceAccountName"])
	assert.Equal(t, sa.namespace(), d.namespace())

	cr := inFile(t, objs, "ClusterRole", "controller-rbac.yaml")
	assert.Equal(t, map[string][]any{
		"pods":                              {"get", "list", "watch", "patch"},
		"nodes":                             {"get", "list", "watch"},
		"events":                            {"create"},
		"validatingadmissionpolicies":       {"get", "list", "watch", "patch"},
		"validatingadmissionpolicybindings": {"patch"},
	}, rulesOf(cr), "least rights")
	role := inFile(t, objs, "Role", "controller-rbac.yaml")
	assert.Equal(t, d.namespace(), role.namespace(), "the Lease in its own namespace")
	assert.Equal(t, map[string][]any{"leases": {"get", "create", "update"}}, rulesOf(role))
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		b := inFile(t, objs, kind, "controller-rbac.yaml")
		subjects, _ := get(b.raw, "subjects").([]any)
		require.Len(t, subjects, 1)
		assert.Equal(t, sa.name(), str(subjects[0], "name"), kind)
		assert.Equal(t, sa.namespace(), str(subjects[0], "namespace"), kind)
	}

	vap := inFile(t, objs, "ValidatingAdmissionPolicy", "controller-admission-policy.yaml")
	conds, _ := get(vap.raw, "spec", "matchConditions").([]any)
	require.Len(t, conds, 1)
	assert.Contains(t, str(conds[0], "expression"), "'system:serviceaccount:"+sa.namespace()+":"+sa.name()+"'")
	assert.Equal(t, "Fail", str(vap.raw, "spec", "failurePolicy"))
	b := inFile(t, objs, "ValidatingAdmissionPolicyBinding", "controller-admission-policy.yaml")
	assert.Equal(t, vap.name(), str(b.raw, "spec", "policyName"))
	assert.Equal(t, []any{"Deny"}, get(b.raw, "spec", "validationActions"))
}

// deploy/monitoring/'s controller files: the PodMonitor scrapes the
// controller's port, the NetworkPolicy admits Prometheus to it, and every
// alert is on a metric the controller or the agent exports, the hour-long
// Terminating holder among them.
func TestControllerMonitoring(t *testing.T) {
	exported := map[string]bool{}
	for _, f := range []string{"agent/metrics.go", "controller/metrics.go"} {
		src, err := os.ReadFile(filepath.Join("..", f))
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`"(netns_pin_[a-z_]+)"`).FindAllSubmatch(src, -1) {
			exported[string(m[1])] = true
		}
	}
	d := inFile(t, loadManifests(t), "Deployment", "controller.yaml")
	labels, _ := get(d.raw, "spec", "template", "metadata", "labels").(map[string]any)

	pm, err := deploy.Objects(filepath.Join("monitoring", "controller-podmonitor.yaml"))
	require.NoError(t, err)
	require.Len(t, pm, 1)
	assert.Equal(t, "PodMonitor", str(pm[0], "kind"))
	sel, _ := get(pm[0], "spec", "selector", "matchLabels").(map[string]any)
	require.NotEmpty(t, sel)
	for k, v := range sel {
		assert.Equal(t, v, labels[k], "the PodMonitor selects the controller's pods (%s)", k)
	}
	eps, _ := get(pm[0], "spec", "podMetricsEndpoints").([]any)
	require.Len(t, eps, 1)
	assert.Equal(t, "metrics", str(eps[0], "port"))

	np, err := deploy.Objects(filepath.Join("monitoring", "controller-networkpolicy.yaml"))
	require.NoError(t, err)
	require.Len(t, np, 1)
	assert.Equal(t, d.namespace(), str(np[0], "metadata", "namespace"))
	sel, _ = get(np[0], "spec", "podSelector", "matchLabels").(map[string]any)
	require.NotEmpty(t, sel)
	for k, v := range sel {
		assert.Equal(t, v, labels[k], "the policy selects the controller's pods (%s)", k)
	}
	assert.Equal(t, []any{"Ingress"}, get(np[0], "spec", "policyTypes"))

	rules, err := deploy.Objects(filepath.Join("monitoring", "controller-prometheusrule.yaml"))
	require.NoError(t, err)
	require.Len(t, rules, 1)
	groups, _ := get(rules[0], "spec", "groups").([]any)
	require.Len(t, groups, 1)
	alerts := map[string]string{}
	list, _ := get(groups[0], "rules").([]any)
	for _, r := range list {
		alerts[str(r, "alert")] = str(r, "expr")
		assert.NotEmpty(t, str(r, "annotations", "description"), "%s says what to do", str(r, "alert"))
	}
	assert.Contains(t, alerts["NetnsPinHolderTerminatingTooLong"], "netns_pin_controller_oldest_waiting_seconds")
	assert.Contains(t, alerts["NetnsPinHolderTerminatingTooLong"], "> 3600", "an hour")
	assert.Contains(t, alerts["NetnsPinUnprotectedPin"], "netns_pin_agent_unprotected_pins")
	assert.Contains(t, alerts["NetnsPinControllerNoLeader"], "netns_pin_controller_is_leader")
	for name, expr := range alerts {
		for _, m := range regexp.MustCompile(`netns_pin_[a-z_]+`).FindAllString(expr, -1) {
			assert.True(t, exported[m], "alert %s uses %s, which neither the agent nor the controller exports", name, m)
		}
	}
}

// The removal guard: every object the release of a holder needs is
// labelled guarded (the installer, the agent, the controller, their
// ServiceAccounts and RBAC), nothing else is (the holder DaemonSet and the
// network may go); the policy's rules cover each guarded kind, its first
// two variables are the controller's with "not counted yet", and the
// controller's rights name exactly every admission policy of deploy/,
// which are its flags' defaults.
func TestRemovalGuard(t *testing.T) {
	objs := loadManifests(t)
	var guarded []string
	for _, o := range objs {
		if str(o.raw, "metadata", "labels", "netns-pin.io/removal") == "guarded" {
			guarded = append(guarded, o.kind()+" "+o.name())
		}
	}
	assert.ElementsMatch(t, []string{
		"DaemonSet netns-pin-installer", "DaemonSet netns-pin-agent", "Deployment netns-pin-controller",
		"ServiceAccount netns-pin-agent", "ServiceAccount netns-pin-controller",
		"ClusterRole netns-pin-agent", "ClusterRoleBinding netns-pin-agent",
		"ClusterRole netns-pin-controller", "ClusterRoleBinding netns-pin-controller",
		"Role netns-pin-controller-lease", "RoleBinding netns-pin-controller-lease",
	}, guarded)

	vap := inFile(t, objs, "ValidatingAdmissionPolicy", "removal-guard.yaml")
	assert.Equal(t, controller.GuardPolicyName, vap.name())
	assert.Equal(t, "guarded", str(vap.raw, "spec", "matchConstraints", "objectSelector", "matchLabels", "netns-pin.io/removal"))
	covered := map[string]bool{}
	for _, r := range get(vap.raw, "spec", "matchConstraints", "resourceRules").([]any) {
		assert.Equal(t, []any{"DELETE"}, get(r, "operations"))
		for _, res := range get(r, "resources").([]any) {
			covered[res.(string)] = true
		}
	}
	for _, g := range guarded {
		kind, _, _ := strings.Cut(g, " ")
		assert.True(t, covered[strings.ToLower(kind)+"s"], "the guard does not cover %s", g)
	}
	vars, _ := get(vap.raw, "spec", "variables").([]any)
	require.GreaterOrEqual(t, len(vars), 2)
	assert.Equal(t, controller.GuardCountVar, str(vars[0], "name"))
	assert.Equal(t, "-1", str(vars[0], "expression"), "not counted yet")
	assert.Equal(t, controller.GuardPodsVar, str(vars[1], "name"))
	assert.Nil(t, get(vap.raw, "spec", "paramKind"), "no parameter object (docs/design.md, \"The removal guard\")")

	names := func(rules any, resource string) []any {
		for _, r := range rules.([]any) {
			if slices.Contains(get(r, "resources").([]any), any(resource)) {
				return get(r, "resourceNames").([]any)
			}
		}
		return nil
	}
	var policies []any
	for _, p := range byKind(objs, "ValidatingAdmissionPolicy") {
		policies = append(policies, p.name())
	}
	assert.Len(t, byKind(objs, "ValidatingAdmissionPolicyBinding"), len(policies))
	var defaults []any
	for _, p := range controller.GuardPolicies {
		defaults = append(defaults, p)
	}
	assert.ElementsMatch(t, policies, defaults)
	cr := inFile(t, objs, "ClusterRole", "controller-rbac.yaml")
	assert.ElementsMatch(t, policies, names(get(cr.raw, "rules"), "validatingadmissionpolicies"))
	assert.ElementsMatch(t, policies, names(get(cr.raw, "rules"), "validatingadmissionpolicybindings"))
}

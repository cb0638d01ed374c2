package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/deploy"
)

// fakeAPI is the least of an API server that `helm template
// --dry-run=server` talks to: the version, the discovery of the kinds
// the chart renders, and the removal guard's policy (policy; nil: none).
// Every other object is not found.
type fakeAPI struct {
	mu     sync.Mutex
	policy map[string]any
}

// fakeGroups are the discovery of fakeAPI: group/version -> kind ->
// resource, and whether it is namespaced.
var fakeGroups = map[string]map[string]struct {
	resource   string
	namespaced bool
}{
	"v1": {"Pod": {"pods", true}, "ServiceAccount": {"serviceaccounts", true}, "Namespace": {"namespaces", false},
		"ConfigMap": {"configmaps", true}},
	"apps/v1":                         {"DaemonSet": {"daemonsets", true}, "Deployment": {"deployments", true}},
	"batch/v1":                        {"Job": {"jobs", true}},
	"rbac.authorization.k8s.io/v1":    {"ClusterRole": {"clusterroles", false}, "ClusterRoleBinding": {"clusterrolebindings", false}, "Role": {"roles", true}, "RoleBinding": {"rolebindings", true}},
	"admissionregistration.k8s.io/v1": {"ValidatingAdmissionPolicy": {"validatingadmissionpolicies", false}, "ValidatingAdmissionPolicyBinding": {"validatingadmissionpolicybindings", false}},
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	p := r.URL.Path
	switch {
	case p == "/version":
		reply(http.StatusOK, map[string]string{"major": "1", "minor": "34", "gitVersion": "v1.34.0"})
		return
	case p == "/api":
		reply(http.StatusOK, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
		return
	case p == "/apis":
		var groups []any
		for gv := range fakeGroups {
			g, v, ok := strings.Cut(gv, "/")
			if !ok {
				continue
			}
			ver := map[string]string{"groupVersion": gv, "version": v}
			groups = append(groups, map[string]any{"name": g, "versions": []any{ver}, "preferredVersion": ver})
		}
		reply(http.StatusOK, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
		return
	}
	gv := strings.TrimPrefix(strings.TrimPrefix(p, "/apis/"), "/api/")
	if kinds, ok := fakeGroups[gv]; ok {
		var resources []any
		for kind, res := range kinds {
			resources = append(resources, map[string]any{"name": res.resource, "kind": kind, "namespaced": res.namespaced,
				"singularName": strings.ToLower(kind), "verbs": []string{"get", "list", "create", "patch", "delete"}})
		}
		reply(http.StatusOK, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
		return
	}
	f.mu.Lock()
	policy := f.policy
	f.mu.Unlock()
	if r.Method == http.MethodGet && p == "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/netns-pin-removal-guard" && policy != nil {
		reply(http.StatusOK, policy)
		return
	}
	reply(http.StatusNotFound, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
		"message": fmt.Sprintf("%s not found", p)})
}

func (f *fakeAPI) set(policy map[string]any) {
	f.mu.Lock()
	f.policy = policy
	f.mu.Unlock()
}

// guardPolicy is the removal guard's policy as a cluster has it, the
// release's (helm's marks of ownership), with these variables (name,
// expression, ...).
func guardPolicy(vars ...string) map[string]any {
	var list []any
	for i := 0; i+1 < len(vars); i += 2 {
		list = append(list, map[string]any{"name": vars[i], "expression": vars[i+1]})
	}
	return map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "netns-pin-removal-guard",
			"labels":      map[string]any{"app.kubernetes.io/managed-by": "Helm"},
			"annotations": map[string]any{"meta.helm.sh/release-name": "netns-pin", "meta.helm.sh/release-namespace": "kube-system"}},
		"spec": map[string]any{"variables": list}}
}

// Against a cluster (helm upgrade, or template --dry-run=server) the
// removal guard's two variables are the ones of the policy in place,
// which the controller wrote: an apply of the chart neither conflicts
// with the controller's fields nor resets the count. No policy, or one
// whose first two variables are not the controller's: the shipped ones.
func TestChartRemovalGuardKeepsTheLiveCount(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	home := t.TempDir()
	kubeconfig := filepath.Join(home, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: kube-system}}]
current-context: c
`, srv.URL), 0o600))
	helm := helmBin(t)
	chart, err := filepath.Abs(filepath.Join("..", deploy.ChartDir))
	require.NoError(t, err)

	variables := func() []any {
		t.Helper()
		cmd := exec.Command(helm, "template", "netns-pin", chart, "--namespace", "kube-system", "--dry-run=server", "--disable-openapi-validation",
			"--show-only", "templates/removal-guard.yaml")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+home,
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_DATA_HOME="+filepath.Join(home, "data"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s", stderr.String())
		objs, err := deploy.ObjectsOf("removal-guard.yaml", stdout.Bytes())
		require.NoError(t, err)
		require.NotEmpty(t, objs)
		vars, _ := get(objs[0], "spec", "variables").([]any)
		require.GreaterOrEqual(t, len(vars), 2)
		return vars[:2]
	}
	shipped := []any{map[string]any{"name": "podsWithFinalizer", "expression": "-1"}, map[string]any{"name": "pods", "expression": "''"}}

	assert.Equal(t, shipped, variables(), "no policy yet (helm install)")

	api.set(guardPolicy("podsWithFinalizer", "2", "pods", "'rook-ceph/csi-holder-a, rook-ceph/csi-holder-b'"))
	assert.Equal(t, []any{
		map[string]any{"name": "podsWithFinalizer", "expression": "2"},
		map[string]any{"name": "pods", "expression": "'rook-ceph/csi-holder-a, rook-ceph/csi-holder-b'"},
	}, variables(), "the controller's count")

	api.set(guardPolicy("podsWithFinalizer", "0", "pods", "''"))
	assert.Equal(t, []any{
		map[string]any{"name": "podsWithFinalizer", "expression": "0"},
		map[string]any{"name": "pods", "expression": "''"},
	}, variables(), "no pod carries the finalizer")

	api.set(guardPolicy("pods", "'x/y'", "podsWithFinalizer", "1"))
	assert.Equal(t, shipped, variables(), "not the controller's variables where it writes them")
	api.set(guardPolicy("podsWithFinalizer", "1"))
	assert.Equal(t, shipped, variables(), "one variable only")
}

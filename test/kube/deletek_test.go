package kube

// `kubectl delete -k deploy/` while a holder carries netns-pin.io/pin:
// refused by deploy/removal-guard.yaml for everything the release needs,
// with what to do first; the admission policies, exempt from admission,
// stay in force as long as the finalizer is carried.

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/deploy"
	"github.com/netns-pin/netns-pin/internal/host"
)

// guardedObjects are the objects of deploy/'s kustomization labelled
// netns-pin.io/removal: guarded, as kubectl names them (kind/name).
func (c *cluster) guardedObjects(t *testing.T) []string {
	t.Helper()
	k, err := deploy.Objects(filepath.Join(c.repo, "deploy", "kustomization.yaml"))
	require.NoError(t, err)
	require.Len(t, k, 1)
	var out []string
	for _, file := range get(k[0], "resources").([]any) {
		objs, err := deploy.Objects(filepath.Join(c.repo, "deploy", file.(string)))
		require.NoError(t, err)
		for _, o := range objs {
			if str(o, "metadata", "labels", "netns-pin.io/removal") == "guarded" {
				out = append(out, strings.ToLower(str(o, "kind"))+"/"+str(o, "metadata", "name"))
			}
		}
	}
	require.NotEmpty(t, out, "deploy/ guards nothing")
	return out
}

// guardPolicies are deploy/'s admission policies; each has a binding of
// the same name.
var guardPolicies = controller.GuardPolicies

type objectMeta struct {
	Metadata struct {
		Name              string     `json:"name"`
		DeletionTimestamp *time.Time `json:"deletionTimestamp"`
		Finalizers        []string   `json:"finalizers"`
	} `json:"metadata"`
	Spec struct {
		Variables []struct {
			Name       string `json:"name"`
			Expression string `json:"expression"`
		} `json:"variables"`
	} `json:"spec"`
}

// object is kind/name (of kube-system when namespaced), or nil when it is
// not there.
func (c *cluster) object(t *testing.T, kindName string) *objectMeta {
	t.Helper()
	r := c.kubectl("-n", agentNS, "get", kindName, "-o", "json", "--ignore-not-found")
	require.NoError(t, r.Err, "%s", r)
	if strings.TrimSpace(r.Stdout) == "" {
		return nil
	}
	var o objectMeta
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &o), "%s", r.Stdout)
	return &o
}

// guardCount is the count the controller wrote into the removal guard's
// policy.
func (c *cluster) guardCount(t *testing.T) string {
	t.Helper()
	o := c.object(t, "validatingadmissionpolicy/"+controller.GuardPolicyName)
	require.NotNil(t, o, "the removal guard's policy")
	for _, v := range o.Spec.Variables {
		if v.Name == controller.GuardCountVar {
			return v.Expression
		}
	}
	return ""
}

// Scenario: a holder with a client carries the finalizer. `kubectl delete
// -k deploy/` is refused for every guarded object with a message naming
// the pod and what to do first, and only the admission policies and the
// network go: the policies stay Terminating, in force (a second try is
// refused the same way). The holder deleted drains, the agent still lifts
// its finalizer once the client leaves; then the count is 0, the policies
// go, and `kubectl delete -k deploy/` removes the rest without a pod left
// behind.
func TestDeleteKustomizationWhilePinned(t *testing.T) {
	c := requireCluster(t)
	c.reinstallAtEnd(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	held := h.waitHolder(t)
	cl := startClient(t, h.link)
	require.Equal(t, held.sb.netns, cl.netns)
	require.True(t, host.Poll(podTimeout, 200*time.Millisecond, func() bool { return c.guardCount(t) == "1" }),
		"the controller's count is %q, not 1", c.guardCount(t))
	for _, name := range guardPolicies {
		for _, kind := range []string{"validatingadmissionpolicy", "validatingadmissionpolicybinding"} {
			o := c.object(t, kind+"/"+name)
			require.NotNil(t, o, "%s/%s", kind, name)
			assert.Contains(t, o.Metadata.Finalizers, "netns-pin.io/removal-guard", "%s/%s", kind, name)
		}
	}

	guarded := c.guardedObjects(t)
	deleteK := func() host.CmdResult {
		return c.kubectl("delete", "-k", filepath.Join(c.repo, "deploy"), "--ignore-not-found", "--timeout=60s")
	}
	for try := 1; try <= 2; try++ {
		r := deleteK()
		require.Error(t, r.Err, "kubectl delete -k deploy/ (try %d) was not refused: %s", try, r)
		t.Logf("kubectl delete -k deploy/ while %s is pinned (try %d):\n%s%s", held.pod, try, r.Stdout, r.Stderr)
		want := "1 pods carry the netns-pin.io/pin finalizer (" + held.pod.String() + ")"
		for _, obj := range guarded {
			o := c.object(t, obj)
			require.NotNil(t, o, "%s was deleted", obj)
			assert.Nil(t, o.Metadata.DeletionTimestamp, "%s is being deleted", obj)
			kind, name, _ := strings.Cut(obj, "/")
			assert.Regexp(t, `(?m)^Error from server \(Forbidden\): .*`+kind+`s(\.\S+)? "`+name+`" is forbidden: ValidatingAdmissionPolicy 'netns-pin-removal-guard'.*`+
				regexp.QuoteMeta(want), r.Stderr, "the refusal of %s", obj)
		}
		assert.Contains(t, r.Stderr, `docs/operating.md, "Removing netns-pin"`)
		for _, name := range guardPolicies {
			for _, kind := range []string{"validatingadmissionpolicy", "validatingadmissionpolicybinding"} {
				o := c.object(t, kind+"/"+name)
				require.NotNil(t, o, "%s/%s is gone while a pod carries the finalizer", kind, name)
				assert.NotNil(t, o.Metadata.DeletionTimestamp, "%s/%s", kind, name)
			}
		}
	}

	// what the message says: the holder goes, drains, and is released
	// once its client leaves; the agent still lifts the finalizer
	c.mustKubectl(t, "-n", pinNamespace, "delete", "daemonset", h.name, "--wait=false")
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		rec := c.readRecord(t, held.sb)
		return rec != nil && rec.State == "draining"
	}), "the holder did not turn draining")
	cl.stop(t)
	c.requireReleased(t, h.selector, held.pod, held.sb, 500*time.Millisecond, "the holder did not go after its client left")
	// the count of 0 is written, then the policies let go of (they may be
	// gone before a look at the count)
	require.True(t, host.Poll(podTimeout, 200*time.Millisecond, func() bool {
		for _, name := range guardPolicies {
			if c.object(t, "validatingadmissionpolicy/"+name) != nil || c.object(t, "validatingadmissionpolicybinding/"+name) != nil {
				return false
			}
		}
		return true
	}), "the admission policies stay after the last pod with the finalizer went")

	// the API server learns of a deleted policy through its watch: for a
	// moment after the objects are gone it may still refuse, with the
	// guard's message, as operating.md tells the operator
	var r host.CmdResult
	tries := 0
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		tries++
		r = deleteK()
		if r.Err != nil {
			require.Contains(t, r.Stderr, "ValidatingAdmissionPolicy 'netns-pin-removal-guard'", "kubectl delete -k deploy/ failed for another reason: %s", r)
		}
		return r.Err == nil
	}), "kubectl delete -k deploy/ with no pod carrying the finalizer: %s", r)
	t.Logf("kubectl delete -k deploy/ once no pod carries the finalizer (try %d):\n%s", tries, r.Stdout)
	for _, obj := range guarded {
		assert.Nil(t, c.object(t, obj), "%s is left", obj)
	}
	assert.Empty(t, c.podsWithFinalizer(t))
}

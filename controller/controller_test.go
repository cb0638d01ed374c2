package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/netns-pin/netns-pin/agent"
)

// One pass over a fake API server's objects: the holder of the node out
// of service and NotReady loses netns-pin.io/pin and nothing else, with
// its Event; the holder of a node only NotReady, and the one of a node
// whose Node object has just gone, keep it and are counted as waiting.
func TestPassLiftsOnlyWhatDecideSays(t *testing.T) {
	now := metav1.Now()
	node := func(name string, ready corev1.ConditionStatus, oos bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		if oos {
			n.Spec.Taints = []corev1.Taint{{Key: TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}
		}
		return n
	}
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "any", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7",
			DeletionTimestamp: &now, Finalizers: []string{"example.com/keep", agent.Finalizer}},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	client := fake.NewClientset(node("off", corev1.ConditionFalse, true), node("cut", corev1.ConditionUnknown, false),
		pod("on-off", "off"), pod("on-cut", "cut"), pod("on-gone", "gone"))
	rec := record.NewFakeRecorder(10)
	m := NewMetrics()
	c := New(Config{Client: client, Recorder: rec, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Quarantine: time.Hour, Interval: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), c.synced...))
	recheck := c.pass(ctx)
	assert.WithinDuration(t, time.Now().Add(time.Hour), recheck, time.Minute, "the end of the gone node's quarantine")

	fins := func(name string) []string {
		p, err := client.CoreV1().Pods("any").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return p.Finalizers
	}
	assert.Equal(t, []string{"example.com/keep"}, fins("on-off"))
	assert.Equal(t, []string{"example.com/keep", agent.Finalizer}, fins("on-cut"))
	assert.Equal(t, []string{"example.com/keep", agent.Finalizer}, fins("on-gone"))
	select {
	case ev := <-rec.Events:
		assert.Contains(t, ev, ReasonNodeOutOfService)
		assert.Contains(t, ev, "node off")
	default:
		t.Error("no Event for the lift")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, map[[2]string]int{{"cut", WaitNodeUnreachable}: 1, {"gone", WaitNodeGoneQuarantine}: 1}, m.waiting)
	var lifted dto.Metric
	require.NoError(t, m.lifted.WithLabelValues(ReasonNodeOutOfService).Write(&lifted))
	assert.Equal(t, 1.0, lifted.GetCounter().GetValue())
}

// The removal guard over a fake API server: while pods carry
// netns-pin.io/pin the guard policy's variables hold their count and
// names and every policy and binding has GuardFinalizer (besides its own
// finalizers); once none does, the count of 0 is written and the
// finalizer comes off. A policy that does not exist is no error.
func TestPassKeepsTheRemovalGuard(t *testing.T) {
	pod := func(ns, name string, fins ...string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Finalizers: fins},
			Spec: corev1.PodSpec{NodeName: "n1"}}
	}
	vap := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "guard", Finalizers: []string{"example.com/keep"}},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{Variables: []admissionv1.Variable{
			{Name: "other", Expression: "1"}, {Name: GuardCountVar, Expression: "-1"}, {Name: GuardPodsVar, Expression: "''"}}}}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "guard"}}
	client := fake.NewClientset(vap, binding,
		pod("rook-ceph", "holder-b", agent.Finalizer), pod("other", "holder-a", "example.com/keep", agent.Finalizer),
		pod("rook-ceph", "client", "example.com/keep"))
	c := New(Config{Client: client, Recorder: record.NewFakeRecorder(10), Metrics: NewMetrics(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Quarantine: time.Hour, Interval: time.Hour,
		Guard: Guard{Policy: "guard", Policies: []string{"guard", "absent"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), c.synced...))

	state := func() (map[string]string, []string, []string) {
		v, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "guard", metav1.GetOptions{})
		require.NoError(t, err)
		b, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, "guard", metav1.GetOptions{})
		require.NoError(t, err)
		vars := map[string]string{}
		for _, x := range v.Spec.Variables {
			vars[x.Name] = x.Expression
		}
		return vars, v.Finalizers, b.Finalizers
	}
	c.pass(ctx)
	vars, vf, bf := state()
	assert.Equal(t, map[string]string{"other": "1", GuardCountVar: "2", GuardPodsVar: "'other/holder-a, rook-ceph/holder-b'"}, vars)
	assert.ElementsMatch(t, []string{"example.com/keep", GuardFinalizer}, vf)
	assert.Equal(t, []string{GuardFinalizer}, bf)

	// an apply of deploy/ puts the shipped variables back, a helm rollback
	// an earlier revision's: the watch sees the change, and the next pass
	// (long before Interval) writes the count again
	reset := func(count string) {
		v, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "guard", metav1.GetOptions{})
		require.NoError(t, err)
		v.Spec.Variables[1].Expression = count
		_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Update(ctx, v, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	for _, count := range []string{"-1", "0"} {
		c.guardChanged.Store(false)
		reset(count)
		require.Eventually(t, c.guardChanged.Load, 10*time.Second, 10*time.Millisecond, "the watch sees %s written", count)
		c.pass(ctx)
		vars, _, _ = state()
		assert.Equal(t, "2", vars[GuardCountVar], "written again after %s was applied", count)
	}
	// without a watch event, read again every Interval
	c.guardChanged.Store(false)
	c.guard.count = "stale" // as if the last write were another count
	c.guard.checked = time.Now().Add(-time.Hour)
	c.pass(ctx)
	assert.Equal(t, "2", c.guard.count, "read and checked again after Interval")

	for _, p := range []struct{ ns, name string }{{"rook-ceph", "holder-b"}, {"other", "holder-a"}} {
		require.NoError(t, client.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool {
		pods, err := c.pods.List(labels.Everything())
		return err == nil && len(pods) == 1
	}, 10*time.Second, 10*time.Millisecond, "the informer sees the deletes")
	c.pass(ctx)
	vars, vf, bf = state()
	assert.Equal(t, map[string]string{"other": "1", GuardCountVar: "0", GuardPodsVar: "''"}, vars)
	assert.Equal(t, []string{"example.com/keep"}, vf)
	assert.Empty(t, bf)
}

// guardExpressions names at most guardPods pods, sorted, and says how
// many more, as a CEL string.
func TestGuardExpressions(t *testing.T) {
	var pods []string
	for i := range guardPods + 3 {
		pods = append(pods, fmt.Sprintf("ns/p%02d", i))
	}
	count, names := guardExpressions(pods)
	assert.Equal(t, "13", count)
	assert.True(t, strings.HasPrefix(names, "'ns/p00, ns/p01, "), names)
	assert.True(t, strings.HasSuffix(names, "ns/p09 and 3 more'"), names)
	count, names = guardExpressions(nil)
	assert.Equal(t, "0", count)
	assert.Equal(t, "''", names)
	assert.Equal(t, `'a\\b\'c'`, celString(`a\b'c`))
}

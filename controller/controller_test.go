package controller

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	assert.Equal(t, uint64(1), m.lifted[ReasonNodeOutOfService])
}

package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	q := DefaultQuarantine
	holder := Pod{Namespace: "rook-ceph", Name: "holder-x", UID: "u1", Node: "n1", Finalizer: true, Deleting: true}
	ready := Node{Present: true, Ready: corev1.ConditionTrue, AgentReady: true}
	for _, tc := range []struct {
		name    string
		pod     Pod
		node    Node
		lift    bool
		reason  string
		waiting string
		recheck time.Time
	}{
		{name: "gone, first seen now", pod: holder, node: Node{}, waiting: WaitNodeGoneQuarantine, recheck: now.Add(q)},
		{name: "gone for less than the quarantine", pod: holder, node: Node{MissingSince: now.Add(-q + time.Second)},
			waiting: WaitNodeGoneQuarantine, recheck: now.Add(time.Second)},
		{name: "gone for exactly the quarantine", pod: holder, node: Node{MissingSince: now.Add(-q)}, lift: true, reason: ReasonNodeGone},
		{name: "gone for longer", pod: holder, node: Node{MissingSince: now.Add(-10 * time.Minute)}, lift: true, reason: ReasonNodeGone},
		{name: "out of service and NotReady", pod: holder, node: Node{Present: true, OutOfService: true, Ready: corev1.ConditionFalse},
			lift: true, reason: ReasonNodeOutOfService},
		{name: "out of service and Unknown", pod: holder, node: Node{Present: true, OutOfService: true, Ready: corev1.ConditionUnknown},
			lift: true, reason: ReasonNodeOutOfService},
		{name: "out of service without a Ready condition", pod: holder, node: Node{Present: true, OutOfService: true},
			lift: true, reason: ReasonNodeOutOfService},
		{name: "out of service but Ready", pod: holder, node: Node{Present: true, OutOfService: true, Ready: corev1.ConditionTrue, AgentReady: true},
			waiting: WaitReleasePending},
		{name: "Ready, its agent not", pod: holder, node: Node{Present: true, Ready: corev1.ConditionTrue}, waiting: WaitAgentNotReady},
		{name: "unreachable, its agent not ready", pod: holder, node: Node{Present: true, Ready: corev1.ConditionUnknown}, waiting: WaitNodeUnreachable},
		{name: "NotReady only", pod: holder, node: Node{Present: true, Ready: corev1.ConditionFalse}, waiting: WaitNodeUnreachable},
		{name: "Unknown only", pod: holder, node: Node{Present: true, Ready: corev1.ConditionUnknown}, waiting: WaitNodeUnreachable},
		{name: "no Ready condition, no taint", pod: holder, node: Node{Present: true}, waiting: WaitNodeUnreachable},
		{name: "Ready", pod: holder, node: ready, waiting: WaitReleasePending},
		{name: "not deleting, node gone long ago", pod: Pod{Namespace: "a", Name: "b", UID: "u", Node: "n1", Finalizer: true},
			node: Node{MissingSince: now.Add(-time.Hour)}},
		{name: "not deleting, out of service", pod: Pod{Namespace: "a", Name: "b", UID: "u", Node: "n1", Finalizer: true},
			node: Node{Present: true, OutOfService: true, Ready: corev1.ConditionFalse}},
		{name: "finalizer absent", pod: Pod{Namespace: "a", Name: "b", UID: "u", Node: "n1", Deleting: true},
			node: Node{MissingSince: now.Add(-time.Hour)}},
		{name: "not bound", pod: Pod{Namespace: "a", Name: "b", UID: "u", Finalizer: true, Deleting: true},
			node: Node{MissingSince: now.Add(-time.Hour)}},
		{name: "read error, node gone long ago in the cache", pod: holder,
			node: Node{Err: errors.New("connection refused"), MissingSince: now.Add(-time.Hour)}, waiting: WaitNodeUnreadable},
		{name: "read error, out of service", pod: holder,
			node: Node{Err: errors.New("forbidden"), Present: true, OutOfService: true, Ready: corev1.ConditionFalse}, waiting: WaitNodeUnreadable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.pod, tc.node, now, q)
			assert.Equal(t, tc.lift, d.Lift, "lift")
			assert.Equal(t, tc.reason, d.Reason, "event reason")
			assert.Equal(t, tc.waiting, d.Waiting, "waiting reason")
			assert.Equal(t, tc.recheck, d.RecheckAt, "recheck")
			if d.Lift {
				assert.Contains(t, d.Message, tc.pod.Node, "the Event names the node")
				assert.Empty(t, d.Waiting)
			}
		})
	}
}

func TestNodeOf(t *testing.T) {
	n := NodeOf(&corev1.Node{
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other"}, {Key: TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown},
		}},
	})
	assert.Equal(t, Node{Present: true, OutOfService: true, Ready: corev1.ConditionUnknown}, n)
	assert.Equal(t, Node{Present: true}, NodeOf(&corev1.Node{}))
}

// The nodes with a Ready agent pod: by the agent's label, Ready, not
// being deleted; other pods and agents not Ready do not count.
func TestReadyAgents(t *testing.T) {
	pod := func(name, node, label string, ready corev1.ConditionStatus, deleting bool) *corev1.Pod {
		p := &corev1.Pod{}
		p.Name, p.Spec.NodeName = name, node
		p.Labels = map[string]string{AgentLabel: label}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		slim, err := slimPod(p)
		assert.NoError(t, err)
		return slim.(*corev1.Pod)
	}
	got := readyAgents([]*corev1.Pod{
		pod("a1", "n1", AgentName, corev1.ConditionTrue, false),
		pod("a2", "n2", AgentName, corev1.ConditionFalse, false),
		pod("a3", "n3", AgentName, corev1.ConditionTrue, true),
		pod("h4", "n4", "csi-holder", corev1.ConditionTrue, false),
	})
	assert.Equal(t, map[string]bool{"n1": true}, got)
}

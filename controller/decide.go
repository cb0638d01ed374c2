// Package controller is netns-pin's cluster controller
// (cmd/netns-pin-controller): it lifts the finalizer netns-pin.io/pin of
// holders whose node is gone for good, which no node agent can do any
// more (docs/design.md, "The cluster controller: nodes that go away").
//
// A node's agent lifts the finalizer once its store no longer names the
// pod. A node whose Node object was deleted (scale-down, a replaced pool,
// a reclaimed spot machine) or that the cluster declared off with the
// node.kubernetes.io/out-of-service taint has no agent and no pins: its
// holders would stay Terminating, and their IPAM leases leased, for ever.
// A node that is only NotReady or Unknown may be partitioned, its pins
// still carrying Ceph clients: its holders keep the finalizer.
//
// The controller is level-based like the agent: each pass looks at the
// pods and nodes of its informers' caches and acts on what they say now;
// a lift is confirmed by reading the node from the API server first. This
// file is the decision, a pure function; controller.go feeds it.
package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TaintOutOfService is the taint by which the cluster states that a node's
// machine is off (the one that lets volumes of its pods detach).
const TaintOutOfService = "node.kubernetes.io/out-of-service"

// DefaultQuarantine is how long a Node object must be gone before its
// holders are let go: kube-controller-manager's pod GC deletes the pods of
// a node that is gone after the same 40 s, in case the Node object comes
// back (a node re-registering).
const DefaultQuarantine = 40 * time.Second

// Event reasons the controller posts on the holders it lets go.
const (
	ReasonNodeGone         = "NetnsPinNodeGone"
	ReasonNodeOutOfService = "NetnsPinNodeOutOfService"
)

// Why a holder being deleted still carries the finalizer: the reason
// label of netns_pin_controller_holders_waiting.
const (
	// WaitReleasePending: the node is there and Ready; its agent lifts the
	// finalizer once the pin is released.
	WaitReleasePending = "released_pending"
	// WaitAgentNotReady: the node is Ready but no Ready node agent pod
	// runs on it: nothing lifts the finalizer after the release until
	// one does.
	WaitAgentNotReady = "agent_not_ready"
	// WaitNodeUnreachable: the node is NotReady or Unknown (a partition,
	// a reboot): its pins may still carry clients.
	WaitNodeUnreachable = "node_unreachable"
	// WaitNodeGoneQuarantine: the Node object is gone, for less than the
	// quarantine.
	WaitNodeGoneQuarantine = "node_gone_quarantine"
	// WaitNodeUnreadable: the node could not be read: nothing is decided.
	WaitNodeUnreadable = "node_unreadable"
	// WaitLiftFailed: a lift was due and its request failed; the next pass
	// tries again.
	WaitLiftFailed = "lift_failed"
)

// Pod is what a decision needs of a pod object.
type Pod struct {
	Namespace, Name, UID string
	// Node is spec.nodeName ("": not bound, never pinned anywhere).
	Node string
	// Finalizer: the pod carries netns-pin.io/pin.
	Finalizer bool
	// Deleting: the pod has a deletionTimestamp.
	Deleting bool
}

// Node is what a decision needs of the pod's node, as one read saw it.
type Node struct {
	// Err: the node could not be read (an API error, caches not synced):
	// nothing is decided on it.
	Err error
	// Present: the Node object exists.
	Present bool
	// MissingSince is when the controller first saw the Node object
	// missing (zero while present). It is this process's own observation:
	// a restart starts it again, which only delays a lift.
	MissingSince time.Time
	// Ready is the status of the node's Ready condition ("" when it has
	// none).
	Ready corev1.ConditionStatus
	// OutOfService: the node carries the out-of-service taint.
	OutOfService bool
	// AgentReady: a pod of the node agent on the node is Ready.
	AgentReady bool
}

// Decision is what to do about one pod.
type Decision struct {
	// Lift: remove the finalizer, with an Event of Reason and Message.
	Lift            bool
	Reason, Message string
	// Waiting is why the finalizer stays ("" for pods the controller does
	// not count: not being deleted, without the finalizer, not bound).
	Waiting string
	// RecheckAt is when the decision may change with no change of the
	// objects (the end of the quarantine); zero when it cannot.
	RecheckAt time.Time
}

// Decide is the controller's decision on one pod. It lifts the finalizer
// only of a pod being deleted, carrying it, bound to a node that is gone
// for at least quarantine or that carries the out-of-service taint and is
// not Ready: the pod's pins went with the machine. Anything else, and
// any read error, keeps it.
func Decide(p Pod, n Node, now time.Time, quarantine time.Duration) Decision {
	if !p.Finalizer || !p.Deleting || p.Node == "" {
		return Decision{}
	}
	switch {
	case n.Err != nil:
		return Decision{Waiting: WaitNodeUnreadable}
	case !n.Present && n.MissingSince.IsZero():
		// gone, but since when is not known: the quarantine starts now
		return Decision{Waiting: WaitNodeGoneQuarantine, RecheckAt: now.Add(quarantine)}
	case !n.Present && now.Sub(n.MissingSince) < quarantine:
		return Decision{Waiting: WaitNodeGoneQuarantine, RecheckAt: n.MissingSince.Add(quarantine)}
	case !n.Present:
		return Decision{Lift: true, Reason: ReasonNodeGone, Message: fmt.Sprintf(
			"node %s is gone (no Node object for %s): its pins went with it; finalizer netns-pin.io/pin lifted by netns-pin-controller",
			p.Node, now.Sub(n.MissingSince).Round(time.Second))}
	case n.OutOfService && n.Ready != corev1.ConditionTrue:
		return Decision{Lift: true, Reason: ReasonNodeOutOfService, Message: fmt.Sprintf(
			"node %s carries the taint %s and is not Ready (%s): it is off, its pins went with it; finalizer netns-pin.io/pin lifted by netns-pin-controller",
			p.Node, TaintOutOfService, readyString(n.Ready))}
	case n.Ready == corev1.ConditionTrue && !n.AgentReady:
		return Decision{Waiting: WaitAgentNotReady}
	case n.Ready == corev1.ConditionTrue:
		return Decision{Waiting: WaitReleasePending}
	default:
		return Decision{Waiting: WaitNodeUnreachable}
	}
}

func readyString(s corev1.ConditionStatus) string {
	if s == "" {
		return "no Ready condition"
	}
	return "Ready " + string(s)
}

// NodeOf reads what a decision needs of a Node object.
func NodeOf(obj *corev1.Node) Node {
	n := Node{Present: true}
	for _, c := range obj.Status.Conditions {
		if c.Type == corev1.NodeReady {
			n.Ready = c.Status
		}
	}
	for _, t := range obj.Spec.Taints {
		if t.Key == TaintOutOfService {
			n.OutOfService = true
		}
	}
	return n
}

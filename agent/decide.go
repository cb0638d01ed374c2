// Package agent is the node agent of netns-pin (cmd/netns-pin-agent): it
// keeps the holder pod's object in the API for as long as its pin exists
// on the node (docs/design.md, "The node agent"). IPAM controllers act on
// pod objects: whereabouts' ip-control-loop frees every address of a pod
// the moment its object leaves the API, so a holder force-deleted (or torn
// down by a runtime that gives up after one DEL) would hand its address to
// the next pod while the pinned netns still uses it. The finalizer
// netns-pin.io/pin keeps the object, Terminating, until the agent sees
// that no record of the node names the pod any more.
//
// The agent is level-based: each pass looks at the pods of its node (an
// informer's cache) and at the store's records (read from disk) and acts
// on what both say now, never on an event it might have missed. This file
// is that decision, a pure function; controller.go feeds it and carries
// out its actions.
package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// Finalizer is what keeps a holder's object in the API until its pin is
// released.
const Finalizer = netnsstore.PodFinalizer

// Pod is what a decision needs of a pod object.
type Pod struct {
	Namespace, Name, UID string
	// Finalizer: the pod carries netns-pin.io/pin.
	Finalizer bool
	// Deleting: the object has a deletionTimestamp. No finalizer can be
	// added to it any more (the API refuses), and one that no record
	// justifies may go.
	Deleting bool
}

func (p Pod) key() string { return p.Namespace + "/" + p.Name }

// Pin is what a decision needs of a record of the node.
type Pin struct {
	Attachment, Cluster string
	PodNamespace        string
	PodName             string
	PodUID              string
	Links               []string
	State               string
	Abandoned           bool
	DrainingSince       time.Time
	Updated             time.Time
	References          []string
	// StateDir and PinDir are the pin's store, as the host names them.
	StateDir, PinDir string
}

// names tells whether the pin is the pod's. The UID decides; a record
// without one (written from CNI_ARGS without K8S_POD_UID) is matched by
// namespace and name, which may keep the finalizer of a newer pod of the
// same name, the safe direction.
func (p Pin) names(pod Pod) bool {
	if p.PodUID != "" {
		return p.PodUID == pod.UID
	}
	return p.PodNamespace == pod.Namespace && p.PodName == pod.Name
}

// View is the store as one pass read it.
type View struct {
	Pins []Pin
	// Unreadable counts records that could not be read: any of them may
	// name any pod.
	Unreadable int
	// Err is why the store registry could not be listed at all.
	Err error
	// Stores is how many stores are registered; UnreadStores says why
	// each registered store that could not be read could not be: any of
	// them may name any pod.
	Stores       int
	UnreadStores []string
}

// Plan is what a pass does about finalizers.
type Plan struct {
	// Add: holders pinned on this node whose object lacks the finalizer
	// and is not being deleted (Rook 1.9-1.15's own holder DaemonSets,
	// whose template cannot carry it).
	Add []Pod
	// Lift: pods being deleted that carry the finalizer and that no record
	// names: released, or never pinned (ADD failed, not a holder).
	Lift []Pod
	// Unprotected: pins whose pod object is gone from the API, or is
	// being deleted without the finalizer; the agent can do nothing for
	// them (docs/operating.md, "The window the agent cannot cover").
	Unprotected []Pin
	// Blocked says why nothing is lifted this pass ("" when lifts go).
	Blocked string
}

// Decide is the agent's decision on finalizers, from the pods of its node
// and the store's records alone. A finalizer is lifted only when no record
// names the pod, after its release; when the store cannot be read whole,
// nothing is (a read error means "in use", as everywhere in netns-pin).
func Decide(pods []Pod, v View) Plan {
	var plan Plan
	switch {
	case v.Err != nil:
		plan.Blocked = "the stores of the node cannot be found: " + v.Err.Error()
	case len(v.UnreadStores) > 0:
		plan.Blocked = "a registered store cannot be read, and may name any pod: " + strings.Join(v.UnreadStores, "; ")
	case v.Unreadable > 0:
		plan.Blocked = "a record of the store cannot be read, and may name any pod"
	}
	for _, p := range pods {
		pinned := slices.ContainsFunc(v.Pins, func(pin Pin) bool { return pin.names(p) })
		switch {
		case pinned && !p.Finalizer && !p.Deleting:
			plan.Add = append(plan.Add, p)
		case !pinned && p.Finalizer && p.Deleting && plan.Blocked == "":
			plan.Lift = append(plan.Lift, p)
		}
	}
	for _, pin := range v.Pins {
		i := slices.IndexFunc(pods, func(p Pod) bool { return pin.names(p) })
		if i < 0 || (!pods[i].Finalizer && pods[i].Deleting) {
			plan.Unprotected = append(plan.Unprotected, pin)
		}
	}
	return plan
}

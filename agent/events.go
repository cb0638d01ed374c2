package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/human"
	"github.com/netns-pin/netns-pin/internal/refusal"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// Event reasons the agent posts on holder pods.
const (
	ReasonPinned         = "NetnsPinned"
	ReasonRefused        = "NetnsReleaseRefused"
	ReasonAbandoned      = "NetnsTeardownAbandoned"
	ReasonReleased       = "NetnsReleased"
	ReasonLifted         = "NetnsPinFinalizerLifted"
	eventNormal          = "Normal"
	eventWarning         = "Warning"
	stateNone            = ""
	refusalRepeatsAtMost = 30 * time.Second
)

// PodEvent is one Event to post on a pod.
type PodEvent struct {
	UID          string
	Type, Reason string
	Message      string
	Repeat       bool // the same state again (another refused DEL): the recorder counts it
}

// Tracker turns what each pass sees into Events: one per change of a
// pin's state (pinned, release refused with what uses it, abandoned by
// the runtime, released), and for a refusal one more each time another
// DEL is refused, at most every refusalRepeatsAtMost, which the event
// recorder folds into the count of the first (kubectl describe shows
// "xN over ..."). It remembers only what this process saw: after a
// restart the current state of every pin is posted once more, and a
// release that happened while it was away has no Released event (the
// finalizer is lifted with NetnsPinFinalizerLifted instead).
type Tracker struct {
	seen map[string]seen // pod UID
}

type seen struct {
	state, message string
	posted         time.Time // last post of this state
	updated        time.Time // the record's Updated at that post
	pin            Pin
}

// Observe compares the pins of pods with what the tracker saw last and
// returns the Events to post. Pins whose pod is not among pods get none
// (there is no object to post on).
func (t *Tracker) Observe(pods []Pod, v View, now time.Time) []PodEvent {
	if t.seen == nil {
		t.seen = map[string]seen{}
	}
	var out []PodEvent
	present := map[string]bool{}
	for _, p := range pods {
		i := slices.IndexFunc(v.Pins, func(pin Pin) bool { return pin.names(p) })
		if i < 0 {
			continue
		}
		pin := &v.Pins[i]
		present[p.UID] = true
		typ, reason, msg := describe(*pin)
		prev, had := t.seen[p.UID]
		switch {
		case reason == stateNone:
			// intent or releasing: the next operation settles it
		case !had || prev.state != reason || prev.message != msg:
			out = append(out, PodEvent{UID: p.UID, Type: typ, Reason: reason, Message: msg})
			t.seen[p.UID] = seen{state: reason, message: msg, posted: now, updated: pin.Updated, pin: *pin}
		case reason == ReasonRefused && pin.Updated.After(prev.updated) && now.Sub(prev.posted) >= refusalRepeatsAtMost:
			out = append(out, PodEvent{UID: p.UID, Type: typ, Reason: reason, Message: msg, Repeat: true})
			prev.posted, prev.updated, prev.pin = now, pin.Updated, *pin
			t.seen[p.UID] = prev
		default:
			prev.pin = *pin
			t.seen[p.UID] = prev
		}
	}
	if v.Err != nil || v.Unreadable > 0 || len(v.UnreadStores) > 0 {
		return out // a pin not seen may be one not read
	}
	for uid, prev := range t.seen {
		if present[uid] {
			continue
		}
		delete(t.seen, uid)
		if slices.ContainsFunc(v.Pins, func(p Pin) bool { return p.PodUID == uid }) {
			continue // pinned, but its pod is not in the informer's cache
		}
		if !slices.ContainsFunc(pods, func(p Pod) bool { return p.UID == uid }) {
			continue
		}
		msg := "netns released: nothing uses it any more"
		if !prev.pin.DrainingSince.IsZero() {
			msg = fmt.Sprintf("netns released after draining %s: nothing uses it any more", human.Age(now.Sub(prev.pin.DrainingSince)))
		}
		out = append(out, PodEvent{UID: uid, Type: eventNormal, Reason: ReasonReleased, Message: msg})
	}
	return out
}

// describe is the Event a pin's state calls for.
func describe(p Pin) (typ, reason, msg string) {
	switch p.State {
	case netnsstore.StateActive:
		links := strings.Join(p.Links, ", ")
		if links == "" {
			links = "none"
		}
		return eventNormal, ReasonPinned, fmt.Sprintf("netns pinned for Ceph cluster %s (attachment %s); links: %s", p.Cluster, p.Attachment, links)
	case netnsstore.StateDraining, netnsstore.StateUnpinned:
		if p.Abandoned {
			return eventWarning, ReasonAbandoned, fmt.Sprintf("the runtime gave up on this pod's network teardown after a refused DEL and will not retry; "+
				"the netns of cluster %s stays pinned, left to netns-pinctl sweep, which runs the chain's DEL and releases it once nothing uses it (see: %s)",
				p.Cluster, inUseCommand(p))
		}
		if len(p.References) == 0 {
			return eventWarning, ReasonRefused, fmt.Sprintf("netns-pin: cluster %s: holder pod %s/%s: the release was refused, what uses the netns could not be read (see: %s)",
				p.Cluster, p.PodNamespace, p.PodName, inUseCommand(p))
		}
		return eventWarning, ReasonRefused, refusal.Message(p.Cluster, p.PodNamespace, p.PodName, p.References, inUseCommand(p))
	}
	return "", stateNone, ""
}

// inUseCommand is the command that lists what uses the pin, as the
// plugin's refusal names it: with its store's folders when they are not
// the defaults.
func inUseCommand(p Pin) string {
	c := conf.Config{StateDir: p.StateDir, PinDir: p.PinDir}
	for _, ps := range conf.PathSettings {
		if *ps.Field(&c) == "" {
			*ps.Field(&c) = ps.Default
		}
	}
	return c.InUseCommand(p.Attachment)
}

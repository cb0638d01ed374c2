package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The removal guard (deploy/removal-guard.yaml, docs/design.md "The
// removal guard"): an admission policy refuses to delete what the lift of
// netns-pin.io/pin needs while pods carry it. A policy cannot count pods,
// so the leader writes the count into two variables of the policy, and
// keeps GuardFinalizer on netns-pin's admission policies while the count
// is not 0: policies are exempt from admission, and a finalizer is what
// keeps a deleted one in force.
//
// The count is in the policy itself, not in a parameter object: the API
// server of Kubernetes 1.34 keeps evaluating a parameter of a policy
// deleted and created again with the values it had at the deletion.

// GuardFinalizer is the controller's finalizer on the admission policies
// and their bindings while pods carry netns-pin.io/pin.
const GuardFinalizer = "netns-pin.io/removal-guard"

// deploy/removal-guard.yaml's names: the guard's policy, its two
// variables, and netns-pin's admission policies, each with a binding of
// the same name.
const (
	GuardPolicyName = "netns-pin-removal-guard"
	GuardCountVar   = "podsWithFinalizer"
	GuardPodsVar    = "pods"
)

var GuardPolicies = []string{GuardPolicyName, "netns-pin-agent-own-node", "netns-pin-controller-lift-only"}

// Guard names what the controller keeps up to date; a zero Guard is off.
type Guard struct {
	// Policy: the policy whose variables carry the count.
	Policy string
	// Policies: those that carry GuardFinalizer while the count is not 0,
	// each with its binding of the same name.
	Policies []string
}

// guardPods is how many of the pods carrying the finalizer the policy
// names: enough for an operator to find them, a bounded size.
const guardPods = 10

// guardState is what the leader last wrote, so that a pass writes only
// what changed; the policy is read again when it changes (an apply of
// deploy/ puts back the shipped "not counted yet", a helm rollback the
// count of its revision) and every Interval.
type guardState struct {
	count, pods string // CEL expressions; "" until written
	checked     time.Time
	finalizers  string // "on", "off", or "" when not known
}

// guardExpressions are the two variables' CEL expressions for these pods
// (namespace/name of each pod that carries netns-pin.io/pin).
func guardExpressions(carrying []string) (count, pods string) {
	slices.Sort(carrying)
	names := carrying[:min(len(carrying), guardPods)]
	list := strings.Join(names, ", ")
	if more := len(carrying) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return strconv.Itoa(len(carrying)), celString(list)
}

// celString is s as a CEL string literal. Names of namespaces and pods
// need no escape; the backslash and the quote are escaped all the same.
func celString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// keepGuard brings the policy's count and the policies' finalizers in line
// with the pods that carry netns-pin.io/pin. An error is counted and
// logged; the next pass tries again.
func (c *Controller) keepGuard(ctx context.Context, carrying []string, now time.Time) {
	if c.cfg.Guard.Policy == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	count, pods := guardExpressions(carrying)
	hold := len(carrying) > 0
	// The finalizers go on first, and come off only once a count of 0 is
	// written: a deleted policy is never let go while the count it holds
	// says pods remain.
	if hold && c.guard.finalizers != "on" && c.setGuardFinalizers(ctx, true) {
		c.guard.finalizers = "on"
	}
	stale := c.guardChanged.Swap(false) || now.Sub(c.guard.checked) >= c.cfg.Interval
	if (stale || c.guard.count != count || c.guard.pods != pods) && c.writeGuardCount(ctx, count, pods) {
		c.guard.count, c.guard.pods, c.guard.checked = count, pods, now
	}
	if !hold && c.guard.count == "0" && c.guard.finalizers != "off" && c.setGuardFinalizers(ctx, false) {
		c.guard.finalizers = "off"
	}
}

// writeGuardCount sets the policy's two variables, unless they are so
// already. The JSON patch tests each variable's name at its index: a
// policy whose variables moved in between is read again at the next pass.
func (c *Controller) writeGuardCount(ctx context.Context, count, pods string) bool {
	api := c.cfg.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	name := c.cfg.Guard.Policy
	fail := func(err error) bool {
		c.cfg.Metrics.apiError("guard_policy")
		c.cfg.Log.Warn("write the count of pods carrying the finalizer into the removal guard: a removal stays refused", "policy", name, "error", err)
		return false
	}
	p, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true // no guard installed: nothing to keep
	case err != nil:
		return fail(err)
	}
	want := map[string]string{GuardCountVar: count, GuardPodsVar: pods}
	var ops []map[string]any
	for i, v := range p.Spec.Variables {
		if ex, ok := want[v.Name]; ok {
			delete(want, v.Name)
			if v.Expression != ex {
				path := fmt.Sprintf("/spec/variables/%d", i)
				ops = append(ops,
					map[string]any{"op": "test", "path": path + "/name", "value": v.Name},
					map[string]any{"op": "replace", "path": path + "/expression", "value": ex})
			}
		}
	}
	if len(want) > 0 {
		return fail(fmt.Errorf("policy %s has no variable %s", name, strings.Join(slices.Sorted(maps.Keys(want)), ", ")))
	}
	if len(ops) == 0 {
		return true
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return fail(err)
	}
	if _, err := api.Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: "netns-pin-controller"}); err != nil {
		return fail(err)
	}
	c.cfg.Log.Info("pods carrying the finalizer", "count", count, "policy", name)
	return true
}

// setGuardFinalizers adds GuardFinalizer to every policy and binding, or
// takes it off: the bindings first, since the API server reads a binding's
// policy when the binding is written. A policy or binding that does not
// exist is not an error (a cluster without it, or one already deleted).
func (c *Controller) setGuardFinalizers(ctx context.Context, on bool) bool {
	patch := map[string]any{"metadata": map[string]any{"finalizers": []string{GuardFinalizer}}}
	if !on {
		patch = map[string]any{"metadata": map[string]any{"$deleteFromPrimitiveList/finalizers": []string{GuardFinalizer}}}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return false
	}
	api := c.cfg.Client.AdmissionregistrationV1()
	opts := metav1.PatchOptions{FieldManager: "netns-pin-controller"}
	ok := true
	for _, name := range c.cfg.Guard.Policies {
		_, err := api.ValidatingAdmissionPolicyBindings().Patch(ctx, name, types.StrategicMergePatchType, body, opts)
		if err == nil || apierrors.IsNotFound(err) {
			_, err = api.ValidatingAdmissionPolicies().Patch(ctx, name, types.StrategicMergePatchType, body, opts)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			c.cfg.Metrics.apiError("guard_policy")
			c.cfg.Log.Warn("the removal guard's finalizer", "policy", name, "on", on, "error", err)
			ok = false
		}
	}
	if ok {
		c.cfg.Log.Info("the removal guard's finalizer", "on", on, "policies", c.cfg.Guard.Policies)
	}
	return ok
}

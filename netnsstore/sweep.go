package netnsstore

import (
	"errors"
	"fmt"
	"slices"
)

// Finding is one thing a sweep changed, or would change with a dry run.
type Finding struct {
	Attachment string   `json:"attachment"`
	Cluster    string   `json:"cluster,omitempty"`
	Action     string   `json:"action"`
	Reason     string   `json:"reason"`
	References []string `json:"references,omitempty"`
}

// Sweep is the operator's GC: it repairs the store (leftovers of crashes
// and earlier boots, lost pins, orphan pins, links) and settles every
// draining or unpinned record, whose DEL the runtime may have stopped
// retrying. With dryRun it changes nothing and reports what it would do.
func (s *Store) Sweep(dryRun bool) ([]Finding, error) {
	if dryRun {
		return s.sweepDryRun()
	}
	var findings []Finding
	err := s.op("", func(v *view) error {
		collected, errs := s.collect(v, held, StateDraining)
		findings = append(v.repaired, collected...)
		return errors.Join(append(errs, v.badErrs()...)...)
	})
	return findings, err
}

// sweepDryRun says what Sweep would do: what repair would do with each
// record, and the in-use check of every draining record, on what a release
// would check (UsesNow).
func (s *Store) sweepDryRun() ([]Finding, error) {
	var out []Finding
	err := s.locked(true, func(v *view) error {
		var errs []error
		out = append(out, v.repaired...) // what the first operation of this boot drops
		blocked := v.blocked()
		for _, r := range v.recs {
			action, reason := s.diagnose(r)
			if action == "" && r.State != StateDraining {
				continue
			}
			f := Finding{Attachment: r.Attachment, Cluster: r.Cluster, Action: action, Reason: reason}
			if action != ActionDrop && action != ActionRepin {
				uses, err := s.UsesNow(r)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				f.Action, f.Reason = ActionRelease, "no longer in use"
				if len(uses) > 0 {
					f.Action, f.Reason = ActionKeep, "still in use"
					for _, u := range uses {
						f.References = append(f.References, u.What)
					}
				}
				if reason != "" {
					f.Reason = reason + ", " + f.Reason
				}
			}
			if blocked != nil && f.Action != ActionKeep && f.Action != ActionRepin {
				// As repair and settle: nothing is released or dropped
				// while a record cannot be read.
				f.Action, f.Reason = ActionKeep, f.Reason+"; postponed while a record cannot be read"
			}
			out = append(out, f)
		}
		out = append(out, s.foreignLinks(v)...)
		orphans, err := s.orphanPins(v)
		errs = append(errs, err)
		for _, n := range orphans {
			f := Finding{Attachment: n, Action: ActionSettle, Reason: "pin without a record"}
			if s.maybeAnothers(v, n) {
				f.Action, f.Reason = ActionKeep, f.Reason+", and "+unownedReason(s.PinDir)
			}
			if blocked != nil && f.Action != ActionKeep {
				f.Action, f.Reason = ActionKeep, f.Reason+"; postponed while a record cannot be read"
			}
			out = append(out, f)
		}
		return errors.Join(append(errs, v.badErrs()...)...)
	})
	return out, err
}

// leavesAbandoned reports whether r is a teardown its runtime abandoned
// and this store cannot finish it: a store opened without
// Options.Teardown (the CNI plugin, which does not link libcni) leaves it
// to the sweeper and netns-pinctl, which run the chain's DEL before the
// pin goes, so that IPAM gets its address back.
func (s *Store) leavesAbandoned(r *Record) bool { return r.Abandoned && s.teardown == nil }

// held selects the records whose pin a runtime's DEL was refused for.
func held(r *Record) bool { return r.State == StateDraining || r.State == StateUnpinned }

// collect settles each record of v that want selects and says what became
// of each: ActionRelease, or ActionKeep with the references that hold it.
// A record that repair settled in this hold is left out (its finding is
// repair's): it would only be checked again.
func (s *Store) collect(v *view, want func(*Record) bool, why string) (findings []Finding, errs []error) {
	for _, r := range slices.Clone(v.recs) {
		if !want(r) || v.checked[r.Attachment] || s.leavesAbandoned(r) {
			continue
		}
		f := Finding{Attachment: r.Attachment, Cluster: r.Cluster, Action: ActionRelease, Reason: why + ", no longer in use"}
		err := s.settle(v, r, nil)
		var iu *InUseError
		switch {
		case errors.As(err, &iu):
			f.Action, f.Reason, f.References = ActionKeep, why+", still in use", iu.References
		case err != nil:
			errs = append(errs, err)
			continue
		}
		findings = append(findings, f)
	}
	return findings, errs
}

// FinishAbandoned is one round of the node sweeper. After repair, every
// draining or unpinned record whose runtime handle on the netns is gone is
// marked abandoned: the runtime gave up on the teardown (CRI-O after one
// failed DEL, Multus without its cache, a sandbox removed by hand) and
// will never retry. Each abandoned record is settled like a DEL; once
// nothing uses the netns, the chain's earlier plugins' DEL runs
// (Options.Teardown) before the pin goes. Draining records whose runtime
// handle still exists are left to the runtime's own retries.
func (s *Store) FinishAbandoned() ([]Finding, error) {
	var findings []Finding
	err := s.op("", func(v *view) error {
		var errs []error
		for _, r := range v.recs {
			if err := s.markAbandoned(r); err != nil {
				errs = append(errs, err)
			}
		}
		var more []error
		findings, more = s.collect(v, func(r *Record) bool { return held(r) && r.Abandoned }, "abandoned by the runtime")
		return errors.Join(append(errs, more...)...)
	})
	return findings, err
}

// foreignLinks reports every link a record lists that points at the pin
// of a record of another cluster: one cluster's volumes would be mapped in
// another's netns.
func (s *Store) foreignLinks(v *view) []Finding {
	var out []Finding
	seen := map[string]bool{}
	for _, r := range v.recs {
		for _, l := range r.Links {
			if seen[r.Cluster+"\x00"+l] {
				continue
			}
			seen[r.Cluster+"\x00"+l] = true
			have, err := s.linkTarget(l)
			if err != nil || have == "" {
				continue
			}
			if o := v.get(have); o != nil && o.Cluster != r.Cluster {
				out = append(out, Finding{Attachment: have, Cluster: r.Cluster, Action: ActionForeignLink,
					Reason: fmt.Sprintf("link %s of cluster %s points at this pin of cluster %s", l, r.Cluster, o.Cluster)})
			}
		}
	}
	return out
}

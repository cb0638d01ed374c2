package netnsstore

import (
	"errors"
	"slices"
)

// Finding is one thing a sweep would change, for `netns-pin gc --dry-run`.
type Finding struct {
	Attachment string   `json:"attachment"`
	Cluster    string   `json:"cluster,omitempty"`
	Action     string   `json:"action"` // "drop", "release", "keep"
	Reason     string   `json:"reason"`
	References []string `json:"references,omitempty"`
}

// Sweep is the operator's GC: it repairs the store (leftovers of crashes
// and earlier boots, orphan pins, dangling links) and retries the release
// of every draining pin, whose DEL the runtime may have stopped retrying.
// With dryRun it changes nothing and reports what it would do.
func (s *Store) Sweep(inUse InUseFunc, dryRun bool) ([]Finding, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	findings := s.repairFindings()
	if !dryRun {
		s.repair()
	}
	rs, errs := s.records()
	draining := func(r *Record) bool {
		return r.State == StateDraining && !slices.ContainsFunc(findings, func(f Finding) bool { return f.Attachment == r.Attachment })
	}
	more, moreErrs := s.collect(rs, draining, "draining", inUse, dryRun)
	findings = append(findings, more...)
	errs = append(errs, moreErrs...)
	return findings, errors.Join(errs...)
}

// repairFindings says what repair would do, without doing it.
func (s *Store) repairFindings() []Finding {
	rs, _ := s.records()
	var out []Finding
	for _, r := range rs {
		if action, why, err := s.diagnose(r); err == nil && action != "" {
			out = append(out, Finding{Attachment: r.Attachment, Cluster: r.Cluster, Action: action, Reason: why})
		}
	}
	orphans, _ := s.orphanPins(rs)
	for _, n := range orphans {
		out = append(out, Finding{Attachment: n, Action: actionDrop, Reason: "pin without a record"})
	}
	return out
}

// collect releases, as DEL would, each record of rs that want selects (with
// dryRun it only runs the in-use check) and says what became of each:
// "release", or "keep" with the references that hold it.
func (s *Store) collect(rs []*Record, want func(*Record) bool, why string, inUse InUseFunc, dryRun bool) ([]Finding, []error) {
	var findings []Finding
	var errs []error
	for _, r := range rs {
		if !want(r) {
			continue
		}
		var refs []string
		var err error
		if dryRun {
			refs, err = inUse(r)
		} else if err = s.release(r, inUse); err != nil {
			var iu *InUseError
			if errors.As(err, &iu) {
				refs, err = iu.References, nil
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f := Finding{Attachment: r.Attachment, Cluster: r.Cluster, Action: actionRelease, Reason: why + ", no longer in use"}
		if len(refs) > 0 {
			f.Action, f.Reason, f.References = actionKeep, why+", still in use", refs
		}
		findings = append(findings, f)
	}
	return findings, errs
}

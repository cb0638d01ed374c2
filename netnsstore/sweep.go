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
	for _, r := range rs {
		if r.State != StateDraining || slices.ContainsFunc(findings, func(f Finding) bool { return f.Attachment == r.Attachment }) {
			continue
		}
		f := Finding{Attachment: r.Attachment, Cluster: r.Cluster, Action: "release", Reason: "draining and no longer in use"}
		if dryRun {
			refs, err := inUse(r)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if len(refs) > 0 {
				f.Action, f.Reason, f.References = "keep", "draining, still in use", refs
			}
		} else {
			err := s.release(r, inUse)
			var iu *InUseError
			switch {
			case errors.As(err, &iu):
				f.Action, f.Reason, f.References = "keep", "draining, still in use", iu.References
			case err != nil:
				errs = append(errs, err)
				continue
			}
		}
		findings = append(findings, f)
	}
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

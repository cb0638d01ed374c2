package netnsstore

import (
	"errors"
	"slices"
)

// linkCandidate: only pins that are whole may be link targets.
func linkCandidate(r *Record) bool {
	return r.State == StateActive || r.State == StateDraining
}

// linkTargetOf applies the link rule of a cluster: its newest active pin,
// or when it has none its newest draining pin, so new volumes keep working
// while the last holder drains. "" when the cluster has no pin.
func linkTargetOf(cluster string, rs []*Record) string {
	var active, draining *Record
	for _, r := range rs { // oldest first: the last match is the newest
		if r.Cluster != cluster {
			continue
		}
		switch r.State {
		case StateActive:
			active = r
		case StateDraining:
			draining = r
		}
	}
	if active != nil {
		return active.Attachment
	}
	if draining != nil {
		return draining.Attachment
	}
	return ""
}

// clusterLinks is every link path that any pin of the cluster asked for.
func clusterLinks(cluster string, rs []*Record) []string {
	var out []string
	for _, r := range rs {
		if r.Cluster != cluster || !linkCandidate(r) {
			continue
		}
		for _, l := range r.Links {
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// relink points every link of cluster at its link target per rs.
func (s *Store) relink(cluster string, rs []*Record) error {
	target := linkTargetOf(cluster, rs)
	if target == "" {
		return nil
	}
	var errs []error
	for _, l := range clusterLinks(cluster, rs) {
		errs = append(errs, s.setLink(l, target))
	}
	return errors.Join(errs...)
}

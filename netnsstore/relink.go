package netnsstore

import (
	"errors"
	"fmt"
	"slices"
)

// ErrLinkTaken is returned by Pin when a link of the cluster is listed by
// a record of another cluster: a link belongs to one cluster (an earlier
// configuration's template rendered two clusters alike, or two clusters of
// one namespace under a per-namespace template such as Rook's
// <namespace>.net.ns).
var ErrLinkTaken = errors.New("link belongs to another cluster")

// refuseTakenLinks fails with ErrLinkTaken when one of links is listed by
// a record of another cluster than cluster. Every state counts: a record
// that is no link target now may become one again (an unpinned pin found
// again).
func refuseTakenLinks(rs []*Record, cluster string, links []string) error {
	for _, l := range links {
		for _, o := range rs {
			if o.Cluster != cluster && slices.Contains(o.Links, l) {
				return fmt.Errorf("link %s of cluster %s: %w: %s (attachment %s, %s)", l, cluster, ErrLinkTaken, o.Cluster, o.Attachment, o.State)
			}
		}
	}
	return nil
}

// linkCandidate: only pins that are whole may be link targets.
func linkCandidate(r *Record) bool {
	return r.State == StateActive || r.State == StateDraining
}

// linkTargetOf applies the link rule of a cluster: its newest active pin,
// or when it has none its newest draining pin, so new volumes keep working
// while the last holder drains. "" when the cluster has no pin.
func linkTargetOf(cluster string, rs []*Record) string {
	for _, state := range []string{StateActive, StateDraining} {
		for _, r := range slices.Backward(rs) { // rs is oldest first
			if r.Cluster == cluster && r.State == state {
				return r.Attachment
			}
		}
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

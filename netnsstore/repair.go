package netnsstore

import (
	"errors"
	"slices"
	"strings"
)

// What an operation does, or would do, with a pinned attachment
// (Finding.Action).

const (
	// ActionDrop: a record of an earlier boot; its netns died with the boot.
	ActionDrop = "drop"
	// ActionRelease: the in-use check found nothing; the pin goes.
	ActionRelease = "release"
	// ActionKeep: in use (or not known to be unused); the pin stays.
	ActionKeep = "keep"
	// ActionSettle: an interrupted or broken entry that the in-use check
	// will decide on (dry runs only).
	ActionSettle = "settle"
	// ActionRepin: a pin unmounted from outside whose netns is still
	// reachable; it is pinned again.
	ActionRepin = "repin"
	// ActionForeignLink: a link of the cluster points at a pin of another
	// cluster (dry runs only; Attachment is that pin, Reason names the
	// link). A link belongs to one cluster: see ErrLinkTaken.
	ActionForeignLink = "foreign-link"
)

// judge is the one decision of what the next operation that takes the
// lock does with r, given its pin (netns, when it is mounted; pinErr when
// it could not be inspected): repair acts on it, the dry run of a sweep
// reports it, list and check say it as "settles at the next operation".
// The action is "" when the record is whole. It never decides that a pin
// of this boot goes: that is settle's, after the in-use check. A pin that
// cannot be inspected decides nothing (an error is no reason to act).
func judge(r *Record, bootID string, netns NetnsID, mounted bool, pinErr error) (action, reason string) {
	whole := pinErr == nil && mounted && netns == r.NetnsID()
	if r.BootID != bootID {
		// Dropped unchecked only when its pin is certainly no mount of its
		// netns: one that is may be of this boot (repair corrects its boot).
		switch {
		case pinErr != nil:
			return "", ""
		case !whole:
			return ActionDrop, "pinned in an earlier boot " + r.BootID
		}
	}
	switch {
	case r.State == StateUnpinned:
		return ActionSettle, "its pin was lost while in use"
	case pinErr != nil || whole:
		return "", ""
	}
	return ActionRepin, "its pin is no longer a mount of its netns"
}

// diagnose is judge on r's pin as it is now.
func (s *Store) diagnose(r *Record) (action, reason string) {
	id, mounted, err := s.pinState(r.Attachment)
	if err != nil {
		s.log.Error("repair: inspect pin", "attachment", r.Attachment, "error", err)
	}
	return judge(r, s.bootID, id, mounted, err)
}

// repair brings the store back to a consistent state after a crash at any
// step, a reboot, or a pin unmounted behind its back. It runs under the
// lock at the start of every operation, so the next ADD, DEL, GC or
// command of any attachment heals what an interrupted one left:
//   - records of another boot: their mounts died with the boot; the links,
//     the leftover pin file and the record go (the one case that needs no
//     in-use check); the plugin hands an abandoned one whose chain's DEL
//     is owed to netns-pinctl (handsOver), whose repair runs it first;
//   - unpinned records: settled (links moved, in-use check, then released
//     or kept);
//   - active or draining records whose pin was unmounted from outside:
//     pinned again from the runtime's handle when it still reaches the
//     netns, settled otherwise;
//   - pin files without a record: released when the in-use check finds
//     nothing;
//   - links: re-pointed by the link rule.
//
// skip names the attachment that the calling operation settles itself.
// While a record cannot be read, nothing is released, unlinked or
// re-linked. Problems
// are logged, not returned: one broken entry must not stop the repair of
// the others, nor the operation that triggered it.
func (s *Store) repair(v *view, skip string) {
	if s.teardown != nil {
		s.finishHandedOver()
	}
	blocked := v.blocked()
	for _, r := range slices.Clone(v.recs) {
		if r.BootID != s.bootID && s.pinnedAs(r) {
			// A mount does not outlive a boot: a pin that still holds
			// the recorded netns is of this boot, whatever the record
			// says (edited by hand, restored from a backup). Only a
			// record whose pin is gone is dropped unchecked.
			s.log.Warn("repair: the record names another boot but its pin is mounted: it is of this boot", "attachment", r.Attachment, "bootID", r.BootID)
			r.BootID = s.bootID
			if err := s.writeRecord(r); err != nil {
				s.log.Error("repair: correct the boot id", "attachment", r.Attachment, "error", err)
			}
		}
		action, reason := s.diagnose(r)
		if action == "" || (r.Attachment == skip && action != ActionDrop) || (action == ActionSettle && s.leavesAbandoned(r)) {
			continue
		}
		if blocked != nil && action != ActionRepin {
			s.log.Error("repair: postponed", "attachment", r.Attachment, "reason", reason, "error", blocked)
			continue
		}
		var err error
		switch action {
		case ActionDrop:
			err = errors.Join(s.moveLinksAway(v, r), s.remove(v, r, false))
		case ActionRepin:
			// Pinned again from the runtime's handle; without one the
			// in-use check decides.
			if h, rerr := s.reach(r, ""); rerr == nil && h != nil {
				err = s.mountPin(h, r.NetnsID(), r.Attachment)
				h.Close()
			} else {
				err = s.settle(v, r, nil)
			}
		case ActionSettle:
			err = s.settle(v, r, nil)
		}
		f := Finding{Attachment: r.Attachment, Cluster: r.Cluster, Action: ActionKeep, Reason: reason}
		var iu *InUseError
		switch {
		case errors.As(err, &iu):
			s.log.Warn("repair: kept in use", "attachment", r.Attachment, "reason", reason, "references", iu.References)
			f.Reason, f.References = reason+", still in use", iu.References
		case err != nil:
			s.log.Error("repair", "attachment", r.Attachment, "reason", reason, "error", err)
			f.Reason = reason + ", left as it was: " + err.Error()
		default:
			s.log.Warn("repair: "+action, "attachment", r.Attachment, "cluster", r.Cluster, "reason", reason)
			f.Action = action
			if action != ActionDrop && v.get(r.Attachment) == nil {
				f.Action, f.Reason = ActionRelease, reason+", no longer in use"
			}
		}
		v.repaired = append(v.repaired, f)
	}
	if blocked != nil {
		// The unreadable record may be any cluster's newest pin: its links
		// stay where they are.
		return
	}
	// Links first: a link that led to an orphan is off it before the
	// orphan's check and release.
	clusters := map[string]bool{}
	for _, r := range v.recs {
		clusters[r.Cluster] = true
	}
	for c := range clusters {
		if err := s.relink(c, v.recs); err != nil {
			s.log.Error("repair: relink", "cluster", c, "error", err)
		}
	}
	s.settleOrphanPins(v)
}

// orphanPins lists files in pins/ that no record owns (nor an unreadable
// one): a record removed by hand, or a pin made by another tool.
func (s *Store) orphanPins(v *view) ([]string, error) {
	names, err := readDirNames(s.pinsFd)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, tmpPrefix) || v.get(n) != nil || v.bad[n] != nil {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// settleOrphanPins removes the pin files no record owns. One that is a
// mount of a netns still in use stays: without a record it has no links,
// but its clients are no less real.
func (s *Store) settleOrphanPins(v *view) {
	names, err := s.orphanPins(v)
	if err != nil {
		s.log.Error("repair: list pins", "error", err)
		return
	}
	for _, n := range names {
		if s.maybeAnothers(v, n) {
			s.log.Warn("repair: kept a pin without a record: "+unownedReason(s.PinDir), "pin", n)
			v.repaired = append(v.repaired, Finding{Attachment: n, Action: ActionKeep, Reason: "pin without a record, and " + unownedReason(s.PinDir)})
			continue
		}
		refs, err := s.settleOrphan(n, false)
		f := Finding{Attachment: n, Action: ActionKeep, Reason: "pin without a record, still in use", References: refs}
		switch {
		case errors.Is(err, errCheckFailed):
			f.Reason = "pin without a record, not known to be unused: " + err.Error()
		case err != nil:
			f.Reason = "pin without a record, left as it was: " + err.Error()
		case len(refs) == 0:
			f.Action, f.Reason = ActionRelease, "pin without a record, not in use"
		}
		v.repaired = append(v.repaired, f)
	}
}

// maybeAnothers reports whether pin name, which has no record here, may be
// another stateDir's: pinDir names no owner yet (claimPinDir leaves it
// unclaimed while such pins exist), and it is a mount, whose clients may
// be seen only on addresses that stateDir's record remembers. A file that
// holds no netns is nobody's pin.
func (s *Store) maybeAnothers(v *view, name string) bool {
	if v.owned {
		return false
	}
	_, mounted, err := s.pinState(name)
	return err != nil || mounted
}

func unownedReason(pinDir string) string {
	return pinDir + " names no stateDir as its owner: it may be another's"
}

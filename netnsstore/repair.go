package netnsstore

import (
	"slices"
	"strings"
)

// repair brings the store back to a consistent state after a crash at any
// step, a reboot, or a pin unmounted behind its back. It runs under the
// lock at the start of every holder operation, so the next ADD, DEL, CHECK
// or GC of any attachment heals what an interrupted one left:
//   - records of another boot: their mounts died with the boot; remove
//     the leftover pin file and the record;
//   - intent (ADD interrupted): roll back, unmount and remove the pin;
//   - releasing (DEL interrupted after its in-use check passed): roll
//     forward and finish the release;
//   - active or draining without a mounted pin: no record without a pin;
//   - pin files without a record: unmount and remove;
//   - links: re-pointed by the link rule, removed when their cluster has
//     no pin left.
//
// Problems are logged, not returned: one broken entry must not stop the
// repair of the others, nor the operation that triggered it.
func (s *Store) repair() {
	rs, errs := s.records()
	for _, err := range errs {
		s.Log.Error("unreadable record", "error", err)
	}
	for _, r := range rs {
		action, why, err := s.diagnose(r)
		switch {
		case err != nil:
			s.Log.Error("repair: inspect pin", "attachment", r.Attachment, "error", err)
			continue
		case action == actionRelease:
			if err := s.finishRelease(r); err != nil {
				s.Log.Error("repair: finish interrupted release", "attachment", r.Attachment, "error", err)
			} else {
				s.Log.Warn("repair: finished interrupted release", "attachment", r.Attachment, "cluster", r.Cluster)
			}
			continue
		case action == "":
			continue
		}
		if err := s.undo(r); err != nil {
			s.Log.Error("repair: drop pin", "attachment", r.Attachment, "reason", why, "error", err)
			continue
		}
		s.Log.Warn("repair: dropped pin", "attachment", r.Attachment, "cluster", r.Cluster, "reason", why)
	}

	rs, _ = s.records()
	s.removeOrphanPins(rs)
	clusters := map[string]bool{}
	for _, r := range rs {
		clusters[r.Cluster] = true
	}
	for c := range clusters {
		if err := s.relink(c, rs); err != nil {
			s.Log.Error("repair: relink", "cluster", c, "error", err)
		}
	}
}

// Repair actions: what diagnose says a record needs.
const (
	actionDrop    = "drop"    // roll back: unmount, remove pin and record
	actionRelease = "release" // roll forward: finish the release
	actionKeep    = "keep"    // still in use: stays pinned
)

// diagnose tells what repair must do with a record ("" when it is whole).
func (s *Store) diagnose(r *Record) (action, reason string, err error) {
	switch {
	case r.BootID != s.bootID:
		return actionDrop, "pinned in an earlier boot " + r.BootID, nil
	case r.State == StateIntent:
		return actionDrop, "ADD was interrupted", nil
	case r.State == StateReleasing:
		return actionRelease, "DEL was interrupted after its in-use check passed", nil
	}
	id, mounted, err := s.pinState(r.Attachment)
	if err != nil {
		return "", "", err
	}
	if mounted && id.Dev == r.NetnsDev && id.Ino == r.NetnsIno {
		return "", "", nil
	}
	return actionDrop, "its pin is no longer mounted", nil
}

// orphanPins lists files in pins/ that no record owns: a crash between
// creating the pin and writing its record, or a record removed by hand.
func (s *Store) orphanPins(rs []*Record) ([]string, error) {
	names, err := readDirNames(s.pinsFd)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, tmpPrefix) && !slices.ContainsFunc(rs, func(r *Record) bool { return r.Attachment == n }) {
			out = append(out, n)
		}
	}
	return out, nil
}

// removeOrphanPins unmounts and removes the pins no record owns.
func (s *Store) removeOrphanPins(rs []*Record) {
	names, err := s.orphanPins(rs)
	if err != nil {
		s.Log.Error("repair: list pins", "error", err)
		return
	}
	for _, n := range names {
		if err := s.unpin(n); err != nil {
			s.Log.Error("repair: remove orphan pin", "pin", n, "error", err)
			continue
		}
		s.Log.Warn("repair: removed orphan pin", "pin", n)
	}
}

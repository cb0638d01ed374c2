package netnsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/failpoint"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// settle decides the fate of r and is the only way a pin of this boot is
// ever unmounted (docs/design.md §5 DEL, §8): DEL, GC, repair, the
// sweeper and release all come here. del is the runtime's DEL, nil for
// every other caller. In one hold of the lock: when the cluster's links
// lead to the pin, the in-use check runs first with them in place, so a
// pin in use keeps its links without a gap (links never flicker); only a
// netns found unused has its links moved off (to the cluster's other pins
// by the link rule), and then the check runs again: that second check is
// the one the invariant counts. Nothing uses the netns: the pin is
// unmounted and the record removed. Something does, or the check cannot
// tell: the record is kept draining, pinned again from a reachable handle
// if its pin was lost, and the links follow the rule again.
func (s *Store) settle(v *view, r *Record, del *Teardown) error {
	if err := v.blocked(); err != nil {
		return err
	}
	hint := ""
	if del != nil {
		hint = del.Netns
	} else if err := s.markAbandoned(r); err != nil {
		// Not the runtime's DEL (repair, GC, gc, release, the sweeper):
		// if its runtime gave up, remove runs the chain's DEL first.
		return err
	}
	h, err := s.reach(r, hint)
	if h != nil {
		defer h.Close()
	}
	v.checked[r.Attachment] = true
	var uses []Use
	if err == nil && s.linksMove(v, r) {
		uses, err = s.checkNow(r, h)
		s.steps.mark("in-use check, links in place")
	}
	if err != nil || len(uses) > 0 {
		return s.keep(v, r, h, del, uses, err)
	}
	if err := s.moveLinksAway(v, r); err != nil {
		return err
	}
	failpoint.Hit("del-links-moved")
	s.steps.mark("links")
	uses, err = s.checkNow(r, h)
	s.steps.mark("in-use check")
	if err == nil && len(uses) == 0 {
		// Unused. Without any handle the netns is proven gone: no pin, no
		// runtime handle, no process in it, no client on its addresses.
		return s.remove(v, r, false)
	}
	return s.keep(v, r, h, del, uses, err)
}

// linksMove reports whether moving the links off r's pin could take a
// link away from a pin: the pin is the cluster's link target, one of its
// links leads to it on disk (a crash between a record's change and its
// links), or it asked for a
// link that no other pin of the cluster asks for. Only then does a release
// check with the links in place first.
func (s *Store) linksMove(v *view, r *Record) bool {
	if linkTargetOf(r.Cluster, v.recs) == r.Attachment {
		return true
	}
	kept := clusterLinks(r.Cluster, withoutRecord(v.recs, r.Attachment))
	for _, l := range r.Links {
		if !slices.Contains(kept, l) {
			return true
		}
		if at, err := s.linkTarget(l); err != nil || at == r.Attachment {
			return true
		}
	}
	return false
}

// keep records that r stays: draining when its pin is (or is again) a
// mount of its netns, unpinned when the pin was lost and no handle to the
// netns could be found. The links follow the rule again.
func (s *Store) keep(v *view, r *Record, h *os.File, del *Teardown, uses []Use, checkErr error) error {
	if !s.pinnedAs(r) {
		if h == nil {
			h = s.reachByProcess(r, uses)
			defer h.Close()
		}
		if h != nil {
			if err := s.mountPin(h, r.NetnsID(), r.Attachment); err != nil {
				s.log.Error("pin again a netns still in use", "attachment", r.Attachment, "error", err)
			} else {
				s.log.Warn("pinned again a netns whose pin was lost while in use", "attachment", r.Attachment, "cluster", r.Cluster, "from", h.Name())
			}
		}
	}
	first := r.State != StateDraining && r.State != StateUnpinned
	if first {
		r.DrainingSince = time.Now().UTC()
	}
	if r.Teardown == nil && del != nil {
		// At the first refusal: a runtime that gives up (CRI-O) removes
		// its result cache right after.
		r.Teardown = del
	}
	r.State = StateDraining
	if !s.pinnedAs(r) {
		r.State = StateUnpinned
	}
	if checkErr == nil {
		r.References = make([]string, len(uses))
		for i, u := range uses {
			r.References[i] = u.What
		}
	}
	// A pin that stays has its links by the rule; an unpinned record's
	// links lead to no mount, and move off it (a release found it in use
	// with its links in place, so they are still on it).
	relink := s.relink(r.Cluster, v.recs)
	if !linkCandidate(r) {
		relink = s.moveLinksAway(v, r)
	}
	if err := errors.Join(s.writeRecord(r), relink); err != nil {
		return err
	}
	if checkErr != nil {
		return fmt.Errorf("%w for %s: %w", errCheckFailed, r.Attachment, checkErr)
	}
	if del != nil {
		s.note(Event{Kind: EventRefusal, By: ByDEL, Cluster: r.Cluster, Count: 1, Check: s.lastCheck})
	}
	if first {
		s.log.Warn("release refused: still in use", "attachment", r.Attachment, "cluster", r.Cluster, "state", r.State, "references", r.References)
	}
	return &InUseError{Record: r, References: r.References}
}

// remove unmounts r's pin and removes the record. The caller moved the
// links off the pin and found the netns unused in this hold of the lock,
// or is the operator's forced release, which a failing chain DEL of an
// abandoned attachment does not stop either.
// Every step is idempotent, and the record is written nothing in between:
// a crash leaves it as it was, with or without its pin, and the next
// operation pins it again from the runtime's netns or settles it again
// (checked again).
func (s *Store) remove(v *view, r *Record, force bool) error {
	if r.Abandoned && s.teardown != nil {
		// No runtime will run the chain's DEL: run it while the pin still
		// holds the netns. A failure leaves everything as it was, and the
		// next round checks again and retries; a record of an earlier boot
		// is dropped all the same (its netns died with that boot), or a
		// chain that stays broken would keep it for ever.
		err := s.teardown(r)
		switch {
		case err != nil && r.BootID == s.bootID && !force:
			return fmt.Errorf("finish the abandoned teardown of %s: %w", r.Attachment, err)
		case err != nil:
			s.log.Error("abandoned teardown failed: released anyway, IPAM may keep the address", "attachment", r.Attachment,
				"network", r.Network, "containerID", r.ContainerID, "ips", r.IPs, "forced", force, "error", err)
		}
		failpoint.Hit("sweep-teardown-done")
	}
	if err := s.unpin(r.Attachment); err != nil {
		return err
	}
	failpoint.Hit("del-unpinned")
	handOver := s.handsOver(r)
	if handOver {
		if err := s.handOver(r); err != nil {
			return err
		}
	} else if err := s.removeRecord(r.Attachment); err != nil {
		return err
	}
	v.recs = withoutRecord(v.recs, r.Attachment)
	s.noteRelease(r, force, !handOver)
	if r.Abandoned && !handOver {
		s.log.Info("finished abandoned teardown", "attachment", r.Attachment, "cluster", r.Cluster,
			"pod", r.PodNS+"/"+r.PodName, "podUID", r.PodUID, "network", r.Network, "containerID", r.ContainerID, "ips", r.IPs,
			"draining", time.Since(r.DrainingSince).Round(time.Millisecond).String(), "ipamReleased", r.Teardown != nil && len(r.Teardown.Cache) > 0)
	} else {
		s.log.Info("released", "attachment", r.Attachment, "cluster", r.Cluster)
	}
	return nil
}

// moveLinksAway re-points the links of r's cluster among its other pins by
// the link rule and removes the links no other pin of the cluster uses.
func (s *Store) moveLinksAway(v *view, r *Record) error {
	rest := withoutRecord(v.recs, r.Attachment)
	errs := []error{s.relink(r.Cluster, rest)}
	kept := clusterLinks(r.Cluster, rest) // relink's
links:
	for _, l := range r.Links {
		if slices.Contains(kept, l) {
			continue
		}
		// A link another cluster lists (records of a configuration that
		// rendered two clusters alike, refused at ADD since) goes back to
		// that cluster's pin, replaced atomically: it never vanishes while
		// a pin it belongs to stays.
		for _, o := range rest {
			if o.Cluster != r.Cluster && linkCandidate(o) && slices.Contains(o.Links, l) {
				if t := linkTargetOf(o.Cluster, rest); t != "" {
					errs = append(errs, s.setLink(l, t))
					continue links
				}
			}
		}
		errs = append(errs, s.removeLink(l))
	}
	return errors.Join(errs...)
}

// uses is the in-use check of r: with this store's settings, and with
// those r was pinned with when they differ (an operator's --sysfs, another
// configuration's policy). A use found by either counts; an error of either
// is an error. A record without settings is checked with this store's.
func (s *Store) uses(r *Record, netnsPath string) ([]Use, error) {
	start := time.Now()
	defer func() { s.lastCheck = time.Since(start) }()
	found, err := s.inUse(r, netnsPath)
	if err != nil || len(r.InUse) == 0 || maps.Equal(r.InUse, s.inUseConfig) {
		return found, err
	}
	if s.inUseFor == nil {
		return nil, fmt.Errorf("%s was pinned with in-use settings %v, and this store has no check for them", r.Attachment, r.InUse)
	}
	check, err := s.inUseFor(r.InUse)
	if err != nil {
		return nil, fmt.Errorf("in-use settings of %s: %w", r.Attachment, err)
	}
	if check == nil {
		return found, nil // the store's own check finds all the recorded one would
	}
	more, err := check(r, netnsPath)
	if err != nil {
		return nil, err
	}
	for _, u := range more {
		if !slices.ContainsFunc(found, func(f Use) bool { return f.What == u.What }) {
			found = append(found, u)
		}
	}
	return found, nil
}

// markAbandoned marks r abandoned when a DEL of it was refused (it is
// held) and the runtime's handle on its netns is gone since: the runtime
// will not retry, so whichever operation releases r runs the chain's DEL
// first (remove). The sweeper marks every such record in each round, so
// that list shows it; settle and the forced release mark the one they
// release, so that a repair, gc or release that comes first still gives
// its address back.
func (s *Store) markAbandoned(r *Record) error {
	if !held(r) || r.Abandoned || !s.runtimeGone(r) {
		return nil
	}
	r.Abandoned = true
	if err := s.writeRecord(r); err != nil {
		r.Abandoned = false
		return err
	}
	s.log.Warn("the runtime abandoned the teardown; the sweeper finishes it once the netns is unused",
		"attachment", r.Attachment, "cluster", r.Cluster, "pod", r.PodNS+"/"+r.PodName, "podUID", r.PodUID, "ips", r.IPs)
	return nil
}

// runtimeGone reports whether the runtime's handle on r's netns (the
// CNI_NETNS of its DEL, else of its ADD) no longer exists or no longer is
// that netns. Any other failure to look is not proof.
func (s *Store) runtimeGone(r *Record) bool {
	path := r.NetnsPath
	if r.Teardown != nil && r.Teardown.Netns != "" {
		path = r.Teardown.Netns
	}
	f, id, err := openNetns(path)
	switch {
	case err == nil:
		f.Close()
		return id != r.NetnsID()
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR), errors.Is(err, nsinfo.ErrNotNetns):
		return true
	}
	return false
}

// settleOrphan checks pin name, which has no record, with the addresses
// its netns has now, and unpins it when nothing uses it, or at once when
// forced; the references that keep it otherwise. Failing to check is an
// error wrapping errCheckFailed: not known to be unused.
func (s *Store) settleOrphan(name string, force bool) (refs []string, err error) {
	if !force {
		// With the addresses its netns has now; a plain file (no mount)
		// has none.
		var uses []Use
		id, mounted, err := s.pinState(name)
		if err == nil && mounted {
			uses, err = s.UsesNow(&Record{Attachment: name, PinPath: s.pinPath(name), NetnsDev: id.Dev, NetnsIno: id.Ino})
		}
		if err != nil {
			return nil, fmt.Errorf("%w for %s: %w", errCheckFailed, name, err)
		}
		for _, u := range uses {
			refs = append(refs, u.What)
		}
		if len(refs) > 0 {
			s.log.Warn("kept a pin without a record: in use", "pin", name, "references", refs)
			return refs, nil
		}
	}
	if err := s.unpin(name); err != nil {
		return nil, err
	}
	s.log.Warn("released a pin without a record", "pin", name, "forced", force)
	return nil, nil
}

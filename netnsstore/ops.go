package netnsstore

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/netns-pin/netns-pin/internal/failpoint"
)

// PinRequest describes a holder attachment to pin.
type PinRequest struct {
	ContainerID string
	IfName      string
	Network     string
	Cluster     string
	PodNS       string
	PodName     string
	PodUID      string
	NetnsPath   string
	Links       []string // absolute well-known paths of the cluster
}

// Pin pins the netns of an attachment and points the cluster's links at
// it: intent record, bind mount, links, active record. Pinning an
// attachment that is already pinned to the same netns is a no-op.
func (s *Store) Pin(req PinRequest) (*Record, error) {
	name, err := AttachmentName(req.ContainerID, req.IfName)
	if err != nil {
		return nil, err
	}
	src, srcID, err := OpenNetns(req.NetnsPath)
	if err != nil {
		return nil, err
	}
	defer src.Close()

	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.repair()

	if r, err := s.readRecord(name); err != nil {
		return nil, err
	} else if r != nil {
		if r.NetnsDev != srcID.Dev || r.NetnsIno != srcID.Ino {
			return nil, fmt.Errorf("attachment %s is pinned to %v, not to %s (%v)", name, NetnsID{r.NetnsDev, r.NetnsIno}, req.NetnsPath, srcID)
		}
		return r, nil // repeated ADD; repair made sure the pin and links are whole
	}

	now := time.Now().UTC()
	r := &Record{
		Attachment: name, ContainerID: req.ContainerID, IfName: req.IfName, Network: req.Network,
		Cluster: req.Cluster, PodNS: req.PodNS, PodName: req.PodName, PodUID: req.PodUID,
		NetnsPath: req.NetnsPath, PinPath: s.pinPath(name), NetnsDev: srcID.Dev, NetnsIno: srcID.Ino,
		Links: slices.Clone(req.Links), BootID: s.bootID, State: StateIntent, Created: now,
	}
	if err := s.ensureShared(); err != nil {
		return nil, err
	}
	if err := s.writeRecord(r); err != nil {
		return nil, err
	}
	failpoint.Hit("add-intent-written")
	if err := s.mountPin(src, srcID, name); err != nil {
		return nil, s.rollBack(r, err)
	}
	failpoint.Hit("add-pin-mounted")
	ips, err := GlobalAddrs(int(src.Fd()))
	if err != nil {
		return nil, s.rollBack(r, fmt.Errorf("pin %s: %w", name, err))
	}
	r.IPs = addrStrings(ips)
	// Links go to the new pin before the record says active; a crash in
	// between leaves an intent record, and repair re-points the links.
	r.State = StateActive
	all, _ := s.records()
	if err := s.relink(r.Cluster, replaceRecord(all, r)); err != nil {
		r.State = StateIntent
		return nil, s.rollBack(r, err)
	}
	failpoint.Hit("add-links-set")
	if err := s.writeRecord(r); err != nil {
		r.State = StateIntent
		return nil, s.rollBack(r, err)
	}
	s.Log.Info("pinned", "attachment", name, "cluster", r.Cluster, "netns", srcID.String(), "ips", r.IPs, "links", r.Links)
	return r, nil
}

// rollBack undoes a failed Pin and returns cause (joined with any
// failure to undo, which the next repair retries).
func (s *Store) rollBack(r *Record, cause error) error {
	return errors.Join(cause, s.undo(r))
}

// undo removes an intent record's pin and record. The links move away
// from the pin first, so that no link ever leads to an unmounted pin.
func (s *Store) undo(r *Record) error {
	return errors.Join(s.moveLinksAway(r), s.unpin(r.Attachment), s.removeRecord(r.Attachment))
}

// moveLinksAway re-points the links of r's cluster among its other pins by
// the link rule and removes the links no other pin of the cluster uses.
func (s *Store) moveLinksAway(r *Record) error {
	all, _ := s.records()
	rest := withoutRecord(all, r.Attachment)
	errs := []error{s.relink(r.Cluster, rest)}
	for _, l := range r.Links {
		if !s.clusterHasLink(rest, r, l) {
			errs = append(errs, s.removeLink(l))
		}
	}
	return errors.Join(errs...)
}

// Release is DEL for a holder: no record, nothing to do; still in use per
// inUse, the record becomes draining and an *InUseError is returned;
// otherwise links are re-pointed among the remaining pins (or removed),
// the pin unmounted and removed, and the record deleted.
func (s *Store) Release(attachment string, inUse InUseFunc) (*Record, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.repair()
	r, err := s.readRecord(attachment)
	if err != nil || r == nil {
		return nil, err
	}
	return r, s.release(r, inUse)
}

// release runs the in-use check on r and releases it or marks it
// draining. The caller holds the lock.
func (s *Store) release(r *Record, inUse InUseFunc) error {
	s.refreshAddrs(r)
	if inUse != nil {
		refs, err := inUse(r)
		if err != nil {
			return fmt.Errorf("%w for %s: %w", ErrCheckFailed, r.Attachment, err)
		}
		if len(refs) > 0 {
			first := r.State != StateDraining
			r.State, r.References = StateDraining, refs
			if err := s.writeRecord(r); err != nil {
				return err
			}
			all, _ := s.records()
			if err := s.relink(r.Cluster, all); err != nil {
				return err
			}
			if first {
				s.Log.Warn("release refused: still in use", "attachment", r.Attachment, "cluster", r.Cluster, "references", refs)
			}
			return &InUseError{Record: r, References: refs}
		}
	}
	r.State, r.References = StateReleasing, nil
	if err := s.writeRecord(r); err != nil {
		return err
	}
	failpoint.Hit("del-releasing-written")
	if err := s.finishRelease(r); err != nil {
		return err
	}
	s.Log.Info("released", "attachment", r.Attachment, "cluster", r.Cluster)
	return nil
}

// GC releases, as DEL would, every pin of network whose attachment is not
// in valid (CNI GC's cni.dev/valid-attachments); repair has already
// dropped records of earlier boots, orphan pins and dangling links. Pins
// still in use stay (action "keep"); one failing entry does not stop the
// others.
func (s *Store) GC(network string, valid map[string]bool, inUse InUseFunc) ([]Finding, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.repair()
	rs, errs := s.records()
	stale := func(r *Record) bool { return r.Network == network && !valid[r.Attachment] }
	findings, more := s.collect(rs, stale, "unknown to the runtime", inUse, false)
	return findings, errors.Join(append(errs, more...)...)
}

// finishRelease completes a release whose record says releasing. Every
// step is idempotent, so repair can run it again after a crash.
func (s *Store) finishRelease(r *Record) error {
	if err := s.moveLinksAway(r); err != nil {
		return err
	}
	failpoint.Hit("del-links-moved")
	if err := s.unpin(r.Attachment); err != nil {
		return err
	}
	failpoint.Hit("del-unpinned")
	return s.removeRecord(r.Attachment)
}

// clusterHasLink reports whether another pin of r's cluster uses link,
// in which case relink owns it.
func (s *Store) clusterHasLink(rs []*Record, r *Record, link string) bool {
	for _, o := range rs {
		if o.Attachment != r.Attachment && o.Cluster == r.Cluster && linkCandidate(o) && slices.Contains(o.Links, link) {
			return true
		}
	}
	return false
}

// refreshAddrs re-reads the pinned netns's global addresses: the chain may
// have changed them since ADD. Without a readable pin the recorded ones stay.
func (s *Store) refreshAddrs(r *Record) {
	f, id, err := OpenNetns(s.pinPath(r.Attachment))
	if err != nil {
		return
	}
	defer f.Close()
	if id.Dev != r.NetnsDev || id.Ino != r.NetnsIno {
		return
	}
	if ips, err := GlobalAddrs(int(f.Fd())); err == nil && len(ips) > 0 {
		r.IPs = addrStrings(ips)
	}
}

// Get returns the record of an attachment under the lock, after repair.
func (s *Store) Get(attachment string) (*Record, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.repair()
	return s.readRecord(attachment)
}

// List returns every record, oldest first, after repair.
func (s *Store) List() ([]*Record, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.repair()
	rs, errs := s.records()
	return rs, errors.Join(errs...)
}

// Check verifies what CHECK promises for a holder attachment: its record
// is active or draining, its pin is a mount of the netns at netnsPath, and
// every link of its cluster follows the link rule.
func (s *Store) Check(attachment, netnsPath string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	r, err := s.readRecord(attachment)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("attachment %s has no record: it is not pinned", attachment)
	}
	if r.State != StateActive && r.State != StateDraining {
		return fmt.Errorf("attachment %s is in state %s", attachment, r.State)
	}
	if r.BootID != s.bootID {
		return fmt.Errorf("attachment %s was pinned in an earlier boot %s", attachment, r.BootID)
	}
	id, mounted, err := s.pinState(attachment)
	if err != nil {
		return err
	}
	want := NetnsID{r.NetnsDev, r.NetnsIno}
	if !mounted {
		return fmt.Errorf("pin %s is not mounted", s.pinPath(attachment))
	}
	if id != want {
		return fmt.Errorf("pin %s holds %v, record says %v", s.pinPath(attachment), id, want)
	}
	if netnsPath != "" {
		f, cur, err := OpenNetns(netnsPath)
		if err != nil {
			return err
		}
		f.Close()
		if cur != want {
			return fmt.Errorf("pin %s holds %v but CNI_NETNS %s is %v", s.pinPath(attachment), id, netnsPath, cur)
		}
	}
	all, errs := s.records()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	target := linkTargetOf(r.Cluster, all)
	for _, l := range clusterLinks(r.Cluster, all) {
		got, err := s.linkTarget(l)
		if err != nil {
			return err
		}
		if got != target {
			return fmt.Errorf("link %s points at %q, want %q (the cluster's newest active pin)", l, got, target)
		}
	}
	return nil
}

func addrStrings(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func replaceRecord(rs []*Record, r *Record) []*Record {
	out := append(withoutRecord(rs, r.Attachment), r)
	sortRecords(out)
	return out
}

func withoutRecord(rs []*Record, attachment string) []*Record {
	out := make([]*Record, 0, len(rs))
	for _, o := range rs {
		if o.Attachment != attachment {
			out = append(out, o)
		}
	}
	return out
}

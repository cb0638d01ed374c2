package netnsstore

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/netns-pin/netns-pin/internal/failpoint"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// view is the store as one operation sees it under the lock: the records
// it could read, oldest first, and those it could not use.
type view struct {
	recs []*Record
	bad  map[string]error
	// checked: the attachments settle ran the in-use check on in this hold
	// of the lock, so that repair's settling is not repeated by the
	// operation that follows it.
	checked map[string]bool
	// repaired: what the preamble (markBoot, repair) did in this hold of
	// the lock, for the operator's gc to report with the rest; in a
	// read-only view, the records the first operation that may write
	// drops (markBoot), taken out of bad.
	repaired []Finding
	// owned: pinDir names this store's stateDir as its owner, so a pin
	// without a record here is an orphan of this store (see ownerFile).
	owned bool
}

func (v *view) get(attachment string) *Record {
	for _, r := range v.recs {
		if r.Attachment == attachment {
			return r
		}
	}
	return nil
}

// blocked says why nothing may be released: a record that cannot be read
// may be of the same cluster, its pin the target of the links that a
// release would move or remove. It wraps errCheckFailed: not known to be
// unused is in use.
func (v *view) blocked() error {
	errs := v.badErrs()
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: no pin is released while a record cannot be used (%d): %w", errCheckFailed, len(errs), errs[0])
}

// badErrs is why each record that cannot be used cannot, ordered by
// attachment so that commands say it the same way every time.
func (v *view) badErrs() []error {
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(v.bad)) {
		errs = append(errs, v.bad[n])
	}
	return errs
}

// op runs fn under the store's lock, after reading every record and
// repairing what interrupted operations left (see repair). skip names the
// attachment fn itself settles. This is the preamble of every operation
// that may change the store.
func (s *Store) op(skip string, fn func(v *view) error) error {
	return s.locked(false, func(v *view) error {
		s.repair(v, skip)
		s.steps.mark("repair")
		return fn(v)
	})
}

// locked runs fn under the store's lock with every record read. A
// readOnly operation (Inspect, a dry run) writes nothing: no leftover of
// a crash is removed, no boot marker written.
func (s *Store) locked(readOnly bool, fn func(v *view) error) error {
	s.steps.start()
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	s.steps.mark("lock")
	v, err := s.load(readOnly)
	if err != nil {
		return err
	}
	if v.owned, err = s.checkOwner(); err != nil {
		return err
	}
	if err := s.markBoot(v, readOnly); err != nil {
		return err
	}
	s.steps.mark("read records")
	err = fn(v)
	s.steps.mark("work")
	s.log.Debug("steps (µs)", s.steps.took...)
	return err
}

func (s *Store) load(readOnly bool) (*view, error) {
	rs, bad, err := s.records(readOnly)
	if err != nil {
		return nil, err
	}
	return &view{recs: rs, bad: bad, checked: map[string]bool{}}, nil
}

// Pin pins the netns of the holder attachment that req describes (its
// ContainerID, IfName, Network, Cluster, PodNS, PodName, PodUID, NetnsPath
// and Links, the absolute well-known paths of the cluster; the store fills
// in the rest) and points the cluster's links at it: an active record with
// the netns's addresses, the bind mount, the links. Pinning an attachment
// that is already pinned to the same netns is a no-op but for what is
// missing: a pin an interrupted ADD did not make, or one unmounted from
// outside, is made again.
func (s *Store) Pin(req Record) (*Record, error) {
	name, err := AttachmentName(req.ContainerID, req.IfName)
	if err != nil {
		return nil, err
	}
	src, srcID, err := openNetns(req.NetnsPath)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var out *Record
	err = s.op(name, func(v *view) error {
		if err := v.bad[name]; err != nil {
			return err
		}
		// Only a pin claims pinDir: an operator's command with a wrong
		// --state-dir on a node with no pin yet must not.
		if !v.owned {
			if err := s.claimPinDir(v); err != nil {
				return err
			}
		}
		if r := v.get(name); r != nil {
			if r.NetnsID() != srcID {
				return fmt.Errorf("attachment %s is pinned to %v, not to %s (%v)", name, r.NetnsID(), req.NetnsPath, srcID)
			}
			// A repeated ADD: a no-op for a whole record, whatever DEL
			// decided meanwhile; a pin lost on the way is made again from
			// the runtime's netns, and a record that was kept unpinned
			// becomes draining again.
			out = r
			if s.pinnedAs(r) {
				return nil
			}
			if err := s.mountPin(src, r.NetnsID(), r.Attachment); err != nil {
				return err
			}
			if r.State == StateUnpinned {
				r.State = StateDraining
			}
			return errors.Join(s.writeRecord(r), s.relink(r.Cluster, v.recs))
		}
		if err := refuseTakenLinks(v.recs, req.Cluster, req.Links); err != nil {
			return err
		}
		var err error
		out, err = s.pinNew(v, name, req, src, srcID)
		return err
	})
	return out, err
}

// pinNew pins an attachment that has no record. One record write: the
// record says active, with the netns's addresses, before the pin and the
// links exist. A crash after it leaves an active record without a pin,
// which the next operation pins again from the runtime's netns or settles
// when that is gone.
func (s *Store) pinNew(v *view, name string, req Record, src *os.File, srcID NetnsID) (*Record, error) {
	ips, err := nsinfo.GlobalAddrs(int(src.Fd()))
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", name, err)
	}
	s.steps.mark("addresses")
	r := &Record{
		Attachment: name, ContainerID: req.ContainerID, IfName: req.IfName, Network: req.Network,
		Cluster: req.Cluster, PodNS: req.PodNS, PodName: req.PodName, PodUID: req.PodUID,
		NetnsPath: req.NetnsPath, PinPath: s.pinPath(name), NetnsDev: srcID.Dev, NetnsIno: srcID.Ino,
		IPs: unionAddrs(nil, ips), InUse: s.inUseConfig, Links: slices.Clone(req.Links), BootID: s.bootID, State: StateActive,
		Created: time.Now().UTC(),
	}
	if err := s.ensureShared(); err != nil {
		return nil, err
	}
	if err := s.noteLinkDirs(r.Links); err != nil {
		return nil, err
	}
	if err := s.writeRecord(r); err != nil {
		return nil, err
	}
	s.steps.mark("record")
	v.recs = append(withoutRecord(v.recs, r.Attachment), r)
	sortRecords(v.recs)
	failpoint.Hit("add-record-written")
	if err := s.publish(v, r, src); err != nil {
		// An ADD that fails is undone like a DEL: its links may have been
		// published, so the in-use check decides.
		return nil, errors.Join(err, s.settle(v, r, nil))
	}
	return r, nil
}

// publish mounts r's pin from src (a no-op when it is mounted) and points
// the cluster's links by the rule, which makes r, active and newest, their
// target.
func (s *Store) publish(v *view, r *Record, src *os.File) error {
	if err := s.mountPin(src, r.NetnsID(), r.Attachment); err != nil {
		return err
	}
	s.steps.mark("mount")
	failpoint.Hit("add-pin-mounted")
	if err := s.relink(r.Cluster, v.recs); err != nil {
		return err
	}
	s.steps.mark("links")
	failpoint.Hit("add-links-set")
	s.log.Info("pinned", "attachment", r.Attachment, "cluster", r.Cluster, "netns", r.NetnsID().String(), "ips", r.IPs, "links", r.Links)
	return nil
}

// Release is DEL for a holder. No record: nothing to do (nil record). A
// record: settle decides, with del.Netns (the DEL's CNI_NETNS) as one more
// way to reach the netns if its pin was lost; del is kept in the record at
// the first refusal. In use, an *InUseError; when the check cannot tell,
// an error wrapping errCheckFailed. del is nil for the operator's CLI,
// which leaves an abandoned record's teardown to be finished as it would be.
func (s *Store) Release(attachment string, del *Teardown) (*Record, error) {
	var out *Record
	err := s.op(attachment, func(v *view) error {
		if err := v.bad[attachment]; err != nil {
			return fmt.Errorf("%w: %w", errCheckFailed, err)
		}
		if out = v.get(attachment); out == nil {
			if del != nil {
				return nil
			}
			var err error
			out, err = s.releaseOrphan(v, attachment, false)
			return err
		}
		if del != nil {
			// A runtime's DEL: the runtime did not give up after all. Once
			// this DEL succeeds its own chain runs the DEL of the plugins
			// before netns-pin, so the teardown is not run here too.
			out.Abandoned = false
		}
		return s.settle(v, out, del)
	})
	return out, err
}

// ForceRelease releases a pin without the in-use check: the operator's
// `release --force`, who was told what it cuts. The links still move
// first, so no link ever leads to an unmounted pin.
func (s *Store) ForceRelease(attachment string) (*Record, error) {
	var out *Record
	err := s.op(attachment, func(v *view) error {
		if out = v.get(attachment); out == nil {
			if err := v.bad[attachment]; err != nil {
				return err
			}
			var err error
			out, err = s.releaseOrphan(v, attachment, true)
			return err
		}
		// A record that cannot be read may own a pin the links lead to.
		if err := v.blocked(); err != nil {
			return err
		}
		if err := s.markAbandoned(out); err != nil {
			return err
		}
		if err := s.moveLinksAway(v, out); err != nil {
			return err
		}
		s.log.Warn("forced release", "attachment", attachment, "cluster", out.Cluster, "references", out.References)
		return s.remove(v, out, true)
	})
	return out, err
}

// releaseOrphan is the operator's release of a pin without a record,
// which repair keeps while pinDir names no owner (it may be another
// stateDir's): checked with the addresses its netns has now and released
// when unused, or released in any case when forced. A record that stands
// for it is returned; nil when there is no such pin.
func (s *Store) releaseOrphan(v *view, name string, force bool) (*Record, error) {
	orphans, err := s.orphanPins(v)
	if err != nil || !slices.Contains(orphans, name) {
		return nil, err
	}
	if err := v.blocked(); err != nil {
		return nil, err
	}
	r := &Record{Attachment: name, PinPath: s.pinPath(name)}
	r.References, err = s.settleOrphan(name, force)
	if err == nil && len(r.References) > 0 {
		err = &InUseError{Record: r, References: r.References}
	}
	return r, err
}

// GC releases, as DEL would, every pin of network whose attachment is not
// in valid (CNI GC's cni.dev/valid-attachments); repair has already
// dropped records of earlier boots and settled interrupted operations.
// Pins still in use stay (ActionKeep); one failing entry does not stop the
// others.
func (s *Store) GC(network string, valid map[string]bool) ([]Finding, error) {
	var findings []Finding
	err := s.op("", func(v *view) error {
		stale := func(r *Record) bool { return r.Network == network && !valid[r.Attachment] }
		var errs []error
		findings, errs = s.collect(v, stale, "unknown to the runtime")
		return errors.Join(errs...)
	})
	return findings, err
}

// Get returns the record of an attachment under the lock, after repair.
func (s *Store) Get(attachment string) (*Record, error) {
	var out *Record
	err := s.op("", func(v *view) error {
		out = v.get(attachment)
		if out == nil {
			return v.bad[attachment]
		}
		return nil
	})
	return out, err
}

// List returns every record, oldest first, after repair, with an error
// naming each record that cannot be used.
func (s *Store) List() ([]*Record, error) {
	var out []*Record
	err := s.op("", func(v *view) error {
		out = v.recs
		return errors.Join(v.badErrs()...)
	})
	return out, err
}

// Check verifies what CHECK promises for a holder attachment: its record
// is active or draining, its pin is a mount of the netns at netnsPath, and
// every link of its cluster follows the link rule.
func (s *Store) Check(attachment, netnsPath string) error {
	return s.locked(false, func(v *view) error {
		if err := v.bad[attachment]; err != nil {
			return err
		}
		r := v.get(attachment)
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
		if !mounted {
			return fmt.Errorf("pin %s is not mounted", s.pinPath(attachment))
		}
		if id != r.NetnsID() {
			return fmt.Errorf("pin %s holds %v, record says %v", s.pinPath(attachment), id, r.NetnsID())
		}
		if netnsPath != "" {
			f, cur, err := openNetns(netnsPath)
			if err != nil {
				return err
			}
			f.Close()
			if cur != r.NetnsID() {
				return fmt.Errorf("pin %s holds %v but CNI_NETNS %s is %v", s.pinPath(attachment), id, netnsPath, cur)
			}
		}
		if err := v.blocked(); err != nil {
			return err
		}
		target := linkTargetOf(r.Cluster, v.recs)
		for _, l := range clusterLinks(r.Cluster, v.recs) {
			got, err := s.linkTarget(l)
			if err != nil {
				return err
			}
			if got != target {
				return fmt.Errorf("link %s points at %q, want %q (the cluster's newest active pin)", l, got, target)
			}
		}
		return nil
	})
}

// unionAddrs adds the addresses of ips missing from recorded.
func unionAddrs(recorded []string, ips []netip.Addr) []string {
	out := slices.Clone(recorded)
	for _, ip := range ips {
		if s := ip.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func withoutRecord(rs []*Record, attachment string) []*Record {
	return slices.DeleteFunc(slices.Clone(rs), func(o *Record) bool { return o.Attachment == attachment })
}

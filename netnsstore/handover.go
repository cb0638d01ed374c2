package netnsstore

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// TeardownsSubdir is the folder under stateDir that holds the records the
// CNI plugin dropped after a reboot while their chain's DEL was still owed
// (handsOver): netns-pinctl runs it (finishHandedOver).
const TeardownsSubdir = "teardowns"

// handsOver reports whether dropping r must leave its record for
// netns-pinctl: a teardown its runtime abandoned, of an earlier boot, with
// a captured chain, dropped by a store that cannot run that chain (the CNI
// plugin, which does not link libcni). Its netns died with that boot, so
// nothing waits for it; but the chain's DEL frees the IPAM lease, which
// may outlive a reboot (host-local's files, whereabouts' objects).
func (s *Store) handsOver(r *Record) bool {
	return r.Abandoned && s.teardown == nil && r.BootID != s.bootID && r.Teardown != nil && len(r.Teardown.Cache) > 0
}

// handOver moves r's record file, which the caller unpinned and moved the
// links off, from records/ to teardowns/: no longer a record (no link
// rule, no in-use check, no pin), still the chain's DEL to run. A rename
// within stateDir, made durable as the record was (it carries a captured
// teardown).
func (s *Store) handOver(r *Record) error {
	fd, err := openDirBeneath(s.stateFd, TeardownsSubdir, true, 0o700)
	if err != nil {
		return fmt.Errorf("hand over the teardown of %s: %w", r.Attachment, err)
	}
	defer unix.Close(fd)
	name := r.Attachment + recordSuffix
	if err := unix.Renameat(s.recordsFd, name, fd, name); err != nil {
		return fmt.Errorf("hand over the teardown of %s: %w", r.Attachment, err)
	}
	if err := errors.Join(unix.Fsync(fd), unix.Fsync(s.recordsFd)); err != nil {
		return fmt.Errorf("hand over the teardown of %s: sync: %w", r.Attachment, err)
	}
	s.log.Warn("the chain's DEL of an attachment abandoned before the reboot is left to netns-pinctl (sweep, gc, release)",
		"attachment", r.Attachment, "cluster", r.Cluster, "network", r.Network, "containerID", r.ContainerID, "ips", r.IPs)
	return nil
}

// finishHandedOver runs, for every record the plugin handed over, the
// chain's DEL (without CNI_NETNS: the netns died with its boot) and removes
// it. As for any record of an earlier boot, a failing DEL is logged and not
// retried, or a chain that stays broken would keep it for ever. A file it
// cannot decode (a newer format) stays, logged, for a netns-pinctl that
// reads it.
func (s *Store) finishHandedOver() {
	fd, err := openDirBeneath(s.stateFd, TeardownsSubdir, false, 0)
	if errors.Is(err, unix.ENOENT) {
		return
	}
	var rs []*Record
	bad := map[string]error{}
	if err == nil {
		defer unix.Close(fd)
		var names []string
		if names, err = readDirNames(fd); err == nil {
			rs, bad, err = readRecords(names, func(att string) (*Record, error) {
				data, err := regfile.ReadBeneath(fd, att+recordSuffix, 1<<20)
				if err != nil {
					return nil, err
				}
				return decodeRecord(data, att, s.writer)
			})
		}
	}
	if err != nil {
		s.log.Error("read the handed-over teardowns", "error", err)
	}
	for att, err := range bad {
		s.log.Error("handed-over teardown left as it is", "attachment", att, "error", err)
	}
	for _, r := range rs {
		if err := s.teardown(r); err != nil {
			s.log.Error("abandoned teardown failed: IPAM may keep the address", "attachment", r.Attachment,
				"network", r.Network, "containerID", r.ContainerID, "ips", r.IPs, "error", err)
		}
		if err := unlinkIfExists(fd, r.Attachment+recordSuffix); err != nil {
			s.log.Error("remove the handed-over teardown", "attachment", r.Attachment, "error", err)
			continue
		}
		s.note(Event{Kind: EventAbandoned, By: s.actor, Cluster: r.Cluster, Count: 1})
		s.log.Info("finished abandoned teardown", "attachment", r.Attachment, "cluster", r.Cluster, "pod", r.PodNS+"/"+r.PodName,
			"network", r.Network, "containerID", r.ContainerID, "ips", r.IPs, "handedOverByThePlugin", true)
	}
}

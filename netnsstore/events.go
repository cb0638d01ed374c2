package netnsstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// The events file counts what happens in short-lived processes (a runtime's
// DEL refused or released, a GC, an operator's release) for the node
// agent's metrics (docs/operating.md, "Metrics"). One line per event,
// appended under the store's lock by the operation that caused it:
//
//	<kind> <by> <cluster> <count> <in-use check seconds | ->
//
// Only a release or a refusal appends, never a pass-through pod nor a
// holder ADD: one open, one write, one close, no fsync. A machine crash may
// lose the last lines or tear one (a torn line is skipped): the counts are
// for alerting, not accounting. The agent folds the file into one line per
// counter when it grows past a size (Store.FoldEvents), under the lock.
const eventsFile = "events"

// Event kinds.
const (
	EventRefusal   = "refusal"   // a runtime's DEL answered "in use"
	EventRelease   = "release"   // a pin released (by: who did it)
	EventAbandoned = "abandoned" // a teardown the runtime gave up on, finished
)

// Who released a pin (Options.Actor).
const (
	ByDEL      = "del"      // a runtime's DEL (and the repair it ran)
	ByGC       = "gc"       // CNI GC, and the operator's netns-pinctl gc
	BySweeper  = "sweeper"  // netns-pinctl sweep
	ByOperator = "operator" // netns-pinctl release (with or without --force)
	ByRepair   = "repair"   // the repair of any other operation (an ADD, say)
)

// Event is one line of the events file.
type Event struct {
	Kind    string
	By      string
	Cluster string
	Count   uint64
	// Check is how long the in-use check that decided it took; 0 when
	// unknown (forced, or folded lines).
	Check time.Duration
}

func (e Event) line() string {
	check := "-"
	if e.Check > 0 {
		check = strconv.FormatFloat(e.Check.Seconds(), 'f', 6, 64)
	}
	return fmt.Sprintf("%s %s %s %d %s\n", e.Kind, e.By, e.Cluster, e.Count, check)
}

func parseEvent(line string) (Event, bool) {
	f := strings.Fields(line)
	if len(f) != 5 {
		return Event{}, false
	}
	n, err := strconv.ParseUint(f[3], 10, 64)
	if err != nil {
		return Event{}, false
	}
	e := Event{Kind: f[0], By: f[1], Cluster: f[2], Count: n}
	if f[4] != "-" {
		secs, err := strconv.ParseFloat(f[4], 64)
		if err != nil || secs < 0 {
			return Event{}, false
		}
		e.Check = time.Duration(secs * float64(time.Second))
	}
	return e, true
}

// noteRelease counts the release of r's pin (and, when the runtime had
// given up on it and finished says its teardown ran, that teardown).
func (s *Store) noteRelease(r *Record, force, finished bool) {
	if r.Cluster == "" {
		return // a pin without a record
	}
	check := s.lastCheck
	if force {
		check = 0
	}
	s.note(Event{Kind: EventRelease, By: s.actor, Cluster: r.Cluster, Count: 1, Check: check})
	if r.Abandoned && finished {
		s.note(Event{Kind: EventAbandoned, By: s.actor, Cluster: r.Cluster, Count: 1})
	}
}

// note appends e to the events file, and folds it when it has grown past
// eventsFoldAt: without a sweeper (which folds it sooner) every refused DEL
// appends, and the file must stay small all the same. The caller holds the
// lock, as every operation that notes an event does. Counting never fails
// an operation: an error is logged.
func (s *Store) note(e Event) {
	if e.By == "" {
		e.By = ByRepair
	}
	f, err := regfile.OpenBeneath(s.stateFd, eventsFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NONBLOCK, 0o600)
	var fi os.FileInfo
	if err == nil {
		if _, err = f.WriteString(e.line()); err == nil {
			fi, err = f.Stat()
		}
		err = errors.Join(err, f.Close())
	}
	if err == nil && fi.Size() > eventsFoldAt {
		err = s.fold()
	}
	if err != nil {
		s.log.Warn("count an event for the metrics", "event", strings.TrimSpace(e.line()), "error", err)
	}
}

// eventsChunk bounds what one read of the events file takes in: readers
// read it in pieces, whatever its size.
const eventsChunk = 256 << 10

// eventsFoldAt is the size past which the writer folds the events file
// itself (note); the sweeper folds it past its own, smaller size.
const eventsFoldAt = 1 << 20

// readEventsAt reads the events file of the stateDir dirfd from offset
// from, at most eventsChunk bytes, to its last whole line, and returns the
// events with the offset to read on from (from itself once there is
// nothing more). A file shorter than from was folded or replaced: it is
// read again from 0 (reset says so). No file: no events.
func readEventsAt(dirfd int, from int64) (events []Event, next int64, reset bool, _ error) {
	f, err := regfile.OpenBeneath(dirfd, eventsFile, regfile.ReadFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, from > 0, nil
	}
	if err != nil {
		return nil, from, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &os.PathError{Op: "read", Path: eventsFile, Err: errors.New("not a regular file")}
	}
	if err != nil {
		return nil, from, false, err
	}
	if fi.Size() < from {
		reset, from = true, 0
	}
	data, err := io.ReadAll(io.NewSectionReader(f, from, eventsChunk))
	if err != nil {
		return nil, from, false, err
	}
	whole := bytes.LastIndexByte(data, '\n') + 1 // a line being written waits for the next read
	if whole == 0 && len(data) == eventsChunk {
		whole = len(data) // a line longer than a chunk is no event: passed over
	}
	for line := range bytes.Lines(data[:whole]) {
		if e, ok := parseEvent(string(line)); ok {
			events = append(events, e)
		}
	}
	return events, from + int64(whole), reset, nil
}

// FoldEvents keeps the events file small for the node agent, which reads
// it (ReadEvents): past over bytes it is folded into one line per counter,
// under the lock (appenders hold it). The sweeper folds each round, so the
// file stays small while a holder's DEL is refused for weeks; without a
// sweeper, the appenders fold it past their own bound.
func (s *Store) FoldEvents(over int64) error {
	var st unix.Stat_t
	switch err := unix.Fstatat(s.stateFd, eventsFile, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT) || err == nil && st.Size <= over:
		return nil
	case err != nil:
		return fmt.Errorf("stat %s/%s: %w", s.StateDir, eventsFile, err)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return s.fold()
}

// fold replaces the events file by one line per counter, read in chunks:
// the caller holds the lock.
func (s *Store) fold() error {
	sums := map[[3]string]uint64{}
	for from := int64(0); ; {
		evs, next, _, err := readEventsAt(s.stateFd, from)
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", s.StateDir, eventsFile, err)
		}
		for _, e := range evs {
			sums[[3]string{e.Kind, e.By, e.Cluster}] += e.Count
		}
		if next == from {
			break
		}
		from = next
	}
	var b strings.Builder
	for _, k := range slices.SortedFunc(maps.Keys(sums), func(a, b [3]string) int { return strings.Compare(strings.Join(a[:], " "), strings.Join(b[:], " ")) }) {
		b.WriteString(Event{Kind: k[0], By: k[1], Cluster: k[2], Count: sums[k]}.line())
	}
	if err := s.replaceFile(s.stateFd, eventsFile, []byte(b.String()), false); err != nil {
		return fmt.Errorf("fold %s/%s: %w", s.StateDir, eventsFile, err)
	}
	return nil
}

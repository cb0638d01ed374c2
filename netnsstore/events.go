package netnsstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/smallfile"
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
	ByGC       = "gc"       // CNI GC, and the operator's netns-pin gc
	BySweeper  = "sweeper"  // netns-pin sweep
	ByOperator = "operator" // netns-pin release (with or without --force)
	ByRepair   = "repair"   // the repair of any other operation (an ADD, list, inuse)
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

// noteRefusal counts a refused DEL of r: the caller is the runtime's DEL.
func (s *Store) noteRefusal(r *Record) {
	s.note(Event{Kind: EventRefusal, By: ByDEL, Cluster: r.Cluster, Count: 1, Check: s.lastCheck})
}

// noteRelease counts the release of r's pin (and, when the runtime had
// given up on it, the teardown finished for it).
func (s *Store) noteRelease(r *Record, force bool) {
	if r.Cluster == "" {
		return // a pin without a record
	}
	check := s.lastCheck
	if force {
		check = 0
	}
	s.note(Event{Kind: EventRelease, By: s.actor, Cluster: r.Cluster, Count: 1, Check: check})
	if r.Abandoned {
		s.note(Event{Kind: EventAbandoned, By: s.actor, Cluster: r.Cluster, Count: 1})
	}
}

// note appends e to the events file. Counting never fails an operation:
// an error is logged.
func (s *Store) note(e Event) {
	if e.By == "" {
		e.By = ByRepair
	}
	fd, err := smallfile.OpenAt(s.stateFd, eventsFile, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err == nil {
		_, err = unix.Write(fd, []byte(e.line()))
		unix.Close(fd)
	}
	if err != nil {
		s.log.Warn("count an event for the metrics", "event", strings.TrimSpace(e.line()), "error", err)
	}
}

// readEvents reads the events file from offset from to its last whole
// line, and returns the events with the offset to read on from. A file
// shorter than from was folded or replaced: it is read again from 0 (reset
// says so). No file: no events.
func (s *Store) readEvents(from int64) (events []Event, next int64, reset bool, err error) {
	data, err := smallfile.ReadAt(s.stateFd, eventsFile, maxEvents)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("read %s/%s: %w", s.StateDir, eventsFile, err)
	}
	return eventsFrom(data, err, from)
}

// eventsFrom is readEvents' decision on the file's content data (or the
// error of its read).
func eventsFrom(data []byte, err error, from int64) (events []Event, next int64, reset bool, _ error) {
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, from > 0, nil
	}
	if err != nil {
		return nil, from, false, err
	}
	if reset = int64(len(data)) < from; reset {
		from = 0
	}
	data = data[from:]
	whole := bytes.LastIndexByte(data, '\n') + 1 // a line being written waits for the next read
	for _, line := range strings.Split(string(data[:whole]), "\n") {
		if e, ok := parseEvent(line); ok {
			events = append(events, e)
		}
	}
	return events, from + int64(whole), reset, nil
}

// maxEvents bounds the events file, which the sweeper folds past
// foldOver (256 KiB) and which grows by a line per refused DEL while no
// sweeper runs: a refusal every 10 s for years.
const maxEvents = 256 << 20

// FoldEvents keeps the events file small for the node agent, which reads
// it (ReadEvents): past over bytes it is folded into one line per counter,
// under the lock (appenders hold it). The sweeper folds each round, so the
// file stays small while a holder's DEL is refused for weeks.
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
	all, _, _, err := s.readEvents(0)
	if err != nil {
		return err
	}
	sums := map[[3]string]uint64{}
	for _, e := range all {
		sums[[3]string{e.Kind, e.By, e.Cluster}] += e.Count
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

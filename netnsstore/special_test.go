package netnsstore

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// within runs fn and fails the test if it has not returned after a few
// seconds: a read that blocks (a FIFO opened for reading without a
// writer, /dev/zero read whole) is what these tests catch.
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still blocked after 10 s", what)
		return nil
	}
}

// special replaces path with each kind of special file in turn and calls
// try, which must fail naming the file, and return at once.
func special(t *testing.T, path string, try func() error) {
	t.Helper()
	kinds := map[string]func() error{
		"FIFO":      func() error { return unix.Mkfifo(path, 0o600) },
		"directory": func() error { return os.Mkdir(path, 0o700) },
		"symlink":   func() error { return os.Symlink("/dev/zero", path) },
	}
	for kind, mk := range kinds {
		require.NoError(t, os.RemoveAll(path))
		require.NoError(t, mk(), kind)
		err := within(t, filepath.Base(path)+" as a "+kind, try)
		require.Error(t, err, "%s as a %s", path, kind)
		t.Logf("%s as a %s: %v", filepath.Base(path), kind, err)
		assert.Contains(t, err.Error(), filepath.Base(path), "%s as a %s: the error names the file", path, kind)
	}
	require.NoError(t, os.RemoveAll(path))
}

// TestSpecialFilesAreErrorsNamingThem: a FIFO, a directory or a symlink to
// /dev/zero in place of any file of pinDir or stateDir makes the operation
// fail with an error naming it, at once. (At 3819815 the store's files were
// opened blocking, so a FIFO record, boot-id or .netns-pin-state-dir
// hung every operation, and sweeper.json and events were read
// with os.ReadFile/os.Open through symlinks: /dev/zero exhausted memory.)
func TestSpecialFilesAreErrorsNamingThem(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.9.5/24")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	list := func() error { _, err := s.List(); return err }
	require.NoError(t, list())

	record := filepath.Join(s.StateDir, recordsSubdir, "c1.net1"+recordSuffix)
	saved, err := os.ReadFile(record)
	require.NoError(t, err)
	special(t, record, list)
	special(t, record, func() error {
		_, bad, err := ReadRecords(s.StateDir)
		if err != nil {
			return err
		}
		return bad["c1.net1"]
	})
	require.NoError(t, os.WriteFile(record, saved, 0o600))
	require.NoError(t, list())

	for _, f := range []string{filepath.Join(s.StateDir, bootMarker), filepath.Join(s.PinDir, ownerFile)} {
		saved, err := os.ReadFile(f)
		require.NoError(t, err, f)
		special(t, f, list)
		require.NoError(t, os.WriteFile(f, saved, 0o644))
		require.NoError(t, list(), "%s restored", f)
	}

	events := filepath.Join(s.StateDir, eventsFile)
	special(t, events, s.fold)
	special(t, events, func() error { _, _, _, err := ReadEvents(s.StateDir, 0); return err })

	status := filepath.Join(s.StateDir, sweepStatusFile)
	special(t, status, func() error { _, err := ReadSweepStatus(s.StateDir); return err })
	require.NoError(t, s.WriteSweepStatus(SweepStatus{PID: 1}))
	st, err := ReadSweepStatus(s.StateDir)
	require.NoError(t, err)
	assert.Equal(t, 1, st.PID)
}

// TestEditedPinPathIsRefused: a record whose pinPath is not the one its
// attachment names (edited to another netns's mount, say the host's) is
// reported and nothing is released: no chain DEL, no unmount. (At 3819815
// the record's pinPath was read as written and handed to the chain as
// CNI_NETNS.)
func TestEditedPinPathIsRefused(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.9.6/24")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	teardowns := 0
	s.teardown = func(*Record) error { teardowns++; return nil }

	path := filepath.Join(s.StateDir, recordsSubdir, "c1.net1"+recordSuffix)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(data, &rec))
	rec["pinPath"], rec["abandoned"] = "/proc/1/ns/net", true
	edited, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, edited, 0o600))

	_, err = s.Release("c1.net1", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `names the pin "/proc/1/ns/net"`)
	_, err = s.ForceRelease("c1.net1")
	require.Error(t, err)
	assert.Zero(t, teardowns, "no chain DEL")
	assert.True(t, mountedAt(t, s.pinPath("c1.net1")), "the pin stays")
	assert.FileExists(t, path)
	_, err = s.List()
	assert.ErrorContains(t, err, "names the pin")
}

// TestEventsStayBoundedWithoutASweeper: a million refused DELs and no
// sweeper to fold the events file. The writer folds it past eventsFoldAt,
// so it stays about that size, and every refusal is still counted; reading
// it takes at most a chunk at a time, so neither the writers nor a reader
// grow with the count. The first thousand refusals are real DELs refused
// by the in-use check, the rest are appended by the same writer under one
// hold of the lock, for time. (At 3819815 only the sweeper folded: the file
// grew by a line per refusal, about 40 MB here, and was read whole.)
func TestEventsStayBoundedWithoutASweeper(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.9.7/24")
	rec, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	s.inUse = func(*Record, string) ([]Use, error) { return uses("process 1 (x)"), nil }
	const total, real = 1_000_000, 1000
	for range real {
		_, err := s.Release("c1.net1", &Teardown{Netns: n.Path})
		require.ErrorIs(t, err, errInUse)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	events := filepath.Join(s.StateDir, eventsFile)
	var largest int64
	unlock, err := s.lock()
	require.NoError(t, err)
	for i := range total - real {
		s.note(Event{Kind: EventRefusal, By: ByDEL, Cluster: rec.Cluster, Count: 1, Check: s.lastCheck})
		if i%4096 == 0 {
			st, err := os.Stat(events)
			require.NoError(t, err)
			largest = max(largest, st.Size())
		}
	}
	unlock()
	st, err := os.Stat(events)
	require.NoError(t, err)
	largest = max(largest, st.Size())
	line := int64(len(Event{Kind: EventRefusal, By: ByDEL, Cluster: rec.Cluster, Count: 1, Check: time.Second}.line()))
	assert.LessOrEqual(t, largest, eventsFoldAt+line, "the events file stays within its fold size")

	var counted uint64
	reads := 0
	for from := int64(0); ; {
		reads++
		evs, next, _, err := ReadEvents(s.StateDir, from)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Kind == EventRefusal && e.Cluster == rec.Cluster {
				counted += e.Count
			}
		}
		if next == from {
			break
		}
		from = next
	}
	assert.Equal(t, uint64(total), counted, "every refusal is counted across the folds")
	runtime.ReadMemStats(&after)
	grew := int64(after.Sys) - int64(before.Sys)
	t.Logf("events file at most %d bytes, %d read(s) to count %d refusals, memory obtained from the OS grew by %d KiB", largest, reads, counted, grew>>10)
	assert.Less(t, grew, int64(16<<20), "memory does not grow with the refusals")
}

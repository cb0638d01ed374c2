package netnsstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sums adds up events by kind, actor and cluster.
func sums(events []Event) map[[3]string]uint64 {
	out := map[[3]string]uint64{}
	for _, e := range events {
		out[[3]string{e.Kind, e.By, e.Cluster}] += e.Count
	}
	return out
}

// A runtime's DEL refused then released, and an operator's release, each
// append one line; no pin-less operation (a pass-through DEL, an ADD)
// writes any. The sweeper's fold keeps the file within a size and every
// count, and reads go on from the folded file's end.
func TestEventsCountRefusalsAndReleases(t *testing.T) {
	s := testStore(t)
	s.actor = ByDEL
	n := testNetns(t, "10.98.7.5/24")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(s.StateDir, eventsFile))
	require.ErrorIs(t, err, os.ErrNotExist, "an ADD counts nothing")

	s.inUse = func(*Record, string) ([]Use, error) { return uses("rbd0"), nil }
	_, err = s.Release("c1.net1", &Teardown{Netns: n.Path})
	require.ErrorIs(t, err, errInUse)
	s.inUse = notInUse
	_, err = s.Release("c1.net1", &Teardown{Netns: n.Path})
	require.NoError(t, err)

	m := testNetns(t, "10.98.7.6/24")
	_, err = s.Pin(pinReq(s, "c2", "ns/cl", m.Path))
	require.NoError(t, err)
	s.actor = ByOperator
	_, err = s.ForceRelease("c2.net1")
	require.NoError(t, err)

	events, next, reset, err := ReadEvents(s.StateDir, 0)
	require.NoError(t, err)
	assert.False(t, reset)
	assert.Equal(t, map[[3]string]uint64{
		{EventRefusal, ByDEL, "ns/cl"}:      1,
		{EventRelease, ByDEL, "ns/cl"}:      1,
		{EventRelease, ByOperator, "ns/cl"}: 1,
	}, sums(events))
	assert.Positive(t, events[0].Check, "a refusal carries its check's duration")
	assert.Zero(t, events[2].Check, "a forced release ran no check")

	// A torn last line (a crash mid-write) waits; nothing new from next.
	f, err := os.OpenFile(filepath.Join(s.StateDir, eventsFile), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("release del ns/cl 1")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	more, next2, _, err := ReadEvents(s.StateDir, next)
	require.NoError(t, err)
	assert.Empty(t, more)
	assert.Equal(t, next, next2)
	// The next append completes that line into garbage, which is skipped,
	// and its own counts.
	s.actor = ByGC
	s.note(Event{Kind: EventRelease, By: ByGC, Cluster: "ns/cl", Count: 1})
	more, _, _, err = ReadEvents(s.StateDir, next2)
	require.NoError(t, err)
	assert.Empty(t, more, "a line torn and continued is skipped")

	for range 50 {
		s.note(Event{Kind: EventRefusal, By: ByDEL, Cluster: "ns/other", Count: 1})
	}
	before, _, _, err := ReadEvents(s.StateDir, 0)
	require.NoError(t, err)
	require.NoError(t, s.FoldEvents(1<<20))
	unfolded, _, _, err := ReadEvents(s.StateDir, 0)
	require.NoError(t, err)
	assert.Equal(t, before, unfolded, "a file within the size is not folded")
	require.NoError(t, s.FoldEvents(64))
	all, end, _, err := ReadEvents(s.StateDir, 0)
	require.NoError(t, err)
	assert.Equal(t, sums(before), sums(all), "folding keeps every count")
	assert.Len(t, all, 4, "one line per counter")

	s.note(Event{Kind: EventRelease, By: BySweeper, Cluster: "ns/cl", Count: 1})
	after, _, reset, err := ReadEvents(s.StateDir, end)
	require.NoError(t, err)
	assert.False(t, reset)
	assert.Equal(t, map[[3]string]uint64{{EventRelease, BySweeper, "ns/cl"}: 1}, sums(after))
	_, _, reset, err = ReadEvents(s.StateDir, end+1<<20)
	require.NoError(t, err)
	assert.True(t, reset, "a file shorter than the offset was replaced")
}

// The sweeper's status is written whole and read back; none before.
func TestSweepStatus(t *testing.T) {
	s := testStore(t)
	st, err := ReadSweepStatus(s.StateDir)
	require.NoError(t, err)
	assert.Nil(t, st)
	want := SweepStatus{PID: 7, Interval: 10e9, Error: "boom", Finished: 2}
	require.NoError(t, s.WriteSweepStatus(want))
	st, err = ReadSweepStatus(s.StateDir)
	require.NoError(t, err)
	assert.Equal(t, want, *st)
}

// What a holder DEL's release or refusal pays for its count: one append
// (about 3 µs here, against the 4-5 ms of a holder DEL).
func BenchmarkNoteEvent(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(filepath.Join(dir, "pin"), filepath.Join(dir, "state"), Options{})
	require.NoError(b, err)
	b.Cleanup(s.Close)
	e := Event{Kind: EventRelease, By: ByDEL, Cluster: "rook-ceph/my-cluster", Count: 1, Check: 1500e3}
	events := filepath.Join(s.StateDir, eventsFile)
	i := 0
	for b.Loop() {
		s.note(e)
		if i++; i%10000 == 0 {
			b.StopTimer() // keep the file small; only appends are timed
			require.NoError(b, os.Truncate(events, 0))
			b.StartTimer()
		}
	}
}

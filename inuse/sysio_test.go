package inuse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

// parallel visits every item once, in one goroutine below two workers'
// worth of items and in several above, and returns the first error, after
// which no worker takes another chunk.
func TestParallelVisitsEveryItemOnce(t *testing.T) {
	for _, n := range []int{0, 1, 47, 95, 96, 500, 4096} {
		c := &checker{bufs: make([]workerBufs, 4)}
		c.progress.items = make([]atomic.Int64, len(c.bufs))
		want := 1 // goroutines
		if n >= 2*48 {
			want = min(4, n/48)
		}
		// Every worker waits in its first item until all have started:
		// with fewer workers than want, the wait times out.
		var started atomic.Int32
		all := make(chan struct{})
		seen := make([]atomic.Int32, n)
		var first [4]atomic.Bool
		err := c.parallel(n, func(i int) string { return fmt.Sprint(i) }, func(w, i int) error {
			seen[i].Add(1)
			if first[w].CompareAndSwap(false, true) {
				if started.Add(1) == int32(want) {
					close(all)
				}
				select {
				case <-all:
				case <-time.After(10 * time.Second):
					return fmt.Errorf("n=%d: %d of %d workers started", n, started.Load(), want)
				}
			}
			return nil
		})
		require.NoError(t, err)
		for i := range seen {
			require.EqualValues(t, 1, seen[i].Load(), "n=%d: item %d", n, i)
		}
		if n > 0 {
			assert.EqualValues(t, want, started.Load(), "n=%d: goroutines", n)
		}
	}

	c := &checker{bufs: make([]workerBufs, 2)}
	c.progress.items = make([]atomic.Int64, len(c.bufs))
	boom := errors.New("boom")
	var calls atomic.Int64
	err := c.parallel(4096, func(i int) string { return "" }, func(w, i int) error {
		calls.Add(1)
		if i == 100 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	assert.Less(t, calls.Load(), int64(4096), "workers stop after the first error")
}

// Listed hears the running count of entries after each directory a check
// lists: debugfs clients, rbd devices, then processes.
func TestCheckListedCountsEntries(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, cephfixture.Volumes(f.sysfs, f.debugfs, 5, func(int) string { return otherIP4.String() }))
	f.process(100, proc{Comm: "sleep", Netns: f.other})
	f.process(101, proc{Comm: "sleep", Netns: f.other})
	clients, err := os.ReadDir(filepath.Join(f.debugfs, "ceph"))
	require.NoError(t, err)
	devices, err := os.ReadDir(filepath.Join(f.sysfs, "bus", "rbd", "devices"))
	require.NoError(t, err)
	procs := 0
	ents, err := os.ReadDir(f.proc)
	require.NoError(t, err)
	for _, e := range ents {
		if isDigits([]byte(e.Name())) {
			procs++
		}
	}
	var heard []int
	o := f.options(PolicyBlock)
	o.Listed = func(n int) { heard = append(heard, n) }
	check(t, f.target(ourIP4), o)
	c, d := len(clients), len(clients)+len(devices)
	assert.Equal(t, []int{c, d, d + procs}, heard)
	assert.Len(t, devices, 5)
	assert.NotZero(t, len(clients))
	assert.GreaterOrEqual(t, procs, 3, "pid 1 of the fixture, 100 and 101")
}

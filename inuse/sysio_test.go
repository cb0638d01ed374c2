package inuse

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parallel visits every item once, in one goroutine below two workers'
// worth of items and in several above, and returns the first error, after
// which no worker takes another chunk.
func TestParallelVisitsEveryItemOnce(t *testing.T) {
	for _, n := range []int{0, 1, 47, 95, 96, 500, 4096} {
		c := &checker{workers: 4}
		c.progress.items = make([]atomic.Int64, c.workers)
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

	c := &checker{workers: 2}
	c.progress.items = make([]atomic.Int64, c.workers)
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

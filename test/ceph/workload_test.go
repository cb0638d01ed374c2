package ceph

// A continuous write/read/verify workload on a mount: every operation writes
// a file with fresh random content, fsyncs it (so the data must reach the
// OSD), reads it back and checks its SHA-256, and reads back an older file
// and checks it too. It is bounded in operations and time, paced so that it
// leaves CPU to the cluster, and measured: an operation slower than the stall
// threshold counts as stalled, also while it is still blocked (a hung mount
// is measured, not waited out).

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

const (
	wlFiles    = 16
	wlMinSize  = 4 << 10
	wlMaxSize  = 64 << 10
	wlPace     = 20 * time.Millisecond // at most 50 operations/s
	wlMaxOps   = 20000
	wlMaxTime  = 3 * time.Minute
	stallLimit = 5 * time.Second // an operation slower than this is stalled
)

type workload struct {
	name string
	dir  string

	mu         sync.Mutex
	ops        int // operations that completed and verified
	failures   int // operations that returned an error
	mismatches int // operations that read back other bytes than written
	stalled    int // completed operations slower than stallLimit
	longest    time.Duration
	errs       []string
	sums       map[string][sha256.Size]byte // last content of each file

	running  atomic.Int64 // start (unix ns) of the operation in progress, 0 when idle
	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}
}

// stats is a snapshot of a workload.
type stats struct {
	Ops, Failures, Mismatches, Stalled int
	Longest                            time.Duration
	Hung                               bool // an operation is blocked right now for longer than stallLimit
	Errors                             []string
}

func (s stats) String() string {
	h := ""
	if s.Hung {
		h = " (an operation is still blocked)"
	}
	return fmt.Sprintf("%d operations, %d failed, %d checksum mismatches, %d stalled > %s, longest %s%s",
		s.Ops, s.Failures, s.Mismatches, s.Stalled, stallLimit, s.Longest.Round(time.Millisecond), h)
}

// startWorkload runs the workload in dir (created) until stopped; cleanup
// stops it.
func startWorkload(t *testing.T, name, dir string) *workload {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755), "mkdir on the mount")
	w := &workload{name: name, dir: dir, sums: map[string][sha256.Size]byte{}, stopCh: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() {
		if !w.stop(10 * time.Second) {
			t.Logf("cleanup: workload %s is blocked in an operation on a dead mount", name)
		}
	})
	return w
}

func (w *workload) run() {
	defer close(w.done)
	var seed [32]byte
	copy(seed[:], host.RandHex(32))
	rng := rand.New(rand.NewChaCha8(seed))
	tick := time.NewTicker(wlPace)
	defer tick.Stop()
	end := time.Now().Add(wlMaxTime)
	for i := 0; i < wlMaxOps && time.Now().Before(end); i++ {
		select {
		case <-w.stopCh:
			return
		case <-tick.C:
		}
		start := time.Now()
		w.running.Store(start.UnixNano())
		mismatch, err := w.op(rng, i)
		d := time.Since(start)
		w.running.Store(0)

		w.mu.Lock()
		switch {
		case err != nil:
			w.failures++
			if len(w.errs) < 5 {
				w.errs = append(w.errs, fmt.Sprintf("op %d after %s: %v", i, d.Round(time.Millisecond), err))
			}
		case mismatch != "":
			w.mismatches++
			if len(w.errs) < 5 {
				w.errs = append(w.errs, fmt.Sprintf("op %d: %s", i, mismatch))
			}
		default:
			w.ops++
		}
		if d > w.longest {
			w.longest = d
		}
		if d > stallLimit {
			w.stalled++
		}
		w.mu.Unlock()
	}
}

// op writes file i%wlFiles, fsyncs, reads it back, and reads back the file
// written wlFiles/2 operations earlier.
func (w *workload) op(rng *rand.Rand, i int) (mismatch string, err error) {
	name := fmt.Sprintf("f%02d", i%wlFiles)
	data := make([]byte, (wlMinSize+rng.IntN(wlMaxSize-wlMinSize))&^7)
	for j := 0; j+8 <= len(data); j += 8 {
		v := rng.Uint64()
		for k := range 8 {
			data[j+k] = byte(v >> (8 * k))
		}
	}
	sum := sha256.Sum256(data)
	if err = writeSync(filepath.Join(w.dir, name), data); err != nil {
		return "", err
	}
	got, err := os.ReadFile(filepath.Join(w.dir, name))
	if err != nil {
		return "", fmt.Errorf("read back: %w", err)
	}
	if sha256.Sum256(got) != sum {
		return fmt.Sprintf("%s: read back %d bytes with another checksum than the %d written", name, len(got), len(data)), nil
	}
	w.mu.Lock()
	w.sums[name] = sum
	other := fmt.Sprintf("f%02d", (i+wlFiles/2)%wlFiles)
	want, ok := w.sums[other]
	w.mu.Unlock()
	if ok {
		got, err := os.ReadFile(filepath.Join(w.dir, other))
		if err != nil {
			return "", fmt.Errorf("read %s: %w", other, err)
		}
		if sha256.Sum256(got) != want {
			return fmt.Sprintf("%s: checksum differs from its last write", other), nil
		}
	}
	return "", nil
}

func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	n, err := f.Write(data)
	if err == nil && n != len(data) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(data))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (w *workload) snapshot() stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := stats{Ops: w.ops, Failures: w.failures, Mismatches: w.mismatches, Stalled: w.stalled, Longest: w.longest,
		Errors: append([]string(nil), w.errs...)}
	if start := w.running.Load(); start != 0 {
		age := time.Since(time.Unix(0, start))
		if age > s.Longest {
			s.Longest = age
		}
		if age > stallLimit {
			s.Stalled++
			s.Hung = true
		}
	}
	return s
}

// waitOps waits until the workload has completed n more operations than in
// from; it fails the test when an operation fails or timeout passes.
func (w *workload) waitOps(t *testing.T, from stats, n int, timeout time.Duration, why string) stats {
	t.Helper()
	var s stats
	ok := host.Poll(timeout, 20*time.Millisecond, func() bool {
		s = w.snapshot()
		return s.Ops >= from.Ops+n || s.Failures+s.Mismatches > from.Failures+from.Mismatches
	})
	require.Zero(t, s.Failures+s.Mismatches-from.Failures-from.Mismatches, "workload %s failed %s: %s; %v", w.name, why, s, s.Errors)
	require.True(t, ok, "workload %s did only %d of %d operations within %s %s: %s", w.name, s.Ops-from.Ops, n, timeout, why, s)
	return s
}

// stop stops the workload and waits up to timeout for its operation in
// progress; false means it is still blocked.
func (w *workload) stop(timeout time.Duration) bool {
	w.stopOnce.Do(func() { close(w.stopCh) })
	select {
	case <-w.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// verifyThrough reads every file the workload wrote through another path to
// the same data (another mount, so another client) and compares checksums.
// The workload must be stopped.
func (w *workload) verifyThrough(t *testing.T, dir string) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.NotEmpty(t, w.sums)
	for name, want := range w.sums {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want[:], sha256Of(got)), "%s read through %s differs from the last write", name, dir)
	}
	return len(w.sums)
}

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/conf"
)

// TestReplayFile: skel reads back exactly what limitStdin read, whatever
// its size up to the limit, also past what a pipe holds by default.
func TestReplayFile(t *testing.T) {
	for _, n := range []int{0, 700, minPipeSize, minPipeSize + 1, 1 << 16, 1<<16 + 1, conf.MaxConfigSize} {
		data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		f, err := replayFile(data)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatalf("%d bytes: read: %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes, not the same", n, len(got))
		}
	}
}

// TestPipeHoldsAtMost: skel reads stdin itself only from a pipe whose
// writer is gone and that holds no more than the limit.
func TestPipeHoldsAtMost(t *testing.T) {
	pipe := func(data []byte, closeWriter bool) (r, w *os.File) {
		t.Helper()
		r, w, err := os.Pipe()
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
		if closeWriter {
			require.NoError(t, w.Close())
		} else {
			t.Cleanup(func() { w.Close() })
		}
		t.Cleanup(func() { r.Close() })
		return r, w
	}
	data := bytes.Repeat([]byte("x"), 700)
	r, _ := pipe(data, true)
	assert.True(t, pipeHoldsAtMost(int(r.Fd()), 700), "writer gone, 700 bytes, limit 700")
	assert.False(t, pipeHoldsAtMost(int(r.Fd()), 699), "writer gone, 700 bytes, limit 699")
	r, _ = pipe(nil, true)
	assert.True(t, pipeHoldsAtMost(int(r.Fd()), 0), "writer gone, empty")
	r, _ = pipe(data, false)
	assert.False(t, pipeHoldsAtMost(int(r.Fd()), 1<<20), "a writer may still write")
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, pipeHoldsAtMost(int(f.Fd()), 1<<20), "not a pipe")
	assert.False(t, pipeHoldsAtMost(-1, 1<<20), "no stdin")
}

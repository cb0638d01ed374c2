package main

import (
	"bytes"
	"io"
	"testing"

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

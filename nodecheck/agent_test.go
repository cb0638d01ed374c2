package nodecheck

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/netnsstore"
)

func TestAgentFinding(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	run := func(status string) Finding {
		c := &checker{o: Options{StateDir: state, Now: func() time.Time { return now }}, r: &Report{}}
		c.snap = &netnsstore.Snapshot{Records: []*netnsstore.Record{{PodUID: "u1"}}}
		if status != "" {
			require.NoError(t, os.MkdirAll(state+"-agent", 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(state+"-agent", "status.json"), []byte(status), 0o644))
		}
		c.agent()
		require.Len(t, c.r.Findings, 1)
		return c.r.Findings[0]
	}
	f := run("")
	assert.Equal(t, Warning, f.Level)
	assert.Contains(t, f.What, "no node agent has run")

	fresh := `{"pid":7,"interval":2000000000,"heartbeat":"2026-01-01T11:59:59Z","finalizers":[{"namespace":"rook-ceph","name":"h-1","uid":"u1","deleting":true}]}`
	assert.Equal(t, OK, run(fresh).Level, "a deleting pod whose pin is still there waits, as it should")
	waiting := `{"pid":7,"interval":2000000000,"heartbeat":"2026-01-01T11:59:59Z","finalizers":[{"namespace":"rook-ceph","name":"h-2","uid":"u2","deleting":true}]}`
	f = run(waiting)
	assert.Equal(t, Warning, f.Level)
	assert.Contains(t, f.What, "rook-ceph/h-2")
	stale := `{"pid":7,"interval":2000000000,"heartbeat":"2026-01-01T11:50:00Z","finalizers":[{"namespace":"rook-ceph","name":"h-1","uid":"u1"}]}`
	f = run(stale)
	assert.Equal(t, Error, f.Level, "a finalizer-carrying holder with no agent running")
	assert.Contains(t, f.What, "no node agent runs")

	// A refusal of the API is an error naming the verb, not "its next pass".
	refused := `{"pid":7,"interval":2000000000,"heartbeat":"2026-01-01T11:59:59Z","refused":["patch pods: pods \"h-2\" is forbidden"],"finalizers":[{"namespace":"rook-ceph","name":"h-2","uid":"u2","deleting":true}]}`
	f = run(refused)
	assert.Equal(t, Error, f.Level)
	assert.Contains(t, f.What, "patch pods")
	unread := `{"pid":7,"interval":2000000000,"heartbeat":"2026-01-01T11:59:59Z","unreadableStores":["store /var/lib/x: permission denied"],"finalizers":[]}`
	f = run(unread)
	assert.Equal(t, Error, f.Level)
	assert.Contains(t, f.What, "/var/lib/x")
}

package netnsstore

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// These tests make real network namespaces and bind mounts: they need root.
func requireRoot(t *testing.T) {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "this test makes network namespaces and mounts: run it as root")
}

// testStore opens a store in a fresh temporary folder and, at cleanup,
// detaches every mount left below it (pins, then pinDir's own bind mount).
func testStore(t *testing.T) *Store {
	t.Helper()
	requireRoot(t)
	root := hosttest.NewWorkDir(t, "netnsstore-")
	s, err := Open(filepath.Join(root, "pins-root"), filepath.Join(root, "state"),
		Options{Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), InUse: notInUse, RegistryDir: filepath.Join(root, "stores")})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// notInUse is an in-use check that finds nothing: the store tests choose
// what is in use by replacing s.inUse.
func notInUse(*Record, string) ([]Use, error) { return nil, nil }

// uses makes the result of an in-use check from descriptions.
func uses(what ...string) []Use {
	out := make([]Use, len(what))
	for i, w := range what {
		out[i] = Use{What: w}
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// testNetns makes a real network namespace (`ip netns add`, as a runtime
// does) with lo up and, unless addr is empty, addr on a veth end inside it.
func testNetns(t *testing.T, addr string) *hosttest.NetnsHandle {
	t.Helper()
	requireRoot(t)
	return hosttest.NewNetnsWithAddr(t, "nsstore", addr)
}

func mountedAt(t *testing.T, path string) bool {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	require.NoError(t, err)
	return len(ms) > 0
}

// nsfsMounts counts mounts of the netns with inode ino anywhere.
func nsfsMounts(t *testing.T, ino uint64) int {
	t.Helper()
	return len(hosttest.NsfsMountsOf(t, ino))
}

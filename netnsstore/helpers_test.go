package netnsstore

import (
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	root := t.TempDir()
	t.Cleanup(func() { unmountBelow(t, root) })
	s, err := Open(filepath.Join(root, "pins-root"), filepath.Join(root, "state"),
		Options{Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), InUse: notInUse})
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

func unmountBelow(t *testing.T, root string) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(root))
	require.NoError(t, err)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	for _, m := range mounts {
		_ = unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
	}
}

// testNetns makes a real network namespace (bind-mounted under /run/netns
// like `ip netns add`) with lo up and addr on a veth end inside it.
func testNetns(t *testing.T, addr string) ns.NetNS {
	t.Helper()
	requireRoot(t)
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); _ = testutils.UnmountNS(n) })
	if addr == "" {
		return n
	}
	err = n.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(link, a); err != nil {
			return err
		}
		return netlink.LinkSetUp(link)
	})
	require.NoError(t, err)
	return n
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
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) { return m.FSType != "nsfs" || m.Root != want, false })
	require.NoError(t, err)
	return len(ms)
}

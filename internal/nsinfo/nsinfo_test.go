package nsinfo

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// GlobalAddrs lists the global addresses of every interface of the netns,
// IPv4 and IPv6, and nothing link-local, host-scoped or of another netns.
// Needs root (a network namespace).
func TestGlobalAddrs(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test makes a network namespace: run it as root")
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); _ = testutils.UnmountNS(n) })
	require.NoError(t, n.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0p"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		for _, a := range []string{"192.168.20.5/24", "fd00::17/64", "fe80::17/64", "10.1.0.9/32"} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if a == "10.1.0.9/32" {
				addr.Scope = int(netlink.SCOPE_HOST)
			}
			if err := netlink.AddrAdd(veth, addr); err != nil {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}))
	got, err := GlobalAddrs(int(n.Fd()))
	require.NoError(t, err)
	assert.ElementsMatch(t, []netip.Addr{netip.MustParseAddr("192.168.20.5"), netip.MustParseAddr("fd00::17")}, got)

	own, err := os.Open("/proc/self/ns/net")
	require.NoError(t, err)
	defer own.Close()
	hostAddrs, err := GlobalAddrs(int(own.Fd()))
	require.NoError(t, err)
	assert.NotContains(t, hostAddrs, netip.MustParseAddr("192.168.20.5"), "the host's own list is its own")
}

// A dump that takes many reads (1000 addresses) is read to its end, and
// the goroutines that asked stay in this process's netns.
func TestGlobalAddrsOfABusyNetns(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test makes a network namespace: run it as root")
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); _ = testutils.UnmountNS(n) })
	var want []netip.Addr
	require.NoError(t, n.Do(func(ns.NetNS) error {
		link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0p"}
		if err := netlink.LinkAdd(link); err != nil {
			return err
		}
		for i := range 1000 {
			a := netip.AddrFrom4([4]byte{10, 77, byte(i >> 8), byte(i)})
			addr, err := netlink.ParseAddr(a.String() + "/32")
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(link, addr); err != nil {
				return err
			}
			want = append(want, a)
		}
		return nil
	}))
	before, err := os.Readlink("/proc/thread-self/ns/net")
	require.NoError(t, err)
	for range 20 {
		got, err := GlobalAddrs(int(n.Fd()))
		require.NoError(t, err)
		require.ElementsMatch(t, want, got)
	}
	// Every thread of this process is still in its own netns.
	self, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	tasks, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	for _, task := range tasks {
		got, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		require.NoError(t, err)
		assert.Equal(t, self, got, "thread %s", task.Name())
	}
	assert.Equal(t, self, before)
}

// A dump that addresses change under (the kernel then marks it
// NLM_F_DUMP_INTR, and may have skipped entries) is not taken as the
// netns's addresses: it is read again. An address that stays the whole
// time is in every answer.
func TestGlobalAddrsWhileAddressesChange(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test makes a network namespace: run it as root")
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(); _ = testutils.UnmountNS(n) })
	h, err := netlink.NewHandleAt(netns.NsHandle(n.Fd()))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0p"}
	require.NoError(t, h.LinkAdd(link))
	addr := func(a netip.Addr) *netlink.Addr {
		p, err := netlink.ParseAddr(a.String() + "/32")
		require.NoError(t, err)
		return p
	}
	// Addresses that come and go sit before the ones that stay.
	var flapping, stable []netip.Addr
	for i := range 200 {
		flapping = append(flapping, netip.AddrFrom4([4]byte{10, 78, byte(i >> 8), byte(i)}))
	}
	for i := range 800 {
		stable = append(stable, netip.AddrFrom4([4]byte{10, 79, byte(i >> 8), byte(i)}))
	}
	for _, a := range append(slices.Clone(flapping), stable...) {
		require.NoError(t, h.AddrAdd(link, addr(a)))
	}
	// Each round flaps the front addresses while a dump runs (it starts
	// after the first flap); the burst ends, so the dump is read again
	// until the kernel says it is whole.
	flap := func(started chan<- struct{}, done chan<- error) {
		for i, a := range flapping {
			if err := h.AddrDel(link, addr(a)); err != nil {
				done <- err
				return
			}
			if err := h.AddrAdd(link, addr(a)); err != nil {
				done <- err
				return
			}
			if i == 0 {
				close(started)
			}
		}
		done <- nil
	}
	for range 20 {
		started, done := make(chan struct{}), make(chan error, 1)
		go flap(started, done)
		<-started
		for flapped := false; !flapped; {
			got, err := GlobalAddrs(int(n.Fd()))
			require.NoError(t, err)
			for _, a := range stable {
				if !slices.Contains(got, a) {
					require.Failf(t, "an address that stayed is in every answer", "%s is missing from a dump of %d", a, len(got))
				}
			}
			select {
			case err := <-done:
				require.NoError(t, err)
				flapped = true
			default:
			}
		}
	}
}

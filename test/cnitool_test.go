package e2e

// The real cnitool binary runs [bridge + host-local, netns-pin].

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// A holder pod matched by a `holders` rule: ADD pins, CHECK passes, DEL
// releases, CHECK after DEL fails, DEL again succeeds.
func TestCnitoolBridgeHolderLifecycle(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), true)

	res := a.mustAdd(t)
	ip := sandboxIP(t, res)
	assertPinned(t, a, pinExpect{netns: ns.ID, cluster: cluster, link: c.defaultLink(), ip: ip})
	assert.True(t, containsIP(nsenterAddrs(t, c.defaultLink()), ip), "nsenter --net=%s does not see %s", c.defaultLink(), ip)

	require.NoError(t, a.check(), "CHECK of a pinned holder")

	require.NoError(t, a.del(), "DEL of a holder nothing uses")
	assertReleased(t, a, ns.Path)
	assertNoLink(t, c.defaultLink())

	// After DEL libcni has no cached result: the chain's CHECK fails (host-local
	// no longer has the address, bridge needs a prevResult) before it reaches
	// netns-pin, and nothing is pinned again.
	err := a.check()
	require.Error(t, err, "CHECK after DEL")
	assert.Contains(t, err.Error(), "host-local", "CHECK after DEL should fail in the bridge's IPAM")
	t.Logf("CHECK after DEL: %v", err)
	assertReleased(t, a, ns.Path)

	require.NoError(t, a.del(), "second DEL")
	assertReleased(t, a, ns.Path)
	assertNoLink(t, c.defaultLink())
}

// The pin keeps the netns, its interfaces and addresses after `ip netns del`;
// DEL (with CNI_NETNS gone) releases it and the netns really goes away.
func TestCnitoolPinOutlivesNetnsName(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), true)

	res := a.mustAdd(t)
	ip := sandboxIP(t, res)
	veth := hostVeth(t, res, c.spec.bridge)
	require.True(t, host.LinkExists(veth), "host veth %s", veth)

	ns.Delete(t)

	link := c.defaultLink()
	require.Equal(t, ns.ID, hosttest.StatNS(t, link), "after ip netns del, %s is not the pod's netns", link)
	require.Equal(t, ns.ID, hosttest.StatNS(t, a.pinPath()), "after ip netns del, the pin is not the pod's netns")
	ips := nsenterAddrs(t, link)
	require.True(t, containsIP(ips, ip), "nsenter --net=%s ip -j addr: %v, want %s", link, ips, ip)
	require.True(t, host.LinkExists(veth), "host veth %s vanished although the netns is pinned", veth)
	assertPinned(t, a, pinExpect{netns: ns.ID, cluster: cluster, link: link, ip: ip})

	gone := watchLinkGone(t, veth)
	require.NoError(t, a.del(), "DEL with CNI_NETNS already gone")
	assertReleased(t, a)
	assertNoLink(t, link)
	// Nothing holds the netns any more: the kernel destroys it, and with it
	// the veth pair whose host end we watch.
	if t.Failed() {
		t.FailNow() // the release already failed; do not wait for the netns to die
	}
	gone.wait(t, 30*time.Second, "the netns must die once its pin is released")

	require.NoError(t, a.del(), "DEL again")
}

// DEL for a holder that was never added, on a netns that no longer exists.
func TestCnitoolDelUnknownNetnsGone(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := &hosttest.NetnsHandle{Name: "npe2e-gone-" + host.RandHex(6)}
	ns.Path = filepath.Join("/run/netns", ns.Name)
	a := c.newAttachment(t, ns, holderArgs(), true)
	require.NoError(t, a.del())
	require.NoError(t, a.del())
	assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")))
	assert.Empty(t, treeEntries(t, filepath.Join(c.stateDir, "records")))
	assert.Empty(t, hosttest.MountsUnder(t, c.work))
}

// Pods that are not holders pass through: nothing under pinDir or stateDir.
func TestCnitoolNonHolderUntouched(t *testing.T) {
	c := newChain(t, chainSpec{})
	cases := map[string][][2]string{
		"other namespace":     podArgs("default", "csi-holder-abc"),
		"name does not match": podArgs(clusterNS, "csi-rbdplugin-x7k2p"),
		"no CNI_ARGS":         nil,
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			ns := hosttest.NewNetns(t, "npe2e")
			a := c.newAttachment(t, ns, args, true)
			res := a.mustAdd(t)
			ip := sandboxIP(t, res)
			assert.True(t, containsIP(nsenterAddrs(t, ns.Path), ip), "the chain did not configure %s", ip)
			assertUntouched(t, c)
			require.NoError(t, a.check())
			require.NoError(t, a.del())
			assertUntouchedAfterDel(t, c)
		})
	}
}

// assertUntouchedAfterDel: a non-holder's DEL touches nothing either.
func assertUntouchedAfterDel(t *testing.T, c *chain) {
	t.Helper()
	assertUntouched(t, c)
	assertNoLink(t, c.defaultLink())
}

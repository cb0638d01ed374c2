package e2e

// Pins reach other mount namespaces (the csi-plugin containers), and their
// release does too (docs/design.md §12).

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

func TestPinsReachOtherMountNamespaces(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns1, ns2 := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
	a1 := c.newAttachment(t, ns1, podArgs(clusterNS, "csi-holder-one11"), false)
	a2 := c.newAttachment(t, ns2, podArgs(clusterNS, "csi-holder-two22"), false)
	link := c.defaultLink()

	a1.mustAdd(t)
	assertPinned(t, a1, pinExpect{netns: ns1.ID, cluster: cluster, link: link})

	// a "csi-plugin container" made after the first pin
	pid := startMountNS(t)
	root := fmt.Sprintf("/proc/%d/root", pid)
	mountinfo := fmt.Sprintf("/proc/%d/mountinfo", pid)
	require.Equal(t, ns1.ID, hosttest.StatNS(t, root+a1.pinPath()), "the first pin seen from the other mount namespace")
	require.Equal(t, ns1.ID, hosttest.StatNS(t, root+link), "the link seen from the other mount namespace")

	// a pin made later reaches it
	a2.mustAdd(t)
	assertPinned(t, a2, pinExpect{netns: ns2.ID, cluster: cluster, link: link})
	require.Len(t, mountsAtIn(t, mountinfo, a2.pinPath()), 1, "the new pin did not propagate to the other mount namespace")
	require.Equal(t, ns2.ID, hosttest.StatNS(t, root+a2.pinPath()), "the new pin seen from the other mount namespace")
	require.Equal(t, ns2.ID, hosttest.StatNS(t, root+link), "the link seen from the other mount namespace")

	// releases reach it too
	require.NoError(t, a2.del())
	assertReleased(t, a2, ns2.Path)
	assert.Empty(t, mountsAtIn(t, mountinfo, a2.pinPath()), "released pin still mounted in the other mount namespace")
	assert.Empty(t, without(hosttest.NsfsMountsOfIn(t, mountinfo, ns2.ID.Ino), ns2.Path), "net:[%d] still mounted in the other mount namespace", ns2.ID.Ino)
	require.Equal(t, ns1.ID, hosttest.StatNS(t, root+link), "after the newer pin's release the link leads to the older one")

	require.NoError(t, a1.del())
	assertReleased(t, a1, ns1.Path)
	assertNoLink(t, link)
	assert.Empty(t, mountsAtIn(t, mountinfo, a1.pinPath()), "released pin still mounted in the other mount namespace")
	assert.Empty(t, without(hosttest.NsfsMountsOfIn(t, mountinfo, ns1.ID.Ino), ns1.Path), "net:[%d] still mounted in the other mount namespace", ns1.ID.Ino)
}

// without returns list less the given entries.
func without(list []string, drop ...string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(drop, s) {
			out = append(out, s)
		}
	}
	return out
}

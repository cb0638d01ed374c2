package e2e

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// The holder lifecycle of docs/design.md §5 and §6 through cnitool, for two clusters side by
// side: a new holder takes its cluster's link; the old one, still
// referenced by an rbd device on its IP, is refused and stays pinned while
// the link stays on the new one; unreferenced, it is released; the last
// release removes the link. The other cluster is never touched.
func TestCnitoolHolderGenerationsTwoClusters(t *testing.T) {
	fx := newRBDFixture(t)
	holders := []map[string]any{
		holderRule,
		{"podNamespace": "ceph-b", "podName": "holder-*", "cluster": "ceph-b/other"},
	}
	c := newChain(t, chainSpec{version: "1.1.0", holders: holders, inUse: fx.inUse()})
	type gen struct {
		a  *attachment
		ip net.IP
	}
	type clusterUnderTest struct {
		name, link string
		old, new   gen
	}
	clusters := []*clusterUnderTest{
		{name: cluster, link: c.defaultLink()},
		{name: "ceph-b/other", link: c.linkPath("ceph-b", "other")},
	}
	podArgsFor := func(cl *clusterUnderTest, pod string) [][2]string {
		if cl.name == cluster {
			return podArgs(clusterNS, "csi-holder-"+pod)
		}
		return podArgs("ceph-b", "holder-"+pod)
	}
	add := func(cl *clusterUnderTest, pod string) gen {
		a := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), podArgsFor(cl, pod), true)
		return gen{a: a, ip: sandboxIP(t, a.mustAdd(t))}
	}
	for i, cl := range clusters {
		cl.old = add(cl, "old0"+string(rune('a'+i)))
		assertLinkTo(t, cl.link, cl.old.a)
	}
	for i, cl := range clusters {
		cl.new = add(cl, "new0"+string(rune('a'+i)))
		assertLinkTo(t, cl.link, cl.new.a)
	}
	for i, cl := range clusters {
		other := clusters[1-i]
		// A volume still mapped through the old holder.
		fx.mapDevice(t, "0", cl.old.ip, "csi-vol-"+strings.ReplaceAll(cl.name, "/", "-"))
		err := cl.old.a.del()
		require.Error(t, err, "DEL of the old holder of %s while rbd0 uses its IP", cl.name)
		assert.Contains(t, err.Error(), "cluster "+cl.name)
		assert.Contains(t, err.Error(), cl.old.ip.String())
		rec := readRecord(t, cl.old.a.recordPath())
		assert.Equal(t, "draining", rec.str("state"))
		assert.True(t, rec.hasIP(cl.old.ip))
		assert.Equal(t, cl.old.a.netns.ID, hosttest.StatNS(t, cl.old.a.pinPath()), "the old holder stays pinned")
		assertLinkTo(t, cl.link, cl.new.a) // a draining pin never takes the link from an active one
		assertLinkTo(t, other.link, other.new.a)

		fx.unmapDevice(t, "0")
		require.NoError(t, cl.old.a.del(), "DEL of the old holder of %s once unused", cl.name)
		assertReleased(t, cl.old.a, cl.old.a.netns.Path)
		assertLinkTo(t, cl.link, cl.new.a)
		assertLinkTo(t, other.link, other.new.a)
	}
	for i, cl := range clusters {
		require.NoError(t, cl.new.a.del())
		assertReleased(t, cl.new.a, cl.new.a.netns.Path)
		assertNoLink(t, cl.link)
		if i == 0 {
			assertLinkTo(t, clusters[1].link, clusters[1].new.a)
		}
	}
}

// cnitool status and cnitool gc (CNI 1.1). STATUS succeeds where pins can
// be made. cnitool's GC names no valid attachment, so every pin of the
// network is collected exactly as DEL would: the unused one is released,
// the one an rbd device still uses is kept until it is unused.
func TestCnitoolStatusAndGC(t *testing.T) {
	fx := newRBDFixture(t)
	c := newChain(t, chainSpec{version: "1.1.0", inUse: fx.inUse()})
	e := c.env
	env := []string{"CNI_PATH=" + e.cniPath, "NETCONFPATH=" + c.netconfDir}
	usedNS := hosttest.NewNetns(t, "npe2e")
	// cnitool wants a netns argument for status and gc too; it is unused.
	cnitool := func(verb string) host.CmdResult {
		return host.RunCmd(host.CmdTimeout, env, nil, e.cnitool, verb, c.name, usedNS.Path)
	}
	r := cnitool("status")
	require.NoError(t, r.Err, "cnitool status: %s", r)

	used := c.newAttachment(t, usedNS, podArgs(clusterNS, "csi-holder-used1"), false)
	usedIP := sandboxIP(t, used.mustAdd(t))
	unused := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), podArgs(clusterNS, "csi-holder-idle1"), false)
	unused.mustAdd(t)
	fx.mapDevice(t, "0", usedIP, "csi-vol-gc")

	r = cnitool("gc")
	require.NoError(t, r.Err, "cnitool gc: %s", r)
	assertReleased(t, unused, unused.netns.Path)
	rec := readRecord(t, used.recordPath())
	assert.Equal(t, "draining", rec.str("state"), "GC keeps a pin still in use")
	assert.Equal(t, used.netns.ID, hosttest.StatNS(t, used.pinPath()))
	assertLinkTo(t, c.defaultLink(), used)

	fx.unmapDevice(t, "0")
	r = cnitool("gc")
	require.NoError(t, r.Err, "cnitool gc: %s", r)
	assertReleased(t, used, used.netns.Path)
	assertNoLink(t, c.defaultLink())
}

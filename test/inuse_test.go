package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// rbdFixture is a sysfs tree laid out like the kernel's
// (Documentation/ABI/testing/sysfs-bus-rbd) with an empty debugfs ceph
// folder beside it: this kernel has no krbd, so a mapped image is stood in
// for by its sysfs attributes. The fixture is the only stand-in; the chain,
// the netns and the plugins are real.
type rbdFixture struct {
	sysfs, debugfs string
}

func newRBDFixture(t *testing.T) rbdFixture {
	t.Helper()
	root := t.TempDir()
	f := rbdFixture{sysfs: filepath.Join(root, "sys"), debugfs: filepath.Join(root, "debug")}
	require.NoError(t, os.MkdirAll(filepath.Join(f.sysfs, "bus/rbd/devices"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(f.debugfs, "ceph"), 0o755))
	return f
}

func (f rbdFixture) inUse() map[string]any {
	return map[string]any{"sysfs": f.sysfs, "debugfs": f.debugfs}
}

// mapDevice writes /sys/bus/rbd/devices/<id> for an image mapped by a
// client whose first monitor saw it at ip.
func (f rbdFixture) mapDevice(t *testing.T, id string, ip net.IP, image string) {
	t.Helper()
	dir := filepath.Join(f.sysfs, "bus/rbd/devices", id)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	addr := ip.String() + ":0/3527561932"
	if ip.To4() == nil {
		addr = "[" + ip.String() + "]:0/3527561932"
	}
	for name, value := range map[string]string{
		"client_addr":  addr,
		"client_id":    "client4161",
		"cluster_fsid": "b5e3c1a2-7d4f-4e8a-9c61-0f2d3e4a5b6c",
		"pool":         "replicapool",
		"pool_ns":      "",
		"name":         image,
		"current_snap": "-",
		"config_info":  "192.168.20.10:6789 name=csi-rbd-node,key=client.csi-rbd-node replicapool " + image + " -",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o444))
	}
}

func (f rbdFixture) unmapDevice(t *testing.T, id string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(filepath.Join(f.sysfs, "bus/rbd/devices", id)))
}

func (c *chain) leasePath(ip net.IP) string {
	return filepath.Join(c.work, "host-local", c.name, ip.String())
}

// A mapped rbd image whose client address is the holder's IP keeps the
// holder: cnitool DEL fails with the reference named, and the netns, its
// interface, its address and the host-local lease all stay; unmapped, DEL
// goes through and the lease is released.
func TestCnitoolDelRefusedWhileRBDMapped(t *testing.T) {
	fx := newRBDFixture(t)
	c := newChain(t, chainSpec{inUse: fx.inUse()})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), true)
	ip := sandboxIP(t, a.mustAdd(t))
	require.FileExists(t, c.leasePath(ip))

	fx.mapDevice(t, "0", ip, "csi-vol-1")
	fx.mapDevice(t, "1", net.ParseIP("10.250.0.9"), "csi-vol-other-netns") // another netns's client: no reference
	err := a.del()
	require.Error(t, err, "DEL while rbd0 is mapped from the holder's IP")
	msg := err.Error()
	assert.Contains(t, msg, "cluster "+cluster)
	assert.Contains(t, msg, "still in use by")
	assert.Contains(t, msg, "rbd0")
	assert.Contains(t, msg, "replicapool/csi-vol-1")
	assert.Contains(t, msg, ip.String())
	assert.NotContains(t, msg, "csi-vol-other-netns")

	assert.True(t, ns.Exists(), "the netns stays")
	assert.True(t, containsIP(nsenterAddrs(t, ns.Path), ip), "the interface keeps %s", ip)
	assert.FileExists(t, c.leasePath(ip), "host-local keeps the lease: the chain stopped at netns-pin")
	assert.True(t, containsIP(nsenterAddrs(t, c.defaultLink()), ip), "the link still leads to the holder's netns")
	rec := readRecord(t, a.recordPath())
	assert.Equal(t, "draining", rec.str("state"))

	fx.unmapDevice(t, "0")
	require.NoError(t, a.del(), "DEL once nothing uses the netns")
	assertReleased(t, a, ns.Path)
	assertNoLink(t, c.defaultLink())
	assert.NoFileExists(t, c.leasePath(ip), "the lease is released")
}

// Through libcni the refusal is CNI error 11 ("try again later") with every
// reference in details, the first ones in the message.
func TestLibcniDelRefusalIsCode11(t *testing.T) {
	fx := newRBDFixture(t)
	c := newChain(t, chainSpec{version: "1.1.0", inUse: fx.inUse()})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	ip := sandboxIP(t, a.mustAdd(t))
	for _, id := range []string{"0", "1", "2"} {
		fx.mapDevice(t, id, ip, "csi-vol-"+id) // three devices sharing one client
	}
	err := a.del()
	require.Error(t, err)
	assert.Equal(t, types.ErrTryAgainLater, cniErrorCode(err), "DEL refusal is CNI error 11: %v", err)
	var te *types.Error
	require.ErrorAs(t, err, &te)
	assert.Contains(t, te.Msg, "rbd0")
	assert.Contains(t, te.Msg, "and 1 more")
	cmd := "netns-pinctl --pin-dir " + c.pinDir + " --state-dir " + c.stateDir + " --sysfs " + fx.sysfs + " --debugfs " + fx.debugfs + " inuse " + a.attachmentName()
	assert.Contains(t, te.Msg, cmd)
	// The command in the message shows the same references.
	out := hosttest.MustRun(t, c.env.ctl, strings.Fields(cmd)[1:]...)
	assert.Contains(t, out, "in use by 3:")
	assert.Contains(t, out, "rbd2 replicapool/csi-vol-2")
	for _, id := range []string{"rbd0", "rbd1", "rbd2"} {
		assert.Contains(t, te.Details, id, "details list every reference")
	}
	assert.FileExists(t, c.leasePath(ip))

	for _, id := range []string{"0", "1", "2"} {
		fx.unmapDevice(t, id)
	}
	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
	assert.NoFileExists(t, c.leasePath(ip))
}

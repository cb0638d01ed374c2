package e2e

// What the plugin must refuse (docs/design.md §5, §12, §13): a CNI_NETNS that is not another
// network namespace, a holder ADD without prevResult, and running in a mount
// namespace from which pins would not reach the host.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// fakePrevResult is a plausible result of the plugin before netns-pin.
func fakePrevResult(t *testing.T, netnsPath string) types.Result {
	t.Helper()
	ip, ipn, err := net.ParseCIDR("10.99.254.7/24")
	require.NoError(t, err)
	ipn.IP = ip
	idx := 0
	return &types100.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: ifName, Mac: "02:00:00:00:00:07", Sandbox: netnsPath}},
		IPs:        []*types100.IPConfig{{Interface: &idx, Address: *ipn}},
	}
}

func TestPinRefusesBadNetns(t *testing.T) {
	c := newChain(t, chainSpec{})
	regular := filepath.Join(c.work, "not-a-netns")
	require.NoError(t, os.WriteFile(regular, nil, 0o600))
	cases := map[string]string{
		"the host netns":      fmt.Sprintf("/proc/%d/ns/net", os.Getpid()),
		"a mount namespace":   fmt.Sprintf("/proc/%d/ns/mnt", os.Getpid()),
		"a regular file":      regular,
		"a missing path":      filepath.Join(c.work, "missing"),
		"the plugin's own ns": "/proc/self/ns/net",
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			a := c.newAttachment(t, &hosttest.NetnsHandle{Name: name, Path: path}, holderArgs(), false)
			a.noCleanDel = true // only netns-pin ran, and it refused
			out, err := a.execPin(t, "ADD", fakePrevResult(t, path))
			require.Error(t, err, "ADD with CNI_NETNS=%s printed %s", path, out)
			t.Logf("refused: %v", err)
			assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), "pins")
			assert.Empty(t, treeEntries(t, filepath.Join(c.stateDir, "records")), "records")
			assert.Empty(t, hosttest.MountsUnder(t, filepath.Join(c.pinDir, "pins")), "mounts")
		})
	}
}

func TestPinRequiresPrevResult(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	out, err := a.execPin(t, "ADD", nil)
	require.Error(t, err, "holder ADD without prevResult printed %s", out)
	t.Logf("refused: %v", err)
	assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), "pins")
	assert.Empty(t, hosttest.MountsUnder(t, c.work), "mounts")
}

// foreignMountNSChain is a chain whose netns-pin runs in a mount namespace
// of its own, a copy of the host's (as Multus thick mode runs delegates in
// its daemon's container).
func foreignMountNSChain(t *testing.T) *chain {
	t.Helper()
	e := requireEnv(t)
	dir := hosttest.NewWorkDir(t, "netns-pin-e2e-")
	cniPath := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(cniPath, 0o755))
	for _, p := range []string{"bridge", "host-local"} {
		require.NoError(t, os.Symlink(filepath.Join(e.cniPath, p), filepath.Join(cniPath, p)))
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec unshare --mount --propagation unchanged -- %s \"$@\"\n", filepath.Join(e.cniPath, "netns-pin"))
	require.NoError(t, os.WriteFile(filepath.Join(cniPath, "netns-pin"), []byte(wrapper), 0o755))
	return newChain(t, chainSpec{version: "1.1.0", cniPath: cniPath})
}

// The plugin run in a mount namespace of its own where pinDir is no peer of
// a host mount: ADD fails and names the volume to add, STATUS reports
// error 50.
func TestPinRefusesForeignMountNamespace(t *testing.T) {
	c := foreignMountNSChain(t)
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	_, err := a.add(t)
	require.Error(t, err, "ADD outside the host mount namespace")
	assert.Contains(t, err.Error(), "would not reach the host", "the error must say what is wrong")
	assert.Contains(t, err.Error(), "mountPropagation: Bidirectional", "and what to do")
	t.Logf("ADD: %v", err)
	assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), "pins")
	assert.Empty(t, hosttest.MountsUnder(t, c.work), "mounts")

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	err = c.cni.GetStatusNetworkList(ctx, c.list)
	require.Error(t, err, "STATUS outside the host mount namespace")
	assert.EqualValues(t, types.ErrPluginNotAvailable, cniErrorCode(err), "STATUS error code: %v", err)
}

// The same mount namespace of its own, but pinDir there is a peer of the
// host's pinDir (a shared mount before the namespace was made, as a
// Bidirectional volume is): the pin made there appears on the host, and so
// does its release.
func TestPinFromPeerMountNamespace(t *testing.T) {
	c := foreignMountNSChain(t)
	require.NoError(t, os.MkdirAll(c.pinDir, 0o755))
	require.NoError(t, unix.Mount(c.pinDir, c.pinDir, "", unix.MS_BIND, ""))
	require.NoError(t, unix.Mount("", c.pinDir, "", unix.MS_SHARED, ""))
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	a.mustAdd(t)
	assert.Equal(t, hosttest.StatNS(t, ns.Path), hosttest.StatNS(t, a.pinPath()), "the pin on the host is the netns")
	require.NoError(t, a.del())
	assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), "pins")
	assert.Equal(t, []string{c.pinDir}, hosttest.MountsUnder(t, c.work), "only pinDir's own mount is left")
}

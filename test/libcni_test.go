package e2e

// libcni runs the chains (as containerd and CRI-O do), with a recording
// executor that shows what each plugin received and printed.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// assertPassthrough checks that netns-pin's last ADD printed exactly what
// the plugin before it (prev) printed, and got it as prevResult.
func assertPassthrough(t *testing.T, c *chain, prev string) {
	t.Helper()
	want := c.exec.last(t, prev, "ADD")
	got := c.exec.last(t, "netns-pin", "ADD")
	require.NoError(t, got.err, "netns-pin ADD")
	require.JSONEq(t, string(want.stdout), string(got.stdout), "netns-pin ADD must print its prevResult (the %s result) unchanged", prev)
	var stdin struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	require.NoError(t, json.Unmarshal(got.stdin, &stdin))
	require.JSONEq(t, string(want.stdout), string(stdin.PrevResult), "prevResult given to netns-pin")
}

// A non-holder's result through [bridge, netns-pin] is the bridge's result,
// and nothing is made; a holder's result is passed through as well.
func TestLibcniResultPassthrough(t *testing.T) {
	c := newChain(t, chainSpec{})

	nsOther := hosttest.NewNetns(t, "npe2e")
	other := c.newAttachment(t, nsOther, podArgs("default", "web-0"), false)
	other.mustAdd(t)
	assertPassthrough(t, c, "bridge")
	assertUntouched(t, c)
	require.NoError(t, other.check())
	require.NoError(t, other.del())
	assertUntouchedAfterDel(t, c)

	nsHolder := hosttest.NewNetns(t, "npe2e")
	holder := c.newAttachment(t, nsHolder, holderArgs(), false)
	res := holder.mustAdd(t)
	assertPassthrough(t, c, "bridge")
	assertPinned(t, holder, pinExpect{netns: nsHolder.ID, cluster: cluster, link: c.defaultLink(), ip: sandboxIP(t, res)})
	require.NoError(t, holder.del())
	assertReleased(t, holder, nsHolder.Path)
	assertNoLink(t, c.defaultLink())
}

// Every CNI version the plugin supports, through libcni: ADD, CHECK, DEL,
// CHECK after DEL, DEL again.
func TestLibcniVersions(t *testing.T) {
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			c := newChain(t, chainSpec{version: v})
			ns := hosttest.NewNetns(t, "npe2e")
			a := c.newAttachment(t, ns, holderArgs(), false)
			res := a.mustAdd(t)
			assertPassthrough(t, c, "bridge")
			assertPinned(t, a, pinExpect{netns: ns.ID, cluster: cluster, link: c.defaultLink(), ip: sandboxIP(t, res)})

			if v == "0.3.1" {
				// libcni refuses CHECK before 0.4.0
				require.ErrorIs(t, a.check(), libcni.ErrorCheckNotSupp)
			} else {
				require.NoError(t, a.check(), "CHECK")
				pin := c.exec.last(t, "netns-pin", "CHECK")
				require.NoError(t, pin.err, "netns-pin CHECK")
			}

			require.NoError(t, a.del(), "DEL")
			assertReleased(t, a, ns.Path)
			assertNoLink(t, c.defaultLink())

			if v != "0.3.1" {
				// libcni dropped its cached result on DEL; CHECK of the chain
				// then fails in the first plugin, before netns-pin runs.
				before := len(c.exec.all())
				err := a.check()
				require.Error(t, err, "CHECK after DEL")
				for _, call := range c.exec.all()[before:] {
					assert.NotEqual(t, "netns-pin", call.plugin, "netns-pin ran for a CHECK after DEL: %s", err)
				}
			}
			require.NoError(t, a.del(), "DEL again")
			assertReleased(t, a, ns.Path)
		})
	}
}

// [macvlan (master: a veth end) + host-local, netns-pin]: the pin outlives
// the netns name and DEL releases it.
func TestLibcniMacvlanHolder(t *testing.T) { macvlanHolder(t, false) }

func TestCnitoolMacvlanHolder(t *testing.T) { macvlanHolder(t, true) }

func macvlanHolder(t *testing.T, viaCnitool bool) {
	c := newChain(t, chainSpec{kind: "macvlan"})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), viaCnitool)

	res := a.mustAdd(t)
	if !viaCnitool {
		assertPassthrough(t, c, "macvlan")
	}
	ip := sandboxIP(t, res)
	assertPinned(t, a, pinExpect{netns: ns.ID, cluster: cluster, link: c.defaultLink(), ip: ip})
	require.NoError(t, a.check())

	ns.Delete(t)
	ips := nsenterAddrs(t, c.defaultLink())
	require.True(t, containsIP(ips, ip), "after ip netns del, nsenter --net=%s sees %v, want %s", c.defaultLink(), ips, ip)
	require.Equal(t, ns.ID, hosttest.StatNS(t, c.defaultLink()))

	require.NoError(t, a.del(), "DEL with CNI_NETNS gone")
	assertReleased(t, a)
	assertNoLink(t, c.defaultLink())
	require.NoError(t, a.del(), "DEL again")
}

// Holdership claimed through args.cni.pinCluster (Multus cni-args) from a
// namespace listed in cniArgsNamespaces.
func TestLibcniPinClusterArgs(t *testing.T) {
	t.Run("allowed namespace", func(t *testing.T) {
		c := newChain(t, chainSpec{holders: []map[string]any{}, cniArgsNamespaces: []string{"rook-ceph"}, pinCluster: "rook-ceph/other-cluster"})
		ns := hosttest.NewNetns(t, "npe2e")
		a := c.newAttachment(t, ns, podArgs("rook-ceph", "plain-pod-abc"), false)
		res := a.mustAdd(t)
		assertPassthrough(t, c, "bridge")
		link := c.linkPath("rook-ceph", "other-cluster")
		assertPinned(t, a, pinExpect{netns: ns.ID, cluster: "rook-ceph/other-cluster", link: link, ip: sandboxIP(t, res)})
		assertNoLink(t, c.defaultLink())
		require.NoError(t, a.check())
		require.NoError(t, a.del())
		assertReleased(t, a, ns.Path)
		assertNoLink(t, link)
	})

	refused := map[string]struct {
		spec chainSpec
		args [][2]string
	}{
		"namespace not in cniArgsNamespaces": {
			chainSpec{holders: []map[string]any{}, cniArgsNamespaces: []string{"rook-ceph"}, pinCluster: "rook-ceph/my-cluster"},
			podArgs("default", "sneaky-pod"),
		},
		"no cniArgsNamespaces": {
			chainSpec{holders: []map[string]any{}, pinCluster: "rook-ceph/my-cluster"},
			podArgs("rook-ceph", "plain-pod"),
		},
		"cluster not a DNS-1123 name": {
			chainSpec{holders: []map[string]any{}, cniArgsNamespaces: []string{"rook-ceph"}, pinCluster: "rook-ceph/My_Cluster"},
			podArgs("rook-ceph", "plain-pod"),
		},
		"cluster with a path": {
			chainSpec{holders: []map[string]any{}, cniArgsNamespaces: []string{"rook-ceph"}, pinCluster: "../../etc/x"},
			podArgs("rook-ceph", "plain-pod"),
		},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			c := newChain(t, tc.spec)
			ns := hosttest.NewNetns(t, "npe2e")
			a := c.newAttachment(t, ns, tc.args, false)
			_, err := a.add(t)
			require.Error(t, err, "ADD must refuse the claim")
			assert.Contains(t, err.Error(), `type="netns-pin"`, "the refusal must come from netns-pin")
			t.Logf("refused: %v", err)
			assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), "pins after a refused claim")
			assert.Empty(t, treeEntries(t, filepath.Join(c.stateDir, "records")), "records after a refused claim")
			assert.Empty(t, hosttest.MountsUnder(t, c.work), "mounts after a refused claim")
		})
	}
}

// ADD repeated for the same attachment is a no-op: same output, one mount,
// same record.
func TestLibcniRepeatedAdd(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	res := a.mustAdd(t)
	want := pinExpect{netns: ns.ID, cluster: cluster, link: c.defaultLink(), ip: sandboxIP(t, res)}
	assertPinned(t, a, want)
	recBefore, err := os.ReadFile(a.recordPath())
	require.NoError(t, err)

	bridgeOut := c.exec.last(t, "bridge", "ADD").stdout
	prev, err := create.CreateFromBytes(bridgeOut)
	require.NoError(t, err)
	for i := range 2 {
		out, err := a.execPin(t, "ADD", prev)
		require.NoError(t, err, "repeated ADD #%d", i+1)
		require.JSONEq(t, string(bridgeOut), string(out), "repeated ADD #%d output", i+1)
		assertPinned(t, a, want)
		recAfter, err := os.ReadFile(a.recordPath())
		require.NoError(t, err)
		assert.JSONEq(t, string(recBefore), string(recAfter), "record changed by repeated ADD #%d", i+1)
	}

	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
	assertNoLink(t, c.defaultLink())
}

// A new holder (restart, upgrade) takes the link; the old pin stays until
// its own DEL; the link follows the newest remaining pin and goes with the
// last one.
func TestLibcniNewHolderTakesLink(t *testing.T) {
	for _, order := range []string{"old first", "new first"} {
		t.Run(order, func(t *testing.T) {
			c := newChain(t, chainSpec{})
			link := c.defaultLink()
			ns1, ns2 := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
			a1 := c.newAttachment(t, ns1, podArgs(clusterNS, "csi-holder-old11"), false)
			a2 := c.newAttachment(t, ns2, podArgs(clusterNS, "csi-holder-new22"), false)

			a1.mustAdd(t)
			assertPinned(t, a1, pinExpect{netns: ns1.ID, cluster: cluster, link: link})
			a2.mustAdd(t)
			assertPinned(t, a2, pinExpect{netns: ns2.ID, cluster: cluster, link: link})
			assertPinned(t, a1, pinExpect{netns: ns1.ID, cluster: cluster})
			require.NoError(t, a1.check(), "CHECK of the older holder")
			require.NoError(t, a2.check(), "CHECK of the newer holder")

			first, second := a1, a2
			if order == "new first" {
				first, second = a2, a1
			}
			require.NoError(t, first.del())
			assertReleased(t, first, first.netns.Path)
			assertPinned(t, second, pinExpect{netns: second.netns.ID, cluster: cluster, link: link})

			require.NoError(t, second.del())
			assertReleased(t, second, second.netns.Path)
			assertNoLink(t, link)
		})
	}
}

// CHECK notices a pin that is no longer mounted or a missing link, and DEL
// still cleans up.
func TestLibcniCheckDetectsDamage(t *testing.T) {
	t.Run("pin unmounted", func(t *testing.T) {
		c := newChain(t, chainSpec{})
		ns := hosttest.NewNetns(t, "npe2e")
		a := c.newAttachment(t, ns, holderArgs(), false)
		a.mustAdd(t)
		require.NoError(t, a.check())
		hosttest.MustRun(t, "umount", "-l", a.pinPath())
		err := a.check()
		require.Error(t, err, "CHECK with the pin unmounted")
		require.Error(t, c.exec.last(t, "netns-pin", "CHECK").err, "the failing CHECK must be netns-pin's")
		t.Logf("CHECK: %v", err)
		require.NoError(t, a.del())
		assertReleased(t, a, ns.Path)
		assertNoLink(t, c.defaultLink())
	})
	t.Run("link removed", func(t *testing.T) {
		c := newChain(t, chainSpec{})
		ns := hosttest.NewNetns(t, "npe2e")
		a := c.newAttachment(t, ns, holderArgs(), false)
		a.mustAdd(t)
		require.NoError(t, os.Remove(c.defaultLink()))
		err := a.check()
		require.Error(t, err, "CHECK with the link removed")
		require.Error(t, c.exec.last(t, "netns-pin", "CHECK").err, "the failing CHECK must be netns-pin's")
		t.Logf("CHECK: %v", err)
		require.NoError(t, a.del())
		assertReleased(t, a, ns.Path)
	})
}

// CNI 1.1 STATUS and GC.
func TestLibcniStatusAndGC(t *testing.T) {
	t.Run("status ok", func(t *testing.T) {
		c := newChain(t, chainSpec{version: "1.1.0"})
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		require.NoError(t, c.cni.GetStatusNetworkList(ctx, c.list))
	})

	t.Run("status pinDir unusable", func(t *testing.T) {
		c := newChain(t, chainSpec{version: "1.1.0", noPin: true})
		blocker := filepath.Join(c.work, "not-a-dir")
		require.NoError(t, os.WriteFile(blocker, nil, 0o600))
		entry := map[string]any{"type": "netns-pin", "pinDir": filepath.Join(blocker, "pin"), "stateDir": filepath.Join(c.work, "state"), "logFile": c.logFile}
		conf := map[string]any{"cniVersion": "1.1.0", "name": c.name, "plugins": []any{entry}}
		data, err := json.Marshal(conf)
		require.NoError(t, err)
		list, err := libcni.ConfListFromBytes(data)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		err = c.cni.GetStatusNetworkList(ctx, list)
		require.Error(t, err, "STATUS with pinDir under a regular file")
		assert.EqualValues(t, types.ErrPluginNotAvailable, cniErrorCode(err), "STATUS error code: %v", err)
	})

	t.Run("gc releases attachments not listed", func(t *testing.T) {
		c := newChain(t, chainSpec{version: "1.1.0"})
		ns1, ns2 := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
		stale := c.newAttachment(t, ns1, podArgs(clusterNS, "csi-holder-stale"), false)
		live := c.newAttachment(t, ns2, podArgs(clusterNS, "csi-holder-live1"), false)
		stale.mustAdd(t)
		live.mustAdd(t)

		// A runtime that lost its cache: libcni then only runs each plugin's
		// GC (no per-attachment DEL), so netns-pin's own GC must do the work.
		fresh := libcni.NewCNIConfigWithCacheDir([]string{c.env.cniPath}, filepath.Join(c.work, "empty-cache"), c.exec)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		err := fresh.GCNetworkList(ctx, c.list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: live.containerID, IfName: ifName}}})
		require.NoError(t, err, "GC")
		gc := c.exec.last(t, "netns-pin", "GC")
		require.NoError(t, gc.err)
		assert.True(t, strings.Contains(string(gc.stdin), live.containerID), "GC input lists the live attachment")

		assertReleased(t, stale, ns1.Path)
		assertPinned(t, live, pinExpect{netns: ns2.ID, cluster: cluster, link: c.defaultLink()})

		require.NoError(t, live.del())
		assertReleased(t, live, ns2.Path)
		assertNoLink(t, c.defaultLink())
	})
}

// Several holders of one cluster added and deleted at the same time: the
// lock serialises the plugin processes; every pin is made and released.
func TestLibcniConcurrentHolders(t *testing.T) {
	const n = 6
	c := newChain(t, chainSpec{})
	link := c.defaultLink()
	atts := make([]*attachment, n)
	for i := range atts {
		atts[i] = c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	}

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, a := range atts {
		wg.Go(func() { _, errs[i] = a.addRaw() })
	}
	wg.Wait()
	pins := map[string]*attachment{}
	for i, a := range atts {
		require.NoError(t, errs[i], "concurrent ADD #%d", i)
		assertPinned(t, a, pinExpect{netns: a.netns.ID, cluster: cluster})
		pins[a.pinPath()] = a
	}
	target, err := os.Readlink(link)
	require.NoError(t, err, "link after concurrent ADDs")
	owner := pins[filepath.Join(filepath.Dir(link), target)]
	require.NotNil(t, owner, "link %s -> %s leads to none of the pins", link, target)
	assertLinkTo(t, link, owner)
	assert.Len(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), n, "pins")
	assert.Len(t, treeEntries(t, filepath.Join(c.stateDir, "records")), n, "records")

	for i, a := range atts {
		wg.Go(func() { errs[i] = a.del() })
	}
	wg.Wait()
	for i, a := range atts {
		require.NoError(t, errs[i], "concurrent DEL #%d", i)
		assertReleased(t, a, a.netns.Path)
	}
	assertNoLink(t, link)
	assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")), "pins after concurrent DELs")
	assert.Empty(t, treeEntries(t, filepath.Join(c.stateDir, "records")), "records after concurrent DELs")
}

// A holders rule whose cluster uses {{.PodNamespace}}, and extra links, one
// of them absolute (Rook's old holder path).
func TestLibcniRuleTemplateAndLinks(t *testing.T) {
	work := hosttest.NewWorkDir(t, "netns-pin-e2e-")
	rookDir := filepath.Join(work, "kubelet", "plugins", "rook-ceph.rbd.csi.ceph.com")
	require.NoError(t, os.MkdirAll(rookDir, 0o755))
	c := newChain(t, chainSpec{
		holders: []map[string]any{{"podNamespace": "storage-east", "podName": "csi-holder-*", "cluster": "{{.PodNamespace}}/ceph"}},
		links:   []string{"{{.Namespace}}/{{.Name}}.net", filepath.Join(rookDir, "{{.Namespace}}.net.ns")},
	})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, podArgs("storage-east", "csi-holder-q8z"), false)
	res := a.mustAdd(t)
	rel := c.linkPath("storage-east", "ceph")
	abs := filepath.Join(rookDir, "storage-east.net.ns")
	assertPinned(t, a, pinExpect{netns: ns.ID, cluster: "storage-east/ceph", link: rel, ip: sandboxIP(t, res)})
	assertLinkTo(t, abs, a)
	require.NoError(t, a.check())

	require.NoError(t, a.del())
	assertReleased(t, a, ns.Path)
	assertNoLink(t, rel)
	assertNoLink(t, abs)
}

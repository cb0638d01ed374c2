package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// Hole: a holder rule's cluster namespace could be chosen by the pod's
// name (rule for tenant, pods "*", cluster "r{{.PodName}}/my-cluster": pod
// tenant/ook-ceph pinned rook-ceph/my-cluster), and the documented
// "rook-ceph/{{.PodName}}" was refused as the configuration was read.
func TestHoleRuleTemplatesAndTheOwnNamespaceRule(t *testing.T) {
	t.Run("pod name in the namespace part is refused", func(t *testing.T) {
		c := newChain(t, chainSpec{holders: []map[string]any{{"podNamespace": "tenant", "podName": "*", "cluster": "r{{.PodName}}/my-cluster"}}})
		ns := hosttest.NewNetns(t, "npe2e")
		a := c.newAttachment(t, ns, podArgs("tenant", "ook-ceph"), false)
		_, err := a.add(t)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "a pod's name may not choose the cluster's namespace")
		_, err = os.Lstat(a.recordPath())
		assert.True(t, os.IsNotExist(err), "no record")
		assert.Empty(t, mountsAt(t, a.pinPath()))
		assertNoLink(t, c.linkPath("rook-ceph", "my-cluster"))
	})
	for _, tc := range []struct{ template, pod, want string }{
		{"rook-ceph/{{.PodName}}", "my-cluster", "rook-ceph/my-cluster"},
		{"{{.PodNamespace}}/{{.PodName}}", "c1", "tenant/c1"},
		{"{{.PodNamespace}}/my-cluster", "holder-x", "tenant/my-cluster"},
	} {
		t.Run(tc.template, func(t *testing.T) {
			c := newChain(t, chainSpec{holders: []map[string]any{{"podNamespace": "tenant", "podName": "*", "cluster": tc.template}}})
			ns := hosttest.NewNetns(t, "npe2e")
			a := c.newAttachment(t, ns, podArgs("tenant", tc.pod), false)
			res := a.mustAdd(t)
			nsName, name, _ := strings.Cut(tc.want, "/")
			link := c.linkPath(nsName, name)
			assertPinned(t, a, pinExpect{netns: ns.ID, cluster: tc.want, link: link, ip: sandboxIP(t, res)})
			require.NoError(t, a.del())
			assertReleased(t, a, ns.Path)
			assertNoLink(t, link)
		})
	}
}

// claimChain is a network whose netns-pin entry claims cl for pods of
// namespace "a" (cniArgsNamespaces), on pinDir and stateDir of base when
// base is not nil.
func claimChain(t *testing.T, base *chain, cl string, links []string) *chain {
	spec := chainSpec{holders: []map[string]any{}, cniArgsNamespaces: []string{"a", "a-b"}, pinCluster: cl, links: links}
	if base != nil {
		spec.pinDir, spec.stateDir = base.pinDir, base.stateDir
	}
	return newChain(t, spec)
}

// Hole: with links ["{{.Namespace}}-{{.Name}}.net"], a pod of namespace a
// claimed a/b-c, and a-b-c.net, the link of cluster a-b/c, led into its
// netns. Such a template is refused; under the Rook variant's
// per-namespace link a second cluster of the namespace is refused at ADD.
func TestHoleLinksBelongToOneCluster(t *testing.T) {
	t.Run("ambiguous template refused", func(t *testing.T) {
		c := claimChain(t, nil, "a/b-c", []string{"{{.Namespace}}-{{.Name}}.net"})
		ns := hosttest.NewNetns(t, "npe2e")
		a := c.newAttachment(t, ns, podArgs("a", "p"), false)
		_, err := a.add(t)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "must be followed by '/' or '.'")
		_, err = os.Lstat(a.recordPath())
		assert.True(t, os.IsNotExist(err), "no record")
		assertNoLink(t, filepath.Join(c.pinDir, "a-b-c.net"))
	})
	t.Run("second cluster of a namespace under a per-namespace link", func(t *testing.T) {
		work := hosttest.NewWorkDir(t, "netns-pin-e2e-")
		rookDir := filepath.Join(work, "rook-ceph.rbd.csi.ceph.com")
		require.NoError(t, os.MkdirAll(rookDir, 0o755))
		links := []string{"{{.Namespace}}/{{.Name}}.net", filepath.Join(rookDir, "{{.Namespace}}.net.ns")}
		c1 := claimChain(t, nil, "a/c1", links)
		ns1 := hosttest.NewNetns(t, "npe2e")
		a1 := c1.newAttachment(t, ns1, podArgs("a", "p1"), false)
		a1.mustAdd(t)
		perNS := filepath.Join(rookDir, "a.net.ns")
		assertLinkTo(t, perNS, a1)

		c2 := claimChain(t, c1, "a/c2", links)
		ns2 := hosttest.NewNetns(t, "npe2e")
		a2 := c2.newAttachment(t, ns2, podArgs("a", "p2"), false)
		_, err := a2.add(t)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "link belongs to another cluster")
		assert.Contains(t, err.Error(), "a/c1")
		_, err = os.Lstat(a2.recordPath())
		assert.True(t, os.IsNotExist(err), "no record for the refused claim")
		assert.Empty(t, mountsAt(t, a2.pinPath()))
		assertLinkTo(t, perNS, a1)
		assertNoLink(t, filepath.Join(c1.pinDir, "a", "c2.net"))

		require.NoError(t, a1.del())
		assertReleased(t, a1, ns1.Path)
		assertNoLink(t, perNS)
	})
	t.Run("a taken link goes back to its cluster and gc --dry-run reports it", func(t *testing.T) {
		// The state an earlier version left: a record of cluster a/b-c
		// lists a-b/c's link, which leads into its pin.
		links := []string{"{{.Namespace}}/{{.Name}}.net"}
		owner := claimChain(t, nil, "a-b/c", links)
		nsO := hosttest.NewNetns(t, "npe2e")
		ao := owner.newAttachment(t, nsO, podArgs("a-b", "owner"), false)
		ao.mustAdd(t)
		link := filepath.Join(owner.pinDir, "a-b", "c.net")
		assertLinkTo(t, link, ao)

		taker := claimChain(t, owner, "a/b-c", links)
		nsT := hosttest.NewNetns(t, "npe2e")
		at := taker.newAttachment(t, nsT, podArgs("a", "taker"), false)
		at.mustAdd(t)
		rec := readRecord(t, at.recordPath())
		rec["links"] = append(rec["links"].([]any), link)
		data, err := json.Marshal(rec)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(at.recordPath(), data, 0o600))
		tmp := link + ".tmp-test"
		require.NoError(t, os.Symlink(filepath.Join("..", "pins", at.attachmentName()), tmp))
		require.NoError(t, os.Rename(tmp, link))
		assertLinkTo(t, link, at)

		r := pinCLI(owner, "--pin-dir", owner.pinDir, "--state-dir", owner.stateDir, "gc", "--dry-run")
		require.NoError(t, r.Err, "%s", r.Stderr)
		assert.Contains(t, r.Stdout, "foreign link")
		assert.Contains(t, r.Stdout, "link "+link+" of cluster a-b/c points at this pin of cluster a/b-c")
		assertLinkTo(t, link, at) // a dry run changes nothing

		// The taker goes: the link is pointed back at a-b/c's active pin,
		// never only removed.
		require.NoError(t, at.del())
		assertReleased(t, at, nsT.Path)
		assertLinkTo(t, link, ao)
		require.NoError(t, ao.del())
		assertReleased(t, ao, nsO.Path)
		assertNoLink(t, link)
	})
}

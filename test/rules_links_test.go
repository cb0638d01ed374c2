package e2e

import (
	"os"
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

package e2e

// A holder ADD and DEL on a node of the usual size finish before the Go
// runtime's first garbage collection (docs/performance.md, "Peak RSS").
// Under the plugin's soft memory limit the first heap goal is what the
// limit leaves after the runtime's own memory; at 6 MiB that was about
// 1 MiB, and half of all holder DELs of this host collected once, with the
// threads of the mark workers: 0.6 ms of a 5 ms DEL. Needs root.

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// gcLine is a line GODEBUG=gctrace=1 prints for each collection.
var gcLine = regexp.MustCompile(`(?m)^gc \d+ @`)

func TestHolderVerbsCollectNoGarbage(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	res := a.mustAdd(t)
	t.Cleanup(func() { _ = a.del() })

	// The trace is seen: with GOGC=1 the first goal is about 40 KiB. A
	// collection prints its line when it ends, and a process that exits
	// while one is still marking (a busy machine) prints none: some of ten
	// CHECKs must show one.
	traced := false
	for range 10 {
		_, out, err := a.execPinEnv(t, "CHECK", res, "GODEBUG=gctrace=1", "GOGC=1")
		require.NoError(t, err, out)
		if traced = gcLine.MatchString(out); traced {
			break
		}
	}
	require.True(t, traced, "GOGC=1: no collection traced in ten CHECKs")

	for range 5 {
		_, stderr, err := a.execPinEnv(t, "DEL", res, "GODEBUG=gctrace=1")
		require.NoError(t, err, stderr)
		assertReleased(t, a, ns.Path) // the runtime's netns path stays
		require.NotRegexp(t, gcLine, stderr, "holder DEL, unused: no garbage collection")
		_, stderr, err = a.execPinEnv(t, "ADD", res, "GODEBUG=gctrace=1")
		require.NoError(t, err, stderr)
		assertPinned(t, a, pinExpect{netns: ns.ID, cluster: clusterNS + "/" + clusterName, link: c.defaultLink()})
		require.NotRegexp(t, gcLine, stderr, "holder ADD: no garbage collection")
	}
}

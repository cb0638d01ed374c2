package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A holder operation's limit (limitMemory) is tightened once an in-use
// check has listed largeNode entries; a process without that limit (the
// sweeper) keeps none.
func TestTightenForLargeNode(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	limitMemory()
	tightenForLargeNode(largeNode - 1)
	assert.EqualValues(t, memoryLimit, debug.SetMemoryLimit(-1), "below largeNode")
	tightenForLargeNode(largeNode)
	assert.EqualValues(t, largeNodeLimit, debug.SetMemoryLimit(-1), "at largeNode")
	tightenForLargeNode(2 * largeNode)
	assert.EqualValues(t, largeNodeLimit, debug.SetMemoryLimit(-1), "stays")

	debug.SetMemoryLimit(math.MaxInt64)
	tightenForLargeNode(10 * largeNode)
	assert.EqualValues(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "no limit: none set")
}

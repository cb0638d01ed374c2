// Package pinstore opens the store of a network's configuration the way
// the CNI plugin and netns-pinctl both do: with the in-use check the
// configuration sets (every release and every repair runs it), the log
// the configuration names, and the memory limit of a short-lived process.
package pinstore

import (
	"log/slog"
	"runtime/debug"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// Open opens the store of configuration c. actor is who its releases are
// counted for (netnsstore.Options.Actor); writer is the version written
// into the records. teardown finishes the teardown of an attachment whose
// runtime gave up; nil leaves such attachments to a process that has one
// (the sweeper, netns-pinctl).
func Open(c *conf.Config, log *slog.Logger, actor, writer string, teardown func(*netnsstore.Record) error) (*netnsstore.Store, error) {
	return netnsstore.Open(c.PinDir, c.StateDir, netnsstore.Options{
		Log: log, InUse: inUseChecker(c.InUseOptions()), InUseSettings: c.InUseSettings(), InUseFor: recordedInUse(c),
		Teardown: teardown, Writer: writer, Actor: actor,
	})
}

// MaxCacheEntry bounds a libcni cache entry read whole; a chain's
// configuration and result are a few KiB.
const MaxCacheEntry = 256 << 10

// memoryLimit is the Go runtime's soft memory limit for one holder
// operation or command. The runtime's own memory (metadata, stacks, spans)
// is most of it in a fresh process, and the first heap goal is what is
// left: it is set so that a holder ADD or DEL of a small node collects no
// garbage (test/gc_test.go), while a large node's check collects as it
// goes rather than let the heap double (docs/performance.md).
const memoryLimit = 7 << 20

// LimitMemory is for the short-lived process of a holder operation or an
// operator command, which may check thousands of devices and processes:
// it collects garbage early rather than let the heap double, so that the
// plugin stays small on a node that runs many pods at once. Not for the
// sweeper, whose heap would stay at the limit and collect all the time.
func LimitMemory() { debug.SetMemoryLimit(memoryLimit) }

// ActorOf is who the releases of a CNI verb or an operator command are
// counted for in the metrics: a runtime's DEL, a GC (CNI GC or
// netns-pinctl gc), the operator's release, the sweeper; the repair that
// any other operation runs.
func ActorOf(verbOrCommand string) string {
	switch verbOrCommand {
	case "DEL":
		return netnsstore.ByDEL
	case "GC", "gc":
		return netnsstore.ByGC
	case "release":
		return netnsstore.ByOperator
	case "sweep":
		return netnsstore.BySweeper
	}
	return netnsstore.ByRepair
}

// Package model is the randomized model-based test of netns-pin's one
// promise: a pinned network namespace is released only by an operation
// that first moved its cluster's links away and then found it unused (see
// docs/design.md).
//
// A seeded driver applies random steps (holder ADD, DEL, GC, CHECK, STATUS,
// the operator's command line with the right flags and with a wrong
// --pin-dir, --state-dir, --sysfs or --debugfs, Ceph clients coming and
// going, address changes, external unmounts, a record unreadable for a
// while, a pin without a record and the operator's release of it, crashes
// at every failpoint, reboots) to the real plugin binary, built with the
// failpoints tag, in real network namespaces with real mounts and real
// processes. A model of holders, clients, pins and links says what must
// hold after every step; the invariants are checked against the host.
//
// The test needs root (network namespaces, mounts, nsenter). A failure
// prints the seed and the step log; SEED=<n> (or -model.seed) replays it,
// MODEL_STEPS=<n> (or -model.steps) sets the number of steps.
package model

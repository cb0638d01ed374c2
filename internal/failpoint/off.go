//go:build !failpoints

// Package failpoint marks the steps of multi-step operations where a test
// build can kill the process, to prove every crash point is recoverable.
// In the shipped binary (built without the "failpoints" tag) Hit is empty.
package failpoint

// Hit is a no-op outside test builds.
func Hit(string) {}

// BootIDPath is the file that names the running boot. Only test builds
// can point it elsewhere, to simulate a reboot.
func BootIDPath(def string) string { return def }

// RegistryDir is the node's store registry folder. Only test builds can
// point it elsewhere.
func RegistryDir(def string) string { return def }

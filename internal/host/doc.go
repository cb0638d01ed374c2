// Package host holds the host-side helpers that the tests and the
// benchmark runner (hack/bench) share: running commands with a deadline,
// random names, polling for a condition, named network namespaces and
// their nsfs identities, and the mounts below a folder.
//
// Nothing here needs a *testing.T; package hosttest wraps these for tests
// that fail on error and clean up after themselves.
package host

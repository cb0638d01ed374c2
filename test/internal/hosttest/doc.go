// Package hosttest holds the host-side helpers that the end-to-end suites
// (test/, test/ceph/ and test/runtime/) all need: random names, running
// commands, named network namespaces and their nsfs identities, links,
// mountinfo parsing and temporary folders that may carry mounts.
//
// The suites used to carry a copy each; the copies drifted only in details
// (a timeout, a name prefix), so they live here once, with those details as
// parameters. Helpers that only one suite uses stay in that suite.
package hosttest

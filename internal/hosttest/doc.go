// Package hosttest holds the host-side helpers that tests of every package
// need, in the form a test wants them: they fail the test on error and
// undo what they made at cleanup. Named network namespaces, temporary
// folders that may carry mounts, the mount table, commands that must
// succeed. The helpers themselves are in package host, which the benchmark
// runner uses too.
//
// The suites used to carry a copy each; the copies drifted only in details
// (a timeout, a name prefix), so they live here once, with those details as
// parameters. Helpers that only one suite uses stay in that suite.
package hosttest

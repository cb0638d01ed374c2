// Package hosttest holds the host-side helpers that tests of every package
// need, in the form a test wants them: they fail the test on error and
// undo what they made at cleanup. Named network namespaces, temporary
// folders that may carry mounts, the mount table, commands that must
// succeed. The helpers themselves are in package host, which the benchmark
// runner uses too.
//
// One copy serves every suite; the details in which the suites differ (a
// timeout, a name prefix) are parameters. Helpers that only one suite uses
// stay in that suite.
package hosttest

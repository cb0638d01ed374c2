// Package e2e is the end-to-end suite of netns-pin.
//
// It runs the real plugin binary in real CNI chains (the reference bridge,
// macvlan and host-local plugins) through the real cnitool binary and through
// libcni, on real network namespaces, and checks the pins, links, records and
// mounts that the plugin leaves on the host (docs/design.md §3–§14).
//
// It needs root and the binaries that `make tools build` puts in .cache/:
//
//	NETNS_PIN_CNI_PATH  folder with netns-pin and the reference plugins
//	                    (default: <repo>/.cache/cni/bin)
//	NETNS_PIN_CNITOOL   the cnitool binary (default: <repo>/.cache/bin/cnitool)
//
// `make test` (or `make e2e`) builds them and sets both. A missing binary or
// a non-root user fails the tests with a message saying what to do.
package e2e

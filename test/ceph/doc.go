// Package ceph is netns-pin's end-to-end suite against a real Ceph cluster.
//
// It proves the claim of docs/design.md §1 with a real client: a ceph-fuse mount made
// the way ceph-csi makes it (`nsenter --net=<netNamespaceFilePath> --
// ceph-fuse ...`) keeps working, with every operation checked, while its
// holder is restarted and removed; the same steps against a Rook-style
// holder (a process plus a symlink to /proc/<pid>/ns/net) stall or fail the
// client. Both runs print one row of a small table.
//
// It needs root and, besides the binaries of the e2e suite in test/:
//
//	NETNS_PIN_CNI_PATH  folder with netns-pin, bridge and host-local
//	                    (default: <repo>/.cache/cni/bin)
//	NETNS_PIN_CNITOOL   the cnitool binary (default: <repo>/.cache/bin/cnitool)
//	NETNS_PIN_CEPH_DIR  a cluster folder made by `hack/ceph/up.sh <dir>`; when
//	                    unset, the suite runs up.sh in a temporary folder on
//	                    first use and down.sh when it ends (which installs
//	                    Debian's Ceph packages when they are missing)
//
// A missing prerequisite fails the tests with a message saying what to do;
// nothing is skipped.
package ceph

// Package kernel is netns-pin's suite with real Ceph kernel clients: krbd
// devices and CephFS kernel mounts, in a qemu guest that boots Debian's
// stock kernels 6.1 and 6.12 (hack/vm/build.sh), one boot each with every
// scenario, against the real cluster of hack/ceph/up.sh over a tap on the
// cluster's bridge.
//
// The host side (this package) brings up the cluster and an IPv6-only one
// (ms_bind_ipv6), an rbd pool with a user and images on each, a tap on
// each cluster's bridge (the guest's eth0 and eth1), and the guest; the guest runs
// test/kernel/guest (built static), which drives netns-pin exactly as on a
// node: a conflist [bridge + host-local, netns-pin] run by cnitool, a
// holders rule, and clients made the way ceph-csi makes them
// (`nsenter --net=<link> -- <map | mount -t ceph>`). Each scenario of the
// guest is one subtest here (TestKernelClients/<kernel>/<scenario>), with
// its steps, its failures and, when it fails, the guest's console. The
// clusters serve both boots, which run at once; each boot gets fresh
// images, taps, MACs of its own and its own slice of the clusters' client
// addresses.
//
// It needs root, KVM is not needed (qemu runs under TCG), and:
//
//	NETNS_PIN_CNI_PATH  folder with netns-pin, bridge and host-local (static)
//	NETNS_PIN_CNITOOL   the cnitool binary (static)
//	NETNS_PIN_CEPH_DIR  optional: a cluster made by `hack/ceph/up.sh <dir>`
//	NETNS_PIN_CEPH6_DIR optional: an IPv6 one, made by
//	                    `CEPH_IPV6_PREFIX=fd96:0:0:1 hack/ceph/up.sh <dir>`
//	                    (unset: the suite brings both up and down itself)
//	NETNS_PIN_KERNEL_CAPTURE_UPDATE=1  rewrite inuse/testdata/kernel/<kernel>
//	                    from the files each guest kernel that ran printed
//	                    (-run 'TestKernelClients/6.12' for one kernel)
//
// A missing prerequisite fails the suite saying what to install; nothing is
// skipped.
package kernel

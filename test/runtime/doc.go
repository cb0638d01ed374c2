// Package runtime is netns-pin's runtime end to end suite: the plugin under a
// real CRI runtime calling Multus calling the storage network's chain.
//
//	crictl -> containerd (CRI, Debian's 1.6) -> runc + the local pause image
//	       or CRI-O (github.com/cri-o/cri-o@v1.34.0 of the module proxy,
//	          commit 5dd0877c; conmon and runc from Debian)
//	       -> Multus (thin plugin, v4.2.3; thick_test.go: multus-shim ->
//	          multus-daemon in a privileged hostPID container, the upstream
//	          volumes, pinDir as a Bidirectional volume or not)
//	            eth0: default network, bridge + host-local
//	            net1: NetworkAttachmentDefinition "ceph-public-*":
//	                  [ macvlan (master: a veth end) + host-local, netns-pin ]
//	                  or + whereabouts v0.9.2 (finalizer_test.go's rollout
//	                  under Multus thick and CRI-O's one DEL, with
//	                  whereabouts' controller ip-control-loop for the node:
//	                  whereabouts_test.go)
//	Multus reads pods and NetworkAttachmentDefinitions from a real
//	kube-apiserver (and etcd) on 127.0.0.1, the binaries hack/kube/build.sh
//	builds, and writes the pods' network-status back to it. There is no
//	kubelet here: test/kube is the suite with one.
//
// Every scenario runs on both runtimes, as subtests named containerd and
// crio (each runtime is set up on first use, so -run 'TestX/crio' makes
// only CRI-O), but Multus thick (thick_test.go), which runs on containerd.
// chain_test.go puts the chain in the runtime's own CNI configuration,
// where CRI-O's CHECK right after ADD reaches netns-pin.
//
// The tests start pod sandboxes with `crictl runp` and stop them with
// `crictl stopp` / `crictl rmp`, exactly as kubelet drives the runtime, and
// check what netns-pin leaves on the host: pins, links, records, the
// sandbox's interfaces. Ceph references are an rbd device in a fixture sysfs
// tree (inUse.sysfs) that carries the holder's address.
//
// The runtime is made by hack/runtime/setup.sh on first use and removed by
// hack/runtime/teardown.sh when the suite ends, whatever the result. It needs
// root; nothing is skipped: without root or tools every runtime test fails
// with a message saying what to do. Environment:
//
//	NETNS_PIN_CNI_PATH        folder with netns-pin and the reference plugins
//	                          (default <repo>/.cache/cni/bin, as for test/)
//	NETNS_PIN_RUNTIME_DIR     where setup.sh puts each runtime's root, state and
//	                          socket (<dir>/containerd, <dir>/crio; default a
//	                          new /tmp/netns-pin-rt.* each)
//	NETNS_PIN_RUNTIME_KEEP=1  leave the runtime running and the folder in
//	                          place after the suite, for a look around
//
// The manifests in deploy/ have their own test there, which needs no runtime.
package runtime

// Package kube is netns-pin's Kubernetes end to end suite: the holder's
// whole life through a real kube-apiserver, kube-scheduler,
// kube-controller-manager and kubelet, with Multus (thin) as the node's CNI.
//
//	kubectl -> kube-apiserver (+ etcd) -> scheduler / DaemonSet controller
//	        -> kubelet -> containerd or CRI-O (CRI) -> Multus (thin)
//	             eth0: default network, bridge + host-local
//	             net1: the NetworkAttachmentDefinition of deploy/:
//	                   [ macvlan + whereabouts, netns-pin ]
//	        whereabouts' controller (ip-control-loop, its DaemonSet):
//	             frees a deleted pod's addresses; its reconciler, every 10 s
//
// hack/kube/up.sh makes the cluster (cached builds; netns-pin installed by
// deploy/installer-daemonset.yaml from make image's archive, as it ships)
// when the suite starts, and hack/kube/down.sh removes it when it ends. The
// tests apply the manifests of deploy/ as a user would, patching only
// names, addresses and paths (the storage NIC, the address range, the
// kubelet's folder), and watch what an operator sees: pods, events,
// `kubectl describe`, and netns-pin's pins, links and records on the node.
// Kernel clients are stood for by a host process that enters the holder's
// netns through the cluster's link with `nsenter --net=<link>`, the way
// ceph-csi starts `rbd map` and CephFS mounts.
//
// It needs root; nothing is skipped. Environment:
//
//	NETNS_PIN_KUBE_KEEP=1   leave the cluster running after the suite
//	                        (`make kube-down` removes it); a cluster that was
//	                        already up when the suite started is always kept
//	NETNS_PIN_KUBE_RUNTIME  the kubelet's runtime: containerd (default) or
//	                        crio (hack/runtime/crio.sh); make test runs the
//	                        suite on containerd, then KUBE_CRIO_RUN (the
//	                        installer, the holder DaemonSet rollout, the
//	                        Rook-style holder, whereabouts' controller and
//	                        reconciler) on CRI-O
package kube

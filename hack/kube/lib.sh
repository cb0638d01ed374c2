# hack/kube/lib.sh - shared by hack/kube/*.sh (sourced): pinned versions,
# the cache and run folders, small helpers.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${ROOT}/.cache"
KUBE_CACHE="${CACHE}/kube"
STAMP_DIR="${CACHE}/stamps"

# Kubernetes and etcd: the versions hack/kube/k8s/go.mod requires.
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "${ROOT}/hack/kube/k8s/go.mod")"
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "${ROOT}/hack/kube/k8s/go.mod")"
WHEREABOUTS_MODULE="github.com/k8snetworkplumbingwg/whereabouts"
WHEREABOUTS_VERSION="v0.9.2"
# hack/runtime/setup.sh builds Multus; its CRD comes from the same module.
MULTUS_MODULE="gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
MULTUS_VERSION="$(sed -n 's/^MULTUS_VERSION="\(.*\)"$/\1/p' "${ROOT}/hack/runtime/setup.sh")"

# Built once per version, kept across kube-down.
K8S_BIN="${KUBE_CACHE}/k8s-${K8S_VERSION}"
WHEREABOUTS_BIN="${KUBE_CACHE}/whereabouts-${WHEREABOUTS_VERSION}"
# The node's registry (distribution's), for the chart scenario: its kubelet
# pulls netns-pin's image from it, as a user's pulls the pushed one.
REGISTRY_MODULE="github.com/distribution/distribution/v3"
REGISTRY_VERSION="v3.1.2"
REGISTRY_BIN="${KUBE_CACHE}/registry-${REGISTRY_VERSION}"
REGISTRY_ADDR="127.0.0.1:15000"
IMAGES="${KUBE_CACHE}/images"
# What people use: kubectl and the admin kubeconfig of the running cluster.
KUBECTL="${KUBE_CACHE}/bin/kubectl"
ADMIN_KUBECONFIG="${KUBE_CACHE}/admin.kubeconfig"

# Images the node's store gets (no registry is involved): the names the
# manifests of deploy/ use, and a busybox for shell-based pods.
PAUSE_IMAGE="registry.k8s.io/pause:3.10"
# netns-pin's image as deploy/ names it (the placeholder an operator
# replaces with the pushed reference), and the archives the suite installs
# instead: make image's (NETNS_PIN_IMAGE_ARCHIVE) and the one of the
# commit of hack/kube/upgrade-from.
DEPLOY_IMAGE="$(awk '/image: .*netns-pin/ {print $2; exit}' "${ROOT}/deploy/installer-daemonset.yaml")"
IMAGE_ARCHIVE="${CACHE}/image/netns-pin.oci.tar"
# the linux/amd64 binaries of that archive (hack/image.sh)
IMAGE_BIN_DIR="${CACHE}/image/bin/linux-amd64"
upgrade_from_commit() { grep -E -m1 '^[0-9a-f]{40}$' "${ROOT}/hack/kube/upgrade-from"; }
upgrade_from_dir() { echo "${KUBE_CACHE}/upgrade-from-$1"; }
# image_ref ARCHIVE: the reference an OCI archive of hack/runtime/ociimage
# names its image by (what ctr images import and skopeo read).
image_ref() { tar -xOf "$1" index.json | jq -r '.manifests[0].annotations["io.containerd.image.name"]'; }
BUSYBOX_IMAGE="localhost/netns-pin/busybox:test"

# The running cluster: its own containerd root, state and socket, the
# kubelet's root, the CNI folders, logs and PIDs, all below KUBE_DIR.
KUBE_DIR="${NETNS_PIN_KUBE_DIR:-/var/lib/netns-pin-kube}"
NODE_NAME="${NETNS_PIN_KUBE_NODE:-netns-pin-node}"
CNI_BIN_DIR="${KUBE_DIR}/cni/bin"
CNI_CONF_DIR="${KUBE_DIR}/cni/net.d"
KUBELET_DIR="${KUBE_DIR}/kubelet"
CONTAINERD_SOCK="${KUBE_DIR}/containerd/containerd.sock"
# The kubelet's runtime: containerd (Debian's), or crio (hack/runtime/crio.sh,
# every file of it under KUBE_DIR/crio).
KUBE_RUNTIME="${NETNS_PIN_KUBE_RUNTIME:-containerd}"
CRIO_SOCK="${KUBE_DIR}/crio/crio.sock"
# The node's Multus: thin (the multus binary the runtime execs), or thick
# (NETNS_PIN_KUBE_MULTUS=thick: upstream's multus-daemonset-thick.yml, its
# daemon in a pod, multus-shim in the CNI bin folder).
KUBE_MULTUS="${NETNS_PIN_KUBE_MULTUS:-thin}"
MULTUS_DAEMON_IMAGE="$(sed -n 's/^MULTUS_DAEMON_IMAGE="\(.*\)"$/\1/p' "${ROOT}/hack/runtime/setup.sh" | sed "s/\${MULTUS_VERSION}/${MULTUS_VERSION}/")"
MULTUS_DAEMON_ARCHIVE="${CACHE}/runtime/multus-daemon.tar"
# On CRI-O, the agent's view of the host's / (hack/kube/up.sh
# install_netns_pin): outside KUBE_DIR, so that removing it never walks it.
HOST_ROOT_BIND="/run/netns-pin-kube-host-root"
# Host links: the default network's bridge, and a veth pair whose end is
# the storage network's macvlan master (this kernel has no dummy links).
BRIDGE="npkbr0"
STORAGE_MASTER="npkm0"
STORAGE_PEER="npkp0"
# Addresses: test/ uses 10.99.X.0/24 and test/runtime 10.98.N.0/24.
POD_SUBNET="10.97.0.0/24"
STORAGE_SUBNET="10.97.64.0/24"
SERVICE_SUBNET="10.97.128.0/24"

export PATH="/usr/local/go/bin:${PATH}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

LOG_PREFIX="kube"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

kubectl_() { "${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" "$@"; }

# pid_of NAME: the recorded PID of a component, when it still runs the
# binary it was started from.
pid_of() {
	local f="${KUBE_DIR}/pids/$1" pid
	[[ -f "${f}" ]] || return 1
	read -r pid <"${f}"
	[[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null || return 1
	[[ "$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)" == *"$1"* ]] || return 1
	echo "${pid}"
}

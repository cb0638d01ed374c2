#!/usr/bin/env bash
# hack/kube/demo.sh (make demo DEMO=kube) - a holder DaemonSet rollout on a
# real one-node Kubernetes, told with kubectl's own output (root).
#
#   1. the cluster of hack/kube/up.sh (made when it is not up; left running)
#   2. the NetworkAttachmentDefinition and the holder DaemonSet of deploy/
#      (storage NIC, address range and node folders patched); a client enters
#      the holder's netns through the cluster's link, as ceph-csi does
#   3. kubectl rollout restart: the new holder is Running, the old one stays
#      Terminating with netns-pin's FailedKillPod events; netns-pinctl list
#   4. the client leaves: the old holder goes at the kubelet's next retry
# The demo's objects are deleted at exit (also on Ctrl-C); `make kube-down`
# stops the cluster.
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -t 1 ]]; then B=$'\033[1m' D=$'\033[2m' G=$'\033[32m' N=$'\033[0m'; else B= D= G= N=; fi
T0="$(date +%s)"
step() { printf '\n%s== [%3ss] %s%s\n' "${B}" "$(($(date +%s) - T0))" "$*" "${N}"; }
ok() { printf '   %s%s%s\n' "${G}" "$*" "${N}"; }
# k ARGS: show and run a kubectl command
k() {
	printf '   %s$ kubectl %s%s\n' "${D}" "$*" "${N}"
	kubectl_ "$@" 2>&1 | sed 's/^/   /'
}

[[ "$(id -u)" == 0 ]] || die "needs root (a kubelet, containerd, network namespaces)"

NS=rook-ceph
NAD=ceph-public
DS=csi-holder-my-cluster
CLUSTER=rook-ceph/my-cluster
SEL=app.kubernetes.io/name=csi-holder
WORK="$(mktemp -d /tmp/netns-pin-kube-demo.XXXXXX)"
CLIENT=

cleanup() {
	[[ -z "${CLIENT}" ]] || kill "${CLIENT}" 2>/dev/null || true
	kubectl_ -n "${NS}" delete daemonset "${DS}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
	kubectl_ -n "${NS}" delete pods -l "${SEL}" --wait=true --timeout=120s >/dev/null 2>&1 || true
	kubectl_ -n "${NS}" delete network-attachment-definitions "${NAD}" --ignore-not-found >/dev/null 2>&1 || true
	rm -rf "${WORK}"
}
trap cleanup EXIT

step "a one-node Kubernetes ${K8S_VERSION} with Multus and netns-pin installed by its DaemonSet (hack/kube/up.sh)"
bash "${ROOT}/hack/kube/up.sh" 2>&1 | tail -n 2 | sed 's/^/   /'
# shellcheck disable=SC1091
source "${KUBE_CACHE}/env"
PIN_DIR="${KUBELET_DIR}/plugins/netns-pin"
STATE_DIR="${KUBE_DIR}/lib/cni/netns-pin"
LINK="${PIN_DIR}/${CLUSTER}.net"
k get nodes -o wide
k -n kube-system get pods -o wide

step "deploy/network-attachment-definition.yaml and deploy/holder-daemonset.yaml"
# the node's storage NIC, this cluster's range, the kubelet's folder
sed -e "s#\"master\": \"eth1\"#\"master\": \"${KUBE_STORAGE_MASTER}\"#" \
	-e "s#\"range\": \"192.168.20.0/24\"#\"range\": \"${KUBE_STORAGE_SUBNET}\", \"configuration_path\": \"${KUBE_WHEREABOUTS_CONF}\"#" \
	-e "s#\"192.168.20.0/28\"#\"${KUBE_STORAGE_SUBNET%.0/24}.0/28\"#" \
	-e "s#\"logFile\": \"/var/log/netns-pin.log\"#\"logFile\": \"${KUBE_DIR}/logs/netns-pin.log\", \"pinDir\": \"${PIN_DIR}\", \"stateDir\": \"${STATE_DIR}\"#" \
	"${ROOT}/deploy/network-attachment-definition.yaml" >"${WORK}/nad.yaml"
kubectl_ create namespace "${NS}" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
k apply -f "${WORK}/nad.yaml"
k apply -f "${ROOT}/deploy/holder-daemonset.yaml"
k -n "${NS}" rollout status daemonset/"${DS}" --timeout=120s
k -n "${NS}" get pods -o wide
printf '   %s$ ls -l %s%s\n' "${D}" "${LINK}" "${N}"
ls -l "${LINK}" | sed 's/^/   /'

step "a Ceph client enters the holder's netns through the link, as ceph-csi does"
printf '   %s$ nsenter --net=%s -- sleep infinity &%s\n' "${D}" "${LINK}" "${N}"
nsenter --net="${LINK}" -- sleep infinity &
CLIENT=$!
nsenter --net="${LINK}" -- ip -br -4 addr show net1 | sed 's/^/   /'
kubectl_ get network-attachment-definitions -n "${NS}" "${NAD}" -o json >"${WORK}/nad.json"
PIN=("${IMAGE_BIN_DIR}/netns-pinctl" --conf "${WORK}/nad.json") # the image's, as in its sweep container

step "kubectl rollout restart: the new holder comes up first (maxSurge 1, maxUnavailable 0)"
OLD="$(kubectl_ -n "${NS}" get pods -l "${SEL}" -o jsonpath='{.items[0].metadata.name}')"
k -n "${NS}" rollout restart daemonset/"${DS}"
wait_until 120 "the old holder's FailedKillPod event" \
	bash -c "'${KUBECTL}' --kubeconfig '${ADMIN_KUBECONFIG}' -n ${NS} get events --field-selector involvedObject.name=${OLD},reason=FailedKillPod -o name | grep -q ."
k -n "${NS}" get pods -o wide
ls -l "${LINK}" | sed 's/^/   /'
ok "the link leads to the new holder; the old one stays Terminating while the client uses it"
k -n "${NS}" get events --field-selector "involvedObject.name=${OLD}" --sort-by=.lastTimestamp
printf '   %s$ netns-pinctl --conf nad.json list%s\n' "${D}" "${N}"
"${PIN[@]}" list 2>&1 | sed 's/^/   /'

step "the client leaves: the old holder goes at the kubelet's next retry"
kill "${CLIENT}"
wait "${CLIENT}" 2>/dev/null || true
CLIENT=
start="$(date +%s)"
wait_until 180 "the old holder to go" bash -c "! '${KUBECTL}' --kubeconfig '${ADMIN_KUBECONFIG}' -n ${NS} get pod ${OLD} >/dev/null 2>&1"
ok "${OLD} gone $(($(date +%s) - start)) s after its client left"
k -n "${NS}" get pods -o wide
"${PIN[@]}" list 2>&1 | sed 's/^/   /'
step "done (the cluster keeps running: make kube-down stops it)"

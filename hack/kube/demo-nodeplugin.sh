#!/usr/bin/env bash
# hack/kube/demo-nodeplugin.sh (make demo DEMO=nodeplugin) - a CSI node
# plugin as its own holder, rolled while the client it made keeps working,
# on a real one-node Kubernetes, told with kubectl's own output (root).
#
#   1. the cluster of hack/kube/up.sh (made when it is not up; left running)
#   2. a stand-in node plugin DaemonSet csi-rbdplugin (busybox, host network
#      and hostPID as ceph-csi's own manifests have them) through
#      kubectl kustomize with deploy/nodeplugin/ as its component, on that
#      component's NetworkAttachmentDefinition ("links": []); storage NIC,
#      address range and node folders patched
#   3. a client in the node plugin pod's netns, outside its container, as
#      the kernel clients the plugin makes (krbd, kernel CephFS) are
#   4. kubectl rollout restart: the new pod is Running, the old one stays
#      Terminating, its netns, address and object kept; the client still
#      reaches its address; netns-pinctl list
#   5. the client leaves: the old pod goes at the kubelet's next retry
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

# The node agent's RBAC (deploy/rbac.yaml) covers rook-ceph: the node
# plugin runs there, and the NAD's rule names it.
NS=rook-ceph
NAD=ceph-public
DS=csi-rbdplugin
CLUSTER="${NS}/rbd"
SEL=app=csi-rbdplugin
WORK="$(mktemp -d /tmp/netns-pin-nodeplugin-demo.XXXXXX)"
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

step "a stand-in ceph-csi node plugin, patched by the kustomize Component deploy/nodeplugin/"
mkdir -p "${WORK}/kustomize"
cat >"${WORK}/kustomize/csi-rbdplugin.yaml" <<YAML
# ceph-csi's node plugin, as its own manifests run it: host network, hostPID
apiVersion: apps/v1
kind: DaemonSet
metadata: { name: ${DS}, namespace: ${NS} }
spec:
  selector: { matchLabels: { app: ${DS} } }
  template:
    metadata: { labels: { app: ${DS} } }
    spec:
      hostNetwork: true
      hostPID: true
      dnsPolicy: ClusterFirstWithHostNet
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 5
      containers:
        - { name: csi-rbdplugin, image: ${KUBE_BUSYBOX_IMAGE}, imagePullPolicy: Never, command: [sleep, "3600"] }
YAML
cat >"${WORK}/kustomize/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [csi-rbdplugin.yaml]
components: [$(realpath --relative-to="${WORK}/kustomize" "${ROOT}/deploy/nodeplugin")]
YAML
printf '   %s$ cat kustomization.yaml%s\n' "${D}" "${N}"
sed 's/^/   /' "${WORK}/kustomize/kustomization.yaml"
kubectl_ kustomize "${WORK}/kustomize" >"${WORK}/built.yaml"
# the node's storage NIC, this cluster's range, the kubelet's folder, the namespace
sed -e "s#\"master\": \"eth1\"#\"master\": \"${KUBE_STORAGE_MASTER}\"#" \
	-e "s#\"range\": \"192.168.20.0/24\"#\"range\": \"${KUBE_STORAGE_SUBNET}\", \"configuration_path\": \"${KUBE_WHEREABOUTS_CONF}\"#" \
	-e "s#\"192.168.20.0/28\"#\"${KUBE_STORAGE_SUBNET%.0/24}.0/28\"#" \
	-e "s#\"logFile\": \"/var/log/netns-pin.log\"#\"logFile\": \"${KUBE_DIR}/logs/netns-pin.log\", \"pinDir\": \"${PIN_DIR}\", \"stateDir\": \"${STATE_DIR}\"#" \
	-e "s#ceph-csi#${NS}#g" \
	"${WORK}/built.yaml" >"${WORK}/apply.yaml"
kubectl_ create namespace "${NS}" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
k apply -f "${WORK}/apply.yaml"
k -n "${NS}" rollout status daemonset/"${DS}" --timeout=120s
k -n "${NS}" get pods -o wide
kubectl_ get network-attachment-definitions -n "${NS}" "${NAD}" -o json >"${WORK}/nad.json"
PIN=("${IMAGE_BIN_DIR}/netns-pinctl" --conf "${WORK}/nad.json") # the image's, as in its sweep container
OLD="$(kubectl_ -n "${NS}" get pods -l "${SEL}" -o jsonpath='{.items[0].metadata.name}')"
PINPATH="$("${PIN[@]}" --json list | jq -r --arg p "${OLD}" '.[] | select(.podName == $p) | .pinPath')"
[[ -n "${PINPATH}" ]] || die "no pin of ${OLD}"
printf '   %s$ netns-pinctl --conf nad.json list%s\n' "${D}" "${N}"
"${PIN[@]}" list 2>&1 | sed 's/^/   /'
ok "pinned at ${PINPATH}; no link (links: [])"

step "a client in ${OLD}'s netns, outside its container, as the kernel clients the plugin makes"
printf '   %s$ nsenter --net=<the pod'"'"'s netns> -- sleep infinity &%s\n' "${D}" "${N}"
nsenter --net="${PINPATH}" -- sleep infinity &
CLIENT=$!
# nsenter has entered the netns once its /proc/<pid>/ns/net is the pin's
wait_until 10 "the client in the pod's netns" \
	bash -c "[[ \"\$(stat -L -c %i /proc/${CLIENT}/ns/net)\" == \"\$(stat -L -c %i '${PINPATH}')\" ]]"
nsenter --net="/proc/${CLIENT}/ns/net" -- ip -br -4 addr show net1 | sed 's/^/   /'

step "kubectl rollout restart: the new node plugin comes up first (maxSurge 1, maxUnavailable 0)"
k -n "${NS}" rollout restart daemonset/"${DS}"
wait_until 120 "the old node plugin's FailedKillPod event" \
	bash -c "'${KUBECTL}' --kubeconfig '${ADMIN_KUBECONFIG}' -n ${NS} get events --field-selector involvedObject.name=${OLD},reason=FailedKillPod -o name | grep -q ."
k -n "${NS}" get pods -o wide
k -n "${NS}" get events --field-selector "involvedObject.name=${OLD}" --sort-by=.lastTimestamp
printf '   %s$ nsenter --net=/proc/%s/ns/net -- ip -br -4 addr show net1%s\n' "${D}" "${CLIENT}" "${N}"
nsenter --net="/proc/${CLIENT}/ns/net" -- ip -br -4 addr show net1 | sed 's/^/   /'
ok "the client's netns keeps its interface and address; ${OLD} stays Terminating while it lives"
printf '   %s$ netns-pinctl --conf nad.json list%s\n' "${D}" "${N}"
"${PIN[@]}" list 2>&1 | sed 's/^/   /'

step "the client leaves: the old node plugin goes at the kubelet's next retry"
kill "${CLIENT}"
wait "${CLIENT}" 2>/dev/null || true
CLIENT=
start="$(date +%s)"
wait_until 180 "the old node plugin to go" bash -c "! '${KUBECTL}' --kubeconfig '${ADMIN_KUBECONFIG}' -n ${NS} get pod ${OLD} >/dev/null 2>&1"
ok "${OLD} gone $(($(date +%s) - start)) s after its client left"
k -n "${NS}" get pods -o wide
"${PIN[@]}" list 2>&1 | sed 's/^/   /'
step "done (the cluster keeps running: make kube-down stops it)"

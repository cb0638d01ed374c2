#!/usr/bin/env bash
# hack/kube/up.sh (make kube-up) - a real one-node Kubernetes on this
# machine, with netns-pin installed the way a user installs it.
#
#   1. hack/kube/build.sh: the pinned binaries and images (cached)
#   2. its own containerd (root, state and socket under KUBE_DIR; with
#      NETNS_PIN_KUBE_RUNTIME=crio a CRI-O, hack/runtime/crio.sh), etcd,
#      kube-apiserver, kube-controller-manager, kube-scheduler and the
#      kubelet, each started in the background with its PID recorded; the
#      node's registry (distribution's, on 127.0.0.1:15000, which
#      containerd pulls from over plain HTTP) for the chart scenario
#   3. the node's CNI: Multus (thin) as the only configuration, with a
#      kubeconfig of its own and the default network (bridge + host-local)
#      as its delegate (with NETNS_PIN_KUBE_MULTUS=thick: the default
#      network's own configuration, and Multus thick as its users deploy
#      it, upstream's DaemonSet with deploy/multus-thick-patch.yaml); the
#      reference plugins and whereabouts in the CNI bin folder; the NetworkAttachmentDefinition CRD from Multus' sources and
#      whereabouts' CRDs from its own; whereabouts' controller
#      (ip-control-loop, hack/kube/whereabouts.sh) as its DaemonSet runs it
#   4. netns-pin: the archive of make image (.cache/image/netns-pin.oci.tar)
#      imported into the node's image store as it is, beside the image of
#      the earlier commit of hack/kube/upgrade-from (the upgrade scenario's);
#      deploy/installer-daemonset.yaml, deploy/agent-daemonset.yaml and
#      deploy/controller.yaml (with their RBAC and admission policies)
#      applied with the archive's reference for deploy/'s placeholder, as an
#      operator sets the pushed one (the installer's host path pointed at
#      this node's CNI bin folder), and waited for until the binary is in
#      place
#
# Idempotent: with the cluster up it only checks and re-applies. Afterwards
#   .cache/kube/bin/kubectl --kubeconfig .cache/kube/admin.kubeconfig get nodes
# works; .cache/kube/env has the paths for scripts and tests. Stop it with
# hack/kube/down.sh (make kube-down). Environment: NETNS_PIN_KUBE_DIR (the
# run folder, default /var/lib/netns-pin-kube), NETNS_PIN_KUBE_RUNTIME
# (containerd, the default, or crio; a cluster that is up keeps its own),
# NETNS_PIN_KUBE_MULTUS (thin, the default, or thick; the same).
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/runtime/crio.sh
source "${ROOT}/hack/runtime/crio.sh"
# shellcheck source=hack/kube/whereabouts.sh
source "${ROOT}/hack/kube/whereabouts.sh"

PKI="${KUBE_DIR}/pki"
ETCD_PORT=12379
API_PORT=16443
API_URL="https://127.0.0.1:${API_PORT}"
# The node's address: the default network's bridge carries it, so the
# cluster needs no route to anywhere.
NODE_IP="${POD_SUBNET%.0/24}.1"
# The address the kubelet serves on and reports; hack/kube/node.sh gives
# an extra node its lab address instead.
KUBELET_IP="${KUBELET_IP:-${NODE_IP}}"
# The cgroup under which the kubelet puts its pods: an extra node gets its
# own, so no kubelet takes another's pods for orphans.
CGROUP_ROOT="${CGROUP_ROOT:-/}"
START_TIMEOUT=120

# --- host: folders, links, sysctls to restore -------------------------

# remember_host records, once, what the kubelet and this script change on
# the host, so down.sh can put it back.
remember_host() {
	local f="${KUBE_DIR}/host.orig" k p
	[[ -f "${f}" ]] && return 0
	{
		# the kubelet's kernel tunables, and the bridge plugin's ip_forward
		for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
			kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward; do
			echo "sysctl ${k} $(sysctl -n "${k}")"
		done
		# folders the kubelet makes at fixed places, whatever its root
		for p in /var/lib/kubelet /var/log/containers /var/log/pods; do
			[[ -e "${p}" ]] || echo "created ${p}"
		done
	} >"${f}.tmp"
	mv "${f}.tmp" "${f}"
}

make_links() {
	ip link show "${BRIDGE}" >/dev/null 2>&1 || ip link add "${BRIDGE}" type bridge
	[[ "$(ip -4 -o addr show dev "${BRIDGE}")" == *" ${NODE_IP}/"* ]] || ip addr add "${NODE_IP}/24" dev "${BRIDGE}"
	ip link set "${BRIDGE}" up
	ip link show "${STORAGE_MASTER}" >/dev/null 2>&1 ||
		ip link add "${STORAGE_MASTER}" type veth peer name "${STORAGE_PEER}"
	ip link set "${STORAGE_MASTER}" up
	ip link set "${STORAGE_PEER}" up
}

# --- PKI and kubeconfigs ----------------------------------------------

# cert NAME SUBJECT EXTENSIONS: a key and a certificate signed by the CA.
cert() {
	[[ -f "${PKI}/$1.crt" ]] && return 0
	openssl genrsa -out "${PKI}/$1.key" 2048 2>/dev/null
	openssl req -new -key "${PKI}/$1.key" -subj "$2" -out "${PKI}/$1.csr" 2>/dev/null
	printf '%b\n' "$3" >"${PKI}/$1.ext"
	openssl x509 -req -in "${PKI}/$1.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -CAcreateserial \
		-days 3650 -extfile "${PKI}/$1.ext" -out "${PKI}/$1.crt" 2>/dev/null
}

kubeconfig() {
	cat >"${KUBE_DIR}/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: netns-pin
  cluster: {certificate-authority: ${PKI}/ca.crt, server: "${API_URL}"}
users:
- name: $1
  user: {client-certificate: ${PKI}/$1.crt, client-key: ${PKI}/$1.key}
contexts:
- name: netns-pin
  context: {cluster: netns-pin, user: $1}
current-context: netns-pin
KC
}

make_pki() {
	mkdir -p "${PKI}"
	chmod 0700 "${PKI}"
	if [[ ! -f "${PKI}/ca.crt" ]]; then
		openssl genrsa -out "${PKI}/ca.key" 2048 2>/dev/null
		openssl req -x509 -new -nodes -key "${PKI}/ca.key" -subj /CN=netns-pin-kube-ca -days 3650 -out "${PKI}/ca.crt"
	fi
	cert apiserver /CN=kube-apiserver "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:${SERVICE_SUBNET%.0/24}.1,IP:${NODE_IP}\nextendedKeyUsage=serverAuth"
	cert admin "/O=system:masters/CN=admin" extendedKeyUsage=clientAuth
	cert kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}" extendedKeyUsage=clientAuth
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" extendedKeyUsage=clientAuth
	cert controller-manager /CN=system:kube-controller-manager extendedKeyUsage=clientAuth
	cert scheduler /CN=system:kube-scheduler extendedKeyUsage=clientAuth
	# Multus and whereabouts run as users of their own, given the
	# ClusterRoles of their upstream manifests (apply_rbac)
	cert multus /CN=netns-pin:multus extendedKeyUsage=clientAuth
	cert whereabouts /CN=netns-pin:whereabouts extendedKeyUsage=clientAuth
	[[ -f "${PKI}/sa.key" ]] || {
		openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
		openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
	}
	local u
	for u in admin kubelet controller-manager scheduler multus whereabouts; do kubeconfig "${u}"; done
	mkdir -p "${KUBE_CACHE}"
	cp "${KUBE_DIR}/admin.kubeconfig" "${ADMIN_KUBECONFIG}"
}

# --- configuration files ----------------------------------------------

# check_runtime: a cluster that is up (its run folder there) runs on the
# runtime it was made with; asking for another is an error.
check_runtime() {
	local have=""
	[[ -f "${KUBE_DIR}/runtime" ]] && have="$(cat "${KUBE_DIR}/runtime")"
	[[ -z "${have}" || "${have}" == "${KUBE_RUNTIME}" ]] ||
		die "the cluster in ${KUBE_DIR} runs on ${have}, not ${KUBE_RUNTIME}: hack/kube/down.sh first"
	[[ "${KUBE_RUNTIME}" == containerd || "${KUBE_RUNTIME}" == crio ]] || die "unknown NETNS_PIN_KUBE_RUNTIME ${KUBE_RUNTIME} (containerd|crio)"
	echo "${KUBE_RUNTIME}" >"${KUBE_DIR}/runtime"
	have=""
	[[ -f "${KUBE_DIR}/multus" ]] && have="$(cat "${KUBE_DIR}/multus")"
	[[ -z "${have}" || "${have}" == "${KUBE_MULTUS}" ]] ||
		die "the cluster in ${KUBE_DIR} runs Multus ${have}, not ${KUBE_MULTUS}: hack/kube/down.sh first"
	[[ "${KUBE_MULTUS}" == thin || "${KUBE_MULTUS}" == thick ]] || die "unknown NETNS_PIN_KUBE_MULTUS ${KUBE_MULTUS} (thin|thick)"
	echo "${KUBE_MULTUS}" >"${KUBE_DIR}/multus"
}

# write_crio_config: the CRI-O of the runtime suite (hack/runtime/crio.sh),
# every file of it under KUBE_DIR/crio.
write_crio_config() {
	crio_prepare "${KUBE_DIR}"
	mkdir -p "${KUBE_DIR}/crio/crio.conf.d"
	{
		echo "# Written by hack/kube/up.sh: the node's runtime, apart from any other on the machine."
		crio_config "${KUBE_DIR}" "${CRIO_SOCK}" "${PAUSE_IMAGE}" "${CNI_BIN_DIR}" "${CNI_CONF_DIR}"
	} >"${KUBE_DIR}/crio/crio.conf"
	cat >"${KUBE_DIR}/crictl.yaml" <<EOC
runtime-endpoint: unix://${CRIO_SOCK}
image-endpoint: unix://${CRIO_SOCK}
timeout: 60
EOC
	cat >"${KUBE_DIR}/env" <<EOC
# Written by hack/kube/up.sh; source it.
CGROUP_PARENT=${CGROUP_ROOT%/}/kubepods
EOC
}

write_containerd_config() {
	mkdir -p "${KUBE_DIR}/containerd/root" "${KUBE_DIR}/containerd/state" "${KUBE_DIR}/run" "${KUBE_DIR}/opt"
	{
		echo "# Written by hack/kube/up.sh: the node's runtime, apart from any other containerd on the machine."
		containerd_config "${KUBE_DIR}" "${CONTAINERD_SOCK}" "${PAUSE_IMAGE}" "${CNI_BIN_DIR}" "${CNI_CONF_DIR}" \
			'  # sandboxes'"'"' netns under the state folder, not /var/run/netns
  netns_mounts_under_state_dir = true
  # the node'"'"'s registry (start_registry): hosts.toml per registry
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "'"${KUBE_DIR}"'/containerd/certs.d"' \
			"        Root = \"${KUBE_DIR}/runc\""
	} >"${KUBE_DIR}/containerd/config.toml"
	# the registry speaks plain HTTP on the host's loopback
	mkdir -p "${KUBE_DIR}/containerd/certs.d/${REGISTRY_ADDR}"
	cat >"${KUBE_DIR}/containerd/certs.d/${REGISTRY_ADDR}/hosts.toml" <<EOC
server = "http://${REGISTRY_ADDR}"
[host."http://${REGISTRY_ADDR}"]
  capabilities = ["pull", "resolve"]
EOC
	cat >"${KUBE_DIR}/crictl.yaml" <<EOC
runtime-endpoint: unix://${CONTAINERD_SOCK}
image-endpoint: unix://${CONTAINERD_SOCK}
timeout: 60
EOC
	# hack/runtime/teardown.sh (used by down.sh) reads these
	cat >"${KUBE_DIR}/env" <<EOC
# Written by hack/kube/up.sh; source it.
CGROUP_PARENT=${CGROUP_ROOT%/}/kubepods
EOC
}

# default_network prints the cluster's default network (bridge +
# host-local), as its own configuration list.
default_network() {
	jq -n --arg dir "${KUBE_DIR}" --arg br "${BRIDGE}" --arg subnet "${POD_SUBNET}" --arg gw "${NODE_IP}" '{
		cniVersion: "1.0.0", name: "default-net",
		plugins: [{type: "bridge", bridge: $br, isGateway: true,
			ipam: {type: "host-local", dataDir: ($dir + "/lib/cni/host-local"),
				ranges: [[{subnet: $subnet, gateway: $gw}]], routes: [{dst: "0.0.0.0/0"}]}}]
	}'
}

# The node's CNI. Thin: Multus as the only configuration, the default
# network inline as its delegate (Multus v4.2.3 caches a "clusterNetwork"
# given as a file path without the plugins' own fields); retryDeleteOnError
# keeps a pod's delegate cache while a DEL fails, so the kubelet's retries
# DEL the same networks. Thick: the default network's own configuration,
# from which multus-daemon ("multusConfigFile": "auto") makes its shim's
# 00-multus.conf (install_multus_thick); the runtime uses it until then.
write_cni() {
	mkdir -p "${CNI_BIN_DIR}" "${CNI_CONF_DIR}" "${KUBE_DIR}/multus.d" "${KUBE_DIR}/lib/cni"
	local p
	for p in bridge macvlan host-local loopback; do
		install -m 0755 "${CACHE}/cni/bin/${p}" "${CNI_BIN_DIR}/${p}"
	done
	install -m 0755 "${WHEREABOUTS_BIN}/whereabouts" "${CNI_BIN_DIR}/whereabouts"
	if [[ "${KUBE_MULTUS}" == thick ]]; then
		default_network >"${CNI_CONF_DIR}/.10-default.conflist.tmp"
		mv "${CNI_CONF_DIR}/.10-default.conflist.tmp" "${CNI_CONF_DIR}/10-default.conflist"
	else
		install -m 0755 "${CACHE}/runtime/bin/multus" "${CNI_BIN_DIR}/multus"
		default_network | jq --arg kc "${KUBE_DIR}/multus.kubeconfig" --arg dir "${KUBE_DIR}" --arg bin "${CNI_BIN_DIR}" '{
			cniVersion: "1.0.0", name: "multus-cni-network", type: "multus",
			kubeconfig: $kc, confDir: ($dir + "/multus.d"), cniDir: ($dir + "/lib/cni/multus"),
			binDir: $bin, logFile: ($dir + "/logs/multus.log"), logLevel: "verbose",
			retryDeleteOnError: true, multusNamespace: "kube-system", systemNamespaces: ["kube-system"],
			delegates: [.]
		}' >"${CNI_CONF_DIR}/.00-multus.conf.tmp"
		mv "${CNI_CONF_DIR}/.00-multus.conf.tmp" "${CNI_CONF_DIR}/00-multus.conf"
	fi
	# whereabouts reads its datastore from a flat file, where its
	# DaemonSet would install it (NADs name it with configuration_path)
	mkdir -p "${CNI_CONF_DIR}/whereabouts.d"
	jq -n --arg kc "${KUBE_DIR}/whereabouts.kubeconfig" --arg log "${KUBE_DIR}/logs/whereabouts.log" \
		'{datastore: "kubernetes", kubernetes: {kubeconfig: $kc}, log_file: $log, log_level: "verbose"}' \
		>"${CNI_CONF_DIR}/whereabouts.d/whereabouts.conf"
}

write_kubelet_config() {
	cat >"${KUBE_DIR}/kubelet-config.yaml" <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: ${PKI}/ca.crt}}
authorization: {mode: Webhook}
# cgroup v1 hosts without systemd
cgroupDriver: cgroupfs
cgroupRoot: ${CGROUP_ROOT}
containerRuntimeEndpoint: unix://${RUNTIME_SOCK}
failSwapOn: false
address: ${KUBELET_IP}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
clusterDomain: cluster.local
# no DNS runs here; named so pods get no MissingClusterDNS warnings
clusterDNS: [${SERVICE_SUBNET%.0/24}.10]
staticPodPath: ${KUBE_DIR}/manifests
podLogsDir: ${KUBE_DIR}/pod-logs
volumePluginDir: ${KUBE_DIR}/volume-plugins
# a test machine: never evict, never collect images (none can be pulled)
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "0%", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
# no iptables here
makeIPTablesUtilChains: false
EOC
}

# --- processes ----------------------------------------------------------

# start NAME CMD...: run CMD in its own session, output to logs/NAME.log.
start() {
	local name="$1"
	shift
	pid_of "${name}" >/dev/null && return 0
	setsid "$@" </dev/null >>"${KUBE_DIR}/logs/${name}.log" 2>&1 &
	echo $! >"${KUBE_DIR}/pids/${name}"
	# hack/runtime/teardown.sh stops the runtime by this file
	[[ "${name}" != containerd && "${name}" != crio ]] || echo $! >"${KUBE_DIR}/${name}.pid"
	log "${name} started (pid $!), log ${KUBE_DIR}/logs/${name}.log"
}

start_containerd() {
	start containerd containerd --config "${KUBE_DIR}/containerd/config.toml"
	wait_until 60 "containerd" ctr --address "${CONTAINERD_SOCK}" version
	local img imgs=("${IMAGES}/pause.tar" "${IMAGES}/busybox.tar" "${IMAGES}/whereabouts.tar" "${IMAGE_ARCHIVE}" "${UPGRADE_FROM_ARCHIVE}")
	[[ "${KUBE_MULTUS}" != thick ]] || imgs+=("${MULTUS_DAEMON_ARCHIVE}")
	for img in "${imgs[@]}"; do
		ctr --address "${CONTAINERD_SOCK}" -n k8s.io images import "${img}" >/dev/null
	done
}

# start_registry: the node's registry, distribution's (hack/kube/build.sh),
# on the host's loopback only, its storage under KUBE_DIR. The chart
# scenario (test/kube/helm_test.go) pushes make image's archive to it with
# skopeo, and the kubelet pulls from it through containerd (hosts.toml
# above): the way a user's image reaches a node. Tracing off: the
# registry would export spans to a collector that is not there.
start_registry() {
	mkdir -p "${KUBE_DIR}/registry"
	cat >"${KUBE_DIR}/registry/config.yml" <<EOC
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${KUBE_DIR}/registry/data
  delete:
    enabled: true
http:
  addr: ${REGISTRY_ADDR}
EOC
	OTEL_TRACES_EXPORTER=none start registry "${REGISTRY_BIN}/registry" serve "${KUBE_DIR}/registry/config.yml"
	wait_until 30 "the registry on ${REGISTRY_ADDR}" curl -sf -o /dev/null "http://${REGISTRY_ADDR}/v2/"
}

# start_crio: the images first (copyimg, before CRI-O opens its storage),
# then CRI-O.
start_crio() {
	if ! pid_of crio >/dev/null; then
		local img ref
		for img in pause busybox whereabouts; do
			case "${img}" in
			pause) ref="${PAUSE_IMAGE}" ;;
			busybox) ref="${BUSYBOX_IMAGE}" ;;
			whereabouts) ref="${WHEREABOUTS_IMAGE}" ;;
			esac
			crio_import_image "${KUBE_DIR}" "${IMAGES}/${img}.tar" "${ref}"
		done
		# the archives name their images (containers/image picks the
		# linux/amd64 one of make image's index)
		crio_import_image "${KUBE_DIR}" "${IMAGE_ARCHIVE}" "${NETNS_PIN_IMAGE}"
		crio_import_image "${KUBE_DIR}" "${UPGRADE_FROM_ARCHIVE}" "${UPGRADE_FROM_IMAGE}"
		[[ "${KUBE_MULTUS}" != thick ]] || crio_import_image "${KUBE_DIR}" "${MULTUS_DAEMON_ARCHIVE}" "${MULTUS_DAEMON_IMAGE}"
	fi
	start crio "${CRIO_BIN}/crio" --config "${KUBE_DIR}/crio/crio.conf" --config-dir "${KUBE_DIR}/crio/crio.conf.d"
	wait_until 60 "crio" "${CACHE}/runtime/bin/crictl" --config "${KUBE_DIR}/crictl.yaml" version
}

start_control_plane() {
	start etcd "${K8S_BIN}/etcd" --name netns-pin --data-dir "${KUBE_DIR}/etcd" \
		--listen-client-urls "http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
		--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
		--initial-cluster netns-pin=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381
	# The requests of netns-pin's agent and controller are audited (their
	# users only, metadata, one line each): test/kube counts them per node.
	cat >"${KUBE_DIR}/audit-policy.yaml" <<EOC
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    users: ["system:serviceaccount:kube-system:netns-pin-agent", "system:serviceaccount:kube-system:netns-pin-controller"]
  - level: None
EOC
	start kube-apiserver "${K8S_BIN}/kube-apiserver" --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
		--audit-policy-file="${KUBE_DIR}/audit-policy.yaml" --audit-log-path="${KUBE_DIR}/logs/audit.log" \
		--bind-address=127.0.0.1 --secure-port="${API_PORT}" --advertise-address="${NODE_IP}" \
		--service-cluster-ip-range="${SERVICE_SUBNET}" --client-ca-file="${PKI}/ca.crt" \
		--tls-cert-file="${PKI}/apiserver.crt" --tls-private-key-file="${PKI}/apiserver.key" \
		--kubelet-client-certificate="${PKI}/apiserver-kubelet-client.crt" \
		--kubelet-client-key="${PKI}/apiserver-kubelet-client.key" --kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="${PKI}/sa.pub" --service-account-signing-key-file="${PKI}/sa.key" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true
	wait_until "${START_TIMEOUT}" "kube-apiserver" kubectl_ get --raw /readyz
	start kube-controller-manager "${K8S_BIN}/kube-controller-manager" \
		--kubeconfig="${KUBE_DIR}/controller-manager.kubeconfig" \
		--authentication-kubeconfig="${KUBE_DIR}/controller-manager.kubeconfig" \
		--authorization-kubeconfig="${KUBE_DIR}/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --service-account-private-key-file="${PKI}/sa.key" \
		--root-ca-file="${PKI}/ca.crt" --use-service-account-credentials=true \
		--service-cluster-ip-range="${SERVICE_SUBNET}" --controllers='*,-bootstrapsigner,-tokencleaner,-csrsigning'
	start kube-scheduler "${K8S_BIN}/kube-scheduler" --kubeconfig="${KUBE_DIR}/scheduler.kubeconfig" \
		--authentication-kubeconfig="${KUBE_DIR}/scheduler.kubeconfig" \
		--authorization-kubeconfig="${KUBE_DIR}/scheduler.kubeconfig" --bind-address=127.0.0.1 --leader-elect=false
}

start_kubelet() {
	start kubelet "${K8S_BIN}/kubelet" --config="${KUBE_DIR}/kubelet-config.yaml" \
		--kubeconfig="${KUBE_DIR}/kubelet.kubeconfig" --root-dir="${KUBELET_DIR}" \
		--cert-dir="${KUBELET_DIR}/pki" --hostname-override="${NODE_NAME}" --node-ip="${KUBELET_IP}"
	wait_until "${START_TIMEOUT}" "node ${NODE_NAME}" kubectl_ get node "${NODE_NAME}"
	kubectl_ wait --for=condition=Ready "node/${NODE_NAME}" --timeout="${START_TIMEOUT}s" >/dev/null
}

# --- what runs on the cluster ----------------------------------------

# yaml_docs_of_kind KIND FILE: the documents of a multi-document YAML file
# with that top-level kind.
yaml_docs_of_kind() {
	awk -v kind="kind: $1" 'BEGIN { RS = "\n---\n" }
		{ n = split($0, l, "\n"); for (i = 1; i <= n; i++) if (l[i] == kind) { print; print "---"; next } }' "$2"
}

# apply_rbac: Multus' and whereabouts' ClusterRoles from their own
# manifests, bound to the users of their kubeconfigs.
apply_rbac() {
	local mdir wdir
	mdir="$(cd / && go mod download -json "${MULTUS_MODULE}@${MULTUS_VERSION}" | jq -r .Dir)"
	wdir="$(cd "${KUBE_CACHE}/src/whereabouts-${WHEREABOUTS_VERSION}" && go list -m -f '{{.Dir}}' "${WHEREABOUTS_MODULE}")"
	{
		yaml_docs_of_kind ClusterRole "${mdir}/deployments/multus-daemonset.yml"
		yaml_docs_of_kind ClusterRole "${wdir}/doc/crds/daemonset-install.yaml"
	} | kubectl_ apply -f - >/dev/null
	kubectl_ create clusterrolebinding netns-pin-multus --clusterrole=multus --user=netns-pin:multus \
		--dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
	kubectl_ create clusterrolebinding netns-pin-whereabouts --clusterrole=whereabouts-cni --user=netns-pin:whereabouts \
		--dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
}

apply_crds() {
	kubectl_ apply -f "${KUBE_CACHE}/nad-crd-${MULTUS_VERSION}.yaml" >/dev/null
	kubectl_ apply -f "${WHEREABOUTS_BIN}/whereabouts.cni.cncf.io_ippools.yaml" \
		-f "${WHEREABOUTS_BIN}/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml" \
		-f "${WHEREABOUTS_BIN}/whereabouts.cni.cncf.io_nodeslicepools.yaml" >/dev/null
	kubectl_ wait --for=condition=Established --timeout=60s \
		crd/network-attachment-definitions.k8s.cni.cncf.io crd/ippools.whereabouts.cni.cncf.io \
		crd/overlappingrangeipreservations.whereabouts.cni.cncf.io >/dev/null
}

# share_root: Multus thick's volumes (HostToContainer, Bidirectional) need
# / to be a shared mount, as it is on a node that systemd runs; this
# machine's is private. Shared while the cluster runs; down.sh makes it
# private again.
share_root() {
	[[ "$(findmnt -n -o PROPAGATION /)" == shared ]] && return 0
	mount --make-shared /
	echo "propagation / private" >>"${KUBE_DIR}/host.orig"
}

# install_multus_thick deploys Multus thick as its users do: upstream's
# deployments/multus-daemonset-thick.yml through kustomize, with
# deploy/multus-thick-patch.yaml for this node's pinDir (the two paths the
# patch says to change) and a patch for this node's folders (where upstream
# names /etc/cni/net.d, /opt/cni/bin, /run, /var/lib/cni/multus and
# /var/lib/kubelet) and its API server (127.0.0.1, no kube-proxy); the image
# is hack/runtime/setup.sh's, laid out as upstream's. The daemon keeps its
# delegates' libcni cache in /var/lib/cni/multus, here
# KUBE_DIR/lib/cni/multus. Then waits for the daemon's 00-multus.conf.
install_multus_thick() {
	local dir="${KUBE_DIR}/multus-thick" mdir pins="${KUBELET_DIR}/plugins/netns-pin"
	local netns_dir="${KUBE_DIR}/containerd/state/io.containerd.grpc.v1.cri/netns"
	[[ "${KUBE_RUNTIME}" != crio ]] || netns_dir="${KUBE_DIR}/crio/ns"
	mkdir -p "${dir}" "${KUBE_DIR}/run" "${KUBE_DIR}/lib/cni/multus" "${KUBE_DIR}/multus-conf.d" "${pins}"
	mdir="$(cd / && go mod download -json "${MULTUS_MODULE}@${MULTUS_VERSION}" | jq -r .Dir)"
	cp "${mdir}/deployments/multus-daemonset-thick.yml" "${dir}/multus-daemonset-thick.yml"
	chmod 0644 "${dir}/multus-daemonset-thick.yml"
	sed "s#/var/lib/kubelet/plugins/netns-pin#${pins}#" "${ROOT}/deploy/multus-thick-patch.yaml" >"${dir}/netns-pin-patch.yaml"
	jq -n --arg bin "${CNI_BIN_DIR}" --arg sock "${KUBE_DIR}/run/multus" '{
		chrootDir: "/hostroot", cniVersion: "0.3.1", logLevel: "verbose", logToStderr: true,
		cniConfigDir: "/host/etc/cni/net.d", multusAutoconfigDir: "/host/etc/cni/net.d",
		multusConfigFile: "auto", socketDir: "/host/run/multus/",
		binDir: $bin, daemonSocketDir: $sock
	}' >"${dir}/daemon-config.json"
	cat >"${dir}/node-patch.yaml" <<EOC
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-multus-ds
  namespace: kube-system
spec:
  template:
    spec:
      containers:
        - name: kube-multus
          imagePullPolicy: Never
          volumeMounts:
            # "cnibin path must be identical between pod and container
            # host" (upstream's comment): libcni looks the delegates up there
            - name: cnibin
              mountPath: ${CNI_BIN_DIR}
            # the runtime's netns folder, where upstream mounts /run/netns:
            # the daemon looks at the pod's netns before its delegates do
            - name: runtime-netns
              mountPath: ${netns_dir}
              mountPropagation: HostToContainer
          env:
            - name: KUBERNETES_SERVICE_HOST
              value: "127.0.0.1"
            - name: KUBERNETES_SERVICE_PORT
              value: "${API_PORT}"
      initContainers:
        - name: install-multus-binary
          imagePullPolicy: Never
      volumes:
        - name: cni
          hostPath: {path: ${CNI_CONF_DIR}}
        - name: cnibin
          hostPath: {path: ${CNI_BIN_DIR}}
        - name: host-run
          hostPath: {path: ${KUBE_DIR}/run}
        - name: host-var-lib-cni-multus
          hostPath: {path: ${KUBE_DIR}/lib/cni/multus}
        - name: host-var-lib-kubelet
          hostPath: {path: ${KUBELET_DIR}}
        - name: host-run-k8s-cni-cncf-io
          hostPath: {path: ${KUBE_DIR}/run/k8s.cni.cncf.io}
        - name: multus-conf-dir
          hostPath: {path: ${KUBE_DIR}/multus-conf.d}
        - name: runtime-netns
          hostPath: {path: ${netns_dir}, type: DirectoryOrCreate}
EOC
	cat >"${dir}/kustomization.yaml" <<EOC
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - multus-daemonset-thick.yml
images:
  - name: ghcr.io/k8snetworkplumbingwg/multus-cni
    newName: ${MULTUS_DAEMON_IMAGE%:*}
    newTag: ${MULTUS_DAEMON_IMAGE##*:}
configMapGenerator:
  - name: multus-daemon-config
    namespace: kube-system
    behavior: replace
    files:
      - daemon-config.json
generatorOptions:
  disableNameSuffixHash: true
patches:
  - path: netns-pin-patch.yaml
  - path: node-patch.yaml
EOC
	kubectl_ apply -k "${dir}" >/dev/null
	kubectl_ -n kube-system rollout status daemonset/kube-multus-ds --timeout=180s >/dev/null
	wait_until 60 "multus-daemon's ${CNI_CONF_DIR}/00-multus.conf" grep -q '"multus-shim"' "${CNI_CONF_DIR}/00-multus.conf"
}

# installer_manifest FILE IMAGE prints the installer DaemonSet of FILE (this
# commit's deploy/installer-daemonset.yaml, or an earlier commit's for the
# upgrade scenario) as this suite runs it: IMAGE, this node's CNI bin
# folder, pinDir and stateDir (see install_netns_pin).
installer_manifest() {
	installer_patch "$2" <"$1"
}

# installer_patch IMAGE: installer_manifest's changes, of the installer
# DaemonSet on stdin (the image only when IMAGE is not "").
installer_patch() {
	local ex=(-e "s#^( *(path|value): )/opt/cni/bin\$#\1${CNI_BIN_DIR}#"
		-e "s#^( *- )--interval=10s\$#\1--interval=2s\n\1--pin-dir=${KUBELET_DIR}/plugins/netns-pin\n\1--state-dir=${KUBE_DIR}/lib/cni/netns-pin#")
	[[ -z "$1" ]] || ex+=(-e "s#^( *image: )${DEPLOY_IMAGE}\$#\1${1}#")
	[[ "${KUBE_MULTUS}" != thick ]] || ex+=(-e "s#^( *)hostPID: true\$#&\n\1hostNetwork: true#")
	sed -E "${ex[@]}"
}

# install_netns_pin applies deploy/installer-daemonset.yaml as it is but
# for its CNI bin folder setting, and waits for the copy.
install_netns_pin() {
	# The documented setting: the cni-bin volume's hostPath, the field that
	# names /opt/cni/bin (deploy/manifests_test.go
	# TestInstallerCNIBinFolderSetting; an earlier commit's manifest also
	# had the sweep container's CNI_BIN_DIR). The
	# sweeper works on this node's pinDir and stateDir (the suite's
	# NetworkAttachmentDefinitions name them), as an operator's --conf would,
	# and rounds every 2 s instead of 10 s, so that the suite's metrics
	# (updated each round) and abandoned teardowns are not waited for.
	# Under Multus thick only the sweeper finishes a refused teardown
	# (multus-shim answers every DEL with success), and whereabouts' DEL in
	# its chain needs this API server on 127.0.0.1: the sweeper gets the
	# host's network, as the agent does.
	installer_manifest "${ROOT}/deploy/installer-daemonset.yaml" "${NETNS_PIN_IMAGE}" | kubectl_ apply -f - >/dev/null
	kubectl_ -n kube-system rollout status daemonset/netns-pin-installer --timeout=180s >/dev/null
	# The node agent as deployed (its RBAC, its node policy, its in-cluster
	# ServiceAccount token), reading every store registered on the node
	# through the host's / at /host; it polls the stores every 1 s here. This API server listens on 127.0.0.1 only (no
	# kube-proxy, no route from pods): the agent uses the host's network and
	# is told the API's address, as the kubernetes Service would. This
	# machine's / is a private mount (no systemd to make it shared), which
	# the runtime refuses for HostToContainer: the host's / is bound as it
	# is (None). The agent reads files (registrations, records), which that
	# shows as they change; only a store on a file system mounted after the
	# agent started would stay unseen, and the suite makes none. The price,
	# why docs/operating.md tells users to make / shared instead: the
	# agent's container keeps a copy of every mount below /, pins included,
	# so a released holder's netns lives on until the agent goes; the
	# suite asserts pins and records, not the netns' end.
	# CRI-O turns a private hostPath that contains its storage root (/ does)
	# into HostToContainer and then refuses it on a private /: on CRI-O the
	# agent's host volume is a read-only, non-recursive bind of / outside
	# the run folder (no pin or netns of a submount is copied; nothing that
	# removes the run folder can reach through it), which shows the same
	# files.
	if [[ "${KUBE_RUNTIME}" == crio ]]; then
		mkdir -p "${HOST_ROOT_BIND}"
		if ! mountpoint -q "${HOST_ROOT_BIND}"; then
			mount --bind / "${HOST_ROOT_BIND}" && mount -o remount,bind,ro "${HOST_ROOT_BIND}" ||
				die "cannot bind / read-only at ${HOST_ROOT_BIND}"
		fi
	fi
	kubectl_ create namespace rook-ceph --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
	kubectl_ apply -f "${ROOT}/deploy/rbac.yaml" -f "${ROOT}/deploy/validating-admission-policy.yaml" >/dev/null
	agent_patch "${NETNS_PIN_IMAGE}" <"${ROOT}/deploy/agent-daemonset.yaml" | kubectl_ apply -f - >/dev/null
	kubectl_ -n kube-system rollout status daemonset/netns-pin-agent --timeout=180s >/dev/null
	install_controller
	[[ -x "${CNI_BIN_DIR}/netns-pin" ]] || die "the installer DaemonSet is ready but ${CNI_BIN_DIR}/netns-pin is missing"
	if ! cmp -s "${CNI_BIN_DIR}/netns-pin" "${IMAGE_BIN_DIR}/netns-pin"; then
		# the plugin was rebuilt since (an image of a dirty tree, re-imported
		# under the same name): roll the installer, as a user upgrades
		log "netns-pin changed: kubectl rollout restart daemonset/netns-pin-installer"
		kubectl_ -n kube-system rollout restart daemonset/netns-pin-installer >/dev/null
		kubectl_ -n kube-system rollout status daemonset/netns-pin-installer --timeout=180s >/dev/null
		cmp -s "${CNI_BIN_DIR}/netns-pin" "${IMAGE_BIN_DIR}/netns-pin" ||
			die "the installer DaemonSet did not install the new netns-pin"
		kubectl_ -n kube-system rollout restart daemonset/netns-pin-agent >/dev/null
		kubectl_ -n kube-system rollout status daemonset/netns-pin-agent --timeout=180s >/dev/null
	fi
}

# install_controller applies the cluster controller as deployed (two
# replicas, its RBAC and admission policy, the removal guard), with the host's network and the
# API's address as the agent has them. Its metrics port is then a host port:
# on one node the second replica stays Pending until another node joins
# (hack/kube/node.sh), where the scheduler puts it, as the Deployment's
# anti-affinity asks. Waits for one ready replica.
install_controller() {
	kubectl_ apply -f "${ROOT}/deploy/controller-rbac.yaml" -f "${ROOT}/deploy/controller-admission-policy.yaml" \
		-f "${ROOT}/deploy/removal-guard.yaml" >/dev/null
	# rollingUpdate: null takes away the defaults a Deployment applied
	# before had, which Recreate refuses
	controller_patch "${NETNS_PIN_IMAGE}" <"${ROOT}/deploy/controller.yaml" |
		sed -E 's#^( *)type: Recreate$#&\n\1rollingUpdate: null#' | kubectl_ apply -f - >/dev/null
	kubectl_ -n kube-system wait deployment/netns-pin-controller --for=jsonpath='{.status.readyReplicas}'=1 --timeout=180s >/dev/null ||
		die "the controller has no ready replica"
	# Installed means counted: a replica leads only once the Lease of an
	# earlier one has expired (a controller of a removed release may hold
	# it for its duration, 15 s), and until the leader writes the count
	# the removal guard says "not counted yet" and refuses every removal.
	wait_until 90 "the controller's count in the removal guard" guard_counted
}

# guard_counted: the removal guard's count is the controller's, not the
# shipped -1.
guard_counted() {
	local count
	count="$(kubectl_ get validatingadmissionpolicy netns-pin-removal-guard -o jsonpath='{.spec.variables[0].expression}')"
	[[ -n "${count}" && "${count}" != -1 ]]
}

# api_env_patch SA NAME: sed expressions (one per line) that put the pod of
# ServiceAccount SA in the host's network and tell it the API's address
# before its env entry NAME, as the kubernetes Service would: this API
# server listens on 127.0.0.1 only (no kube-proxy, no route from pods).
api_env_patch() {
	printf '%s\n' "s#^( *)serviceAccountName: ${1}\$#&\n\1hostNetwork: true#"
	printf '%s\n' "s#^( *)- name: ${2}\$#\1- name: KUBERNETES_SERVICE_HOST\n\1  value: \"127.0.0.1\"\n\1- name: KUBERNETES_SERVICE_PORT\n\1  value: \"${API_PORT}\"\n&#"
}

# sed_with EXPRESSIONS IMAGE [MORE...]: sed -E of stdin with each line of
# EXPRESSIONS, deploy/'s image replaced by IMAGE when it is not "", and
# the MORE expressions.
sed_with() {
	local ex=() line
	while IFS= read -r line; do ex+=(-e "${line}"); done <<<"$1"
	[[ -z "$2" ]] || ex+=(-e "s#^( *image: )${DEPLOY_IMAGE}\$#\1${2}#")
	shift 2
	for line in "$@"; do ex+=(-e "${line}"); done
	sed -E "${ex[@]}"
}

# agent_patch IMAGE: install_netns_pin's changes of the agent DaemonSet on
# stdin (see there).
agent_patch() {
	local host_root=/
	[[ "${KUBE_RUNTIME}" != crio ]] || host_root="${HOST_ROOT_BIND}"
	sed_with "$(api_env_patch netns-pin-agent NODE_NAME)" "$1" \
		"s#^( *path: )/var/lib/cni/netns-pin#\1${KUBE_DIR}/lib/cni/netns-pin#" \
		"s#^( *- )--listen-address=:9853\$#&\n\1--status-dir=/var/lib/cni/netns-pin-agent\n\1--interval=1s#" \
		"s#^( *mountPropagation: )HostToContainer\$#\1None#" \
		"s#^( *path: )/\$#\1${host_root}#"
}

# controller_patch IMAGE: install_controller's changes of the controller
# Deployment on stdin. In the host's network a new replica cannot start
# beside the old one on the same node (the metrics port): a rollout
# replaces them (Recreate).
controller_patch() {
	sed_with "$(api_env_patch netns-pin-controller POD_NAME)" "$1" \
		"s#^( *)replicas: [0-9]+\$#&\n\1strategy:\n\1  type: Recreate#"
}

# node_patch: the chart's rendering on stdin (helm's post-renderer,
# hack/kube/helm-node-patch) with each of netns-pin's workloads changed as
# the kustomize install above changes deploy/'s: the same functions, each
# on its own object. The image is the chart's (values).
node_patch() {
	local dir f kind name
	dir="$(mktemp -d)"
	awk -v dir="${dir}" 'BEGIN { n = 0 } /^---/ { n++; next } { print > sprintf("%s/%05d", dir, n) }'
	for f in "${dir}"/*; do
		kind="$(sed -n 's/^kind: //p' "${f}")"
		name="$(sed -n '/^metadata:/,/^[^ ]/ s/^  name: //p' "${f}" | head -n 1)"
		echo "---"
		case "${kind}/${name}" in
		DaemonSet/netns-pin-installer) installer_patch "" <"${f}" ;;
		DaemonSet/netns-pin-agent) agent_patch "" <"${f}" ;;
		Deployment/netns-pin-controller) controller_patch "" <"${f}" ;;
		Job/netns-pin-uninstall-check)
			# its container has no env: the API's address goes before its command
			sed_with "$(api_env_patch netns-pin-uninstall-check - | head -n 1)" "" \
				"s#^( *)command:\$#\1env:\n\1  - name: KUBERNETES_SERVICE_HOST\n\1    value: \"127.0.0.1\"\n\1  - name: KUBERNETES_SERVICE_PORT\n\1    value: \"${API_PORT}\"\n&#" <"${f}"
			;;
		*) cat "${f}" ;;
		esac
	done
	rm -rf "${dir}"
}

write_env() {
	cat >"${KUBE_CACHE}/env" <<EOC
# Written by hack/kube/up.sh: the running cluster. Source it.
KUBECONFIG=${ADMIN_KUBECONFIG}
KUBECTL=${KUBECTL}
KUBE_DIR=${KUBE_DIR}
KUBE_NODE=${NODE_NAME}
KUBE_NODE_IP=${NODE_IP}
KUBELET_DIR=${KUBELET_DIR}
KUBE_CNI_BIN_DIR=${CNI_BIN_DIR}
KUBE_RUNTIME=${KUBE_RUNTIME}
KUBE_MULTUS=${KUBE_MULTUS}
KUBE_RUNTIME_SOCK=${RUNTIME_SOCK}
KUBE_CONTAINERD_SOCK=${CONTAINERD_SOCK}
KUBE_CRICTL_CONFIG=${KUBE_DIR}/crictl.yaml
KUBE_STORAGE_MASTER=${STORAGE_MASTER}
KUBE_STORAGE_SUBNET=${STORAGE_SUBNET}
KUBE_WHEREABOUTS_CONF=${CNI_CONF_DIR}/whereabouts.d/whereabouts.conf
KUBE_BUSYBOX_IMAGE=${BUSYBOX_IMAGE}
KUBE_IMAGE=${NETNS_PIN_IMAGE}
KUBE_IMAGE_ARCHIVE=${IMAGE_ARCHIVE}
KUBE_REGISTRY=${REGISTRY_ADDR}
KUBE_IMAGE_BIN_DIR=${IMAGE_BIN_DIR}
KUBE_UPGRADE_FROM=${UPGRADE_FROM}
KUBE_UPGRADE_FROM_IMAGE=${UPGRADE_FROM_IMAGE}
K8S_VERSION=${K8S_VERSION}
EOC
}

main() {
	local start
	start="$(now_ms)"
	[[ "$(id -u)" == 0 ]] || die "run as root"
	bash "${ROOT}/hack/kube/build.sh"
	local t_build
	t_build="$(now_ms)"
	NETNS_PIN_IMAGE="$(image_ref "${IMAGE_ARCHIVE}")"
	UPGRADE_FROM="$(upgrade_from_commit)"
	UPGRADE_FROM_ARCHIVE="$(upgrade_from_dir "${UPGRADE_FROM}")/netns-pin.oci.tar"
	UPGRADE_FROM_IMAGE="$(image_ref "${UPGRADE_FROM_ARCHIVE}")"
	[[ "${NETNS_PIN_IMAGE}" != "${UPGRADE_FROM_IMAGE}" ]] ||
		die "make image and hack/kube/upgrade-from name the same image ${NETNS_PIN_IMAGE}: name an earlier commit there"
	mkdir -p "${KUBE_DIR}/logs" "${KUBE_DIR}/pids" "${KUBE_DIR}/manifests"
	chmod 0711 "${KUBE_DIR}"
	check_runtime
	remember_host
	[[ "${KUBE_MULTUS}" != thick ]] || share_root
	make_links
	make_pki
	if [[ "${KUBE_RUNTIME}" == crio ]]; then
		RUNTIME_SOCK="${CRIO_SOCK}"
		build_crio
		write_crio_config
	else
		RUNTIME_SOCK="${CONTAINERD_SOCK}"
		write_containerd_config
	fi
	write_cni
	write_kubelet_config
	if [[ "${KUBE_RUNTIME}" == crio ]]; then start_crio; else start_containerd; fi
	start_registry
	start_control_plane
	apply_rbac
	apply_crds
	start_kubelet
	[[ "${KUBE_MULTUS}" != thick ]] || install_multus_thick
	whereabouts_controller_up "${API_PORT}"
	install_netns_pin
	write_env
	log "up in $((($(now_ms) - start) / 1000)) s (build/check $(((t_build - start) / 1000)) s): $("${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" get node "${NODE_NAME}" --no-headers)"
	log "kubectl: ${KUBECTL} --kubeconfig ${ADMIN_KUBECONFIG}"
}

# hack/kube/node.sh sources this file for its functions;
# `hack/kube/up.sh installer-manifest FILE IMAGE` prints installer_manifest's,
# `hack/kube/up.sh node-patch` node_patch's.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	if [[ "${1:-}" == installer-manifest ]]; then
		installer_manifest "$2" "$3"
	elif [[ "${1:-}" == node-patch ]]; then
		node_patch
	else
		main "$@"
	fi
fi

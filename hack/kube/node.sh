#!/usr/bin/env bash
# hack/kube/node.sh - more nodes for the cluster of hack/kube/up.sh, the
# way kind makes nodes but without Docker: node N (2-9) is its own kubelet
# and containerd in network, mount, PID and UTS namespaces of their own,
# joined to the same API server, whereabouts and netns-pin DaemonSets.
#
#   hack/kube/node.sh up N          start node N (idempotent), wait until Ready
#   hack/kube/node.sh kill N        power loss: SIGKILL to the node's PID 1;
#                                   every process, mount and pod netns of the
#                                   node goes, its disk (NODE_ROOT) stays
#   hack/kube/node.sh link N down|up  cut or restore the node's only link
#                                   (a partition: the node keeps running)
#   hack/kube/node.sh down N        kill, remove its disk, links and cgroups,
#                                   and delete its Node object
#   hack/kube/node.sh pid N         the host PID of the node's PID 1 (its
#                                   files are under /proc/PID/root)
#   hack/kube/node.sh exec N CMD... run CMD inside the node's namespaces
#
# What a node has of its own:
#   network  netns npk-nodeN: eth0 10.97.200.N on the lab bridge npklab0
#            (10.97.200.1 on the host), the pod bridge npkbr0 with the pod
#            subnet 10.97.(16+N).0/24, the storage network's master npkm0;
#            the API server (127.0.0.1:16443 on the host) is relayed to
#            10.97.200.1:16443 on the host and to 127.0.0.1:16443 inside,
#            so kubeconfigs and hostNetwork pods use the address node 1 uses
#   mounts   its disk NODE_ROOT (/var/lib/netns-pin-kube-nodeN) bound over
#            KUBE_DIR, so every path of up.sh names the node's own file;
#            the folders programs use at fixed places (/var/lib/kubelet,
#            /var/lib/cni, /var/lib/netns-pin, /var/log/pods,
#            /var/log/containers) bound from its disk; the runtime's state
#            on a tmpfs, gone with the node as on a real machine; nothing
#            propagates between the node and the host
#   PIDs     its own PID namespace with its own /proc: killing its PID 1
#            kills every process of it, pods included
#   boot     its own boot id (/proc/sys/kernel/random/boot_id), new at each
#            start: kill N then up N is a reboot
#   cgroups  the kubelet's cgroupRoot /netns-pin-node-N
# The node's certificate (system:node:netns-pin-node-N) is signed by the
# cluster's CA on the host. Only the containerd runtime.
set -euo pipefail
# shellcheck source=hack/kube/up.sh
source "$(dirname "${BASH_SOURCE[0]}")/up.sh"

LAB_BRIDGE="npklab0"
LAB_PREFIX="10.97.200"

node_root() { echo "${KUBE_DIR}-node$1"; }
node_name() { echo "netns-pin-node-$1"; }
node_netns() { echo "npk-node$1"; }

check_n() {
	[[ "${1:-}" =~ ^[2-9]$ ]] || die "node number must be 2-9, not '${1:-}'"
}

# node_pid N: the host PID of the node's PID 1, while it runs.
node_pid() {
	local f pid
	f="$(node_root "$1")/node.pid"
	[[ -f "${f}" ]] || return 1
	read -r pid <"${f}"
	[[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null || return 1
	[[ "$(readlink "/proc/${pid}/ns/net")" == "$(readlink "/proc/self/ns/net")" ]] && return 1
	echo "${pid}"
}

# host_links: the lab bridge and the relay of the API server onto it.
host_links() {
	ip link show "${LAB_BRIDGE}" >/dev/null 2>&1 || ip link add "${LAB_BRIDGE}" type bridge
	[[ "$(ip -4 -o addr show dev "${LAB_BRIDGE}")" == *" ${LAB_PREFIX}.1/"* ]] ||
		ip addr add "${LAB_PREFIX}.1/24" dev "${LAB_BRIDGE}"
	ip link set "${LAB_BRIDGE}" up
	start netns-pin-api-relay bash -c "exec -a netns-pin-api-relay socat TCP-LISTEN:${API_PORT},bind=${LAB_PREFIX}.1,fork,reuseaddr TCP:127.0.0.1:${API_PORT}"
}

node_links() {
	local n="$1" ns veth
	ns="$(node_netns "${n}")" veth="npkv${n}"
	ip netns list | grep -qx "${ns}\( .*\)\?" || ip netns add "${ns}"
	if ! ip link show "${veth}" >/dev/null 2>&1; then
		ip link add "${veth}" type veth peer name eth0 netns "${ns}"
		ip link set "${veth}" master "${LAB_BRIDGE}"
	fi
	ip link set "${veth}" up
	ip -n "${ns}" link set lo up
	ip -n "${ns}" link set eth0 up
	[[ "$(ip -n "${ns}" -4 -o addr show dev eth0)" == *" ${LAB_PREFIX}.${n}/"* ]] ||
		ip -n "${ns}" addr add "${LAB_PREFIX}.${n}/24" dev eth0
	ip -n "${ns}" route replace default via "${LAB_PREFIX}.1"
}

# node_disk N: the node's credentials: the cluster's CA, the users whose
# kubeconfigs the node's programs use, and a kubelet certificate of its own.
node_disk() {
	local n="$1" root name u
	root="$(node_root "${n}")" name="$(node_name "${n}")"
	mkdir -p "${root}/pki" "${root}/logs" "${root}/pids" "${root}/manifests"
	chmod 0700 "${root}/pki"
	cp "${PKI}/ca.crt" "${root}/pki/"
	for u in admin multus whereabouts; do
		cp "${PKI}/${u}.crt" "${PKI}/${u}.key" "${root}/pki/"
		cp "${KUBE_DIR}/${u}.kubeconfig" "${root}/"
	done
	cp "${KUBE_DIR}/kubelet.kubeconfig" "${root}/"
	if [[ ! -f "${root}/pki/kubelet.crt" ]]; then
		openssl genrsa -out "${root}/pki/kubelet.key" 2048 2>/dev/null
		openssl req -new -key "${root}/pki/kubelet.key" -subj "/O=system:nodes/CN=system:node:${name}" \
			-out "${root}/pki/kubelet.csr" 2>/dev/null
		printf 'extendedKeyUsage=clientAuth\n' >"${root}/pki/kubelet.ext"
		openssl x509 -req -in "${root}/pki/kubelet.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
			-CAcreateserial -days 3650 -extfile "${root}/pki/kubelet.ext" -out "${root}/pki/kubelet.crt" 2>/dev/null
	fi
	echo containerd >"${root}/runtime"
}

# make_cgroup_root PATH: the kubelet wants its cgroupRoot to exist in every
# hierarchy; a new cpuset cgroup of cgroup v1 starts with no CPUs and no
# memory nodes, so it gets its parent's.
make_cgroup_root() {
	local h
	for h in /sys/fs/cgroup/*/; do
		mkdir -p "${h}${1#/}"
		if [[ -f "${h}cpuset.cpus" ]]; then
			cat "${h}cpuset.cpus" >"${h}${1#/}/cpuset.cpus"
			cat "${h}cpuset.mems" >"${h}${1#/}/cpuset.mems"
		fi
	done
}

# inside N: PID 1 of node N, in its namespaces: mounts, the node's own
# configuration, containerd, the relay to the API server, the kubelet;
# then it reaps orphans until killed.
inside() {
	local n="$1" root d
	root="$(node_root "${n}")"
	hostname "$(node_name "${n}")"
	# Each start of the node is a boot of its own: a fresh boot id, as the
	# kernel gives a machine that reboots (netns-pin tells records of an
	# earlier boot by it, the kubelet reports it as the node's bootID).
	cat /proc/sys/kernel/random/uuid >"${root}/boot_id"
	mount --bind "${root}/boot_id" /proc/sys/kernel/random/boot_id
	mount --bind "${root}" "${KUBE_DIR}"
	for d in /var/lib/kubelet /var/lib/cni /var/lib/netns-pin /var/log/pods /var/log/containers; do
		mkdir -p "${root}/fs${d}" "${d}"
		mount --bind "${root}/fs${d}" "${d}"
	done
	NODE_NAME="$(node_name "${n}")"
	POD_SUBNET="10.97.$((16 + n)).0/24"
	NODE_IP="${POD_SUBNET%.0/24}.1"
	KUBELET_IP="${LAB_PREFIX}.${n}"
	CGROUP_ROOT="/netns-pin-node-${n}"
	RUNTIME_SOCK="${CONTAINERD_SOCK}"
	NETNS_PIN_IMAGE="$(image_ref "${IMAGE_ARCHIVE}")"
	UPGRADE_FROM_ARCHIVE="$(upgrade_from_dir "$(upgrade_from_commit)")/netns-pin.oci.tar"
	rm -f "${KUBE_DIR}"/pids/*
	make_links
	write_containerd_config
	mount -t tmpfs -o mode=0711 tmpfs "${KUBE_DIR}/containerd/state"
	mount -t tmpfs -o mode=0711 tmpfs "${KUBE_DIR}/run"
	write_cni
	write_kubelet_config
	make_cgroup_root "${CGROUP_ROOT}"
	start netns-pin-api-proxy bash -c "exec -a netns-pin-api-proxy socat TCP-LISTEN:${API_PORT},bind=127.0.0.1,fork,reuseaddr TCP:${LAB_PREFIX}.1:${API_PORT}"
	start_containerd
	start_kubelet
	log "node ${NODE_NAME} Ready"
	echo ready >"${KUBE_DIR}/ready"
	trap 'exit 0' TERM
	while :; do
		sleep 3600 &
		wait || true
	done
}

node_up() {
	local n="$1" root name pid
	root="$(node_root "${n}")" name="$(node_name "${n}")"
	pid_of kube-apiserver >/dev/null || die "the cluster is not up: hack/kube/up.sh first"
	if pid="$(node_pid "${n}")"; then
		log "${name} runs (pid ${pid})"
		return 0
	fi
	host_links
	node_links "${n}"
	node_disk "${n}"
	rm -f "${root}/ready"
	local start
	start="$(now_ms)"
	setsid nsenter --net="/run/netns/$(node_netns "${n}")" \
		unshare --mount --pid --uts --fork --mount-proc --propagation private \
		bash "${BASH_SOURCE[0]}" inside "${n}" </dev/null >>"${root}/logs/node.log" 2>&1 &
	local outer=$!
	# unshare --fork: the node's PID 1 is the child of the process started
	wait_until 30 "${name}'s PID 1" pgrep -P "${outer}"
	pgrep -P "${outer}" >"${root}/node.pid"
	wait_until "${START_TIMEOUT}" "${name} up (log ${root}/logs/node.log)" test -f "${root}/ready"
	log "${name} Ready in $((($(now_ms) - start) / 1000)) s (pid $(cat "${root}/node.pid"))"
}

node_kill() {
	local pid
	pid="$(node_pid "$1")" || {
		log "$(node_name "$1") is not running"
		return 0
	}
	kill -KILL "${pid}"
	while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
	log "$(node_name "$1") killed (pid ${pid})"
}

# remove_cgroups N: the node's cgroups, deepest first (its processes are gone).
remove_cgroups() {
	local c
	for c in /sys/fs/cgroup/*/"netns-pin-node-$1" /sys/fs/cgroup/"netns-pin-node-$1"; do
		[[ -d "${c}" ]] || continue
		find "${c}" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}

node_down() {
	local n="$1"
	node_kill "${n}"
	remove_cgroups "${n}"
	ip link del "npkv${n}" 2>/dev/null || true
	ip netns del "$(node_netns "${n}")" 2>/dev/null || true
	rm -rf --one-file-system "$(node_root "${n}")"
	if pid_of kube-apiserver >/dev/null; then
		kubectl_ delete node "$(node_name "${n}")" --ignore-not-found --wait=false >/dev/null || true
	fi
	log "$(node_name "${n}") down"
}

node_main() {
	[[ "$(id -u)" == 0 ]] || die "run as root"
	local cmd="${1:-}"
	shift || true
	case "${cmd}" in
	up) check_n "${1:-}" && node_up "$1" ;;
	inside) check_n "${1:-}" && inside "$1" ;;
	kill) check_n "${1:-}" && node_kill "$1" ;;
	down) check_n "${1:-}" && node_down "$1" ;;
	link)
		check_n "${1:-}"
		[[ "${2:-}" == up || "${2:-}" == down ]] || die "link N up|down"
		ip link set "npkv$1" "$2"
		;;
	pid) check_n "${1:-}" && node_pid "$1" ;;
	exec)
		check_n "${1:-}"
		local pid n="$1"
		shift
		pid="$(node_pid "${n}")" || die "$(node_name "${n}") is not running"
		exec nsenter --target "${pid}" --net --mount --pid --uts -- "$@"
		;;
	*) die "usage: hack/kube/node.sh up|kill|down|pid N, link N up|down, exec N CMD..." ;;
	esac
}

node_main "$@"

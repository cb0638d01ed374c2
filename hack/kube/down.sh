#!/usr/bin/env bash
# hack/kube/down.sh (make kube-down) - stop the cluster of hack/kube/up.sh
# and put back what it and the kubelet changed on the host, also after a
# failed or interrupted run:
#   0. the extra nodes of hack/kube/node.sh, each killed and removed;
#   1. while the API server answers: delete the workloads (DaemonSets, then
#      pods, not waiting for holders that netns-pin keeps Terminating);
#   2. stop the kubelet, the scheduler, the controller manager, the API
#      server and etcd by their recorded PIDs (TERM, then KILL);
#   3. hack/runtime/teardown.sh on the run folder: sandboxes, containerd,
#      shims, every mount below the folder (pins included), the kubepods
#      cgroups, the folder itself;
#   4. the read-only bind of / that the agent reads on CRI-O, the host
#      links, the sysctls the kubelet set and the folders it made at fixed
#      places.
# The build cache (.cache/kube) stays; admin.kubeconfig and env go.
set -uo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FAILED=0

# stop NAME: TERM the recorded PID, KILL it after 15 s.
stop() {
	local pid deadline
	pid="$(pid_of "$1")" || return 0
	kill -TERM "${pid}" 2>/dev/null
	deadline=$(($(now_ms) + 15000))
	while kill -0 "${pid}" 2>/dev/null && (($(now_ms) < deadline)); do sleep 0.1; done
	if kill -0 "${pid}" 2>/dev/null; then
		log "$1 (pid ${pid}) ignored SIGTERM for 15 s: SIGKILL"
		kill -KILL "${pid}" 2>/dev/null
	fi
	log "stopped $1 (pid ${pid})"
	rm -f "${KUBE_DIR}/pids/$1"
}

delete_workloads() {
	pid_of kube-apiserver >/dev/null && [[ -x "${KUBECTL}" ]] || return 0
	local k=("${KUBECTL}" --kubeconfig "${KUBE_DIR}/admin.kubeconfig" --request-timeout=20s)
	"${k[@]}" delete daemonsets,deployments,replicasets,jobs --all --all-namespaces --wait=false >/dev/null 2>&1
	# The cluster goes with its etcd: no holder object needs to outlive its
	# pin any more, and the agent stops with the kubelet (its DaemonSet is
	# kept by the removal guard while holders carry the finalizer), so drop
	# the finalizer rather than wait.
	"${k[@]}" get pods --all-namespaces -o json 2>/dev/null |
		jq -r '.items[] | select((.metadata.finalizers // []) | index("netns-pin.io/pin")) | "\(.metadata.namespace) \(.metadata.name)"' |
		while read -r ns name; do
			"${k[@]}" -n "${ns}" patch pod "${name}" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
		done
	# a holder still in use stays Terminating: the forced teardown of its
	# sandbox below takes it down
	"${k[@]}" delete pods --all --all-namespaces --wait=true --timeout=30s >/dev/null 2>&1 ||
		log "pods left after 30 s: $("${k[@]}" get pods -A --no-headers 2>/dev/null | wc -l)"
}

restore_host() {
	local f="${KUBE_DIR}/host.orig" what a b
	[[ -f "${f}" ]] || return 0
	while read -r what a b; do
		case "${what}" in
		sysctl) sysctl -qw "${a}=${b}" || FAILED=1 ;;
		created) rm -rf --one-file-system "${a}" || FAILED=1 ;;
		propagation) mount --make-"${b}" "${a}" || FAILED=1 ;;
		esac
	done <"${f}"
}

# unregister_stores drops the node's stores from the host's registry of
# netns-pin stores, as netns-pinctl uninstall does for the store it removes.
unregister_stores() {
	local f
	for f in /var/lib/netns-pin/stores/*.json; do
		[[ -f "${f}" ]] || continue
		[[ "$(jq -r .stateDir "${f}" 2>/dev/null)" != "${KUBE_DIR}"/* ]] || rm -f "${f}" || FAILED=1
	done
}

delete_links() {
	local l
	for l in "${BRIDGE}" "${STORAGE_MASTER}" npklab0; do
		if ip link show "${l}" >/dev/null 2>&1; then
			ip link del "${l}" || FAILED=1
		fi
	done
}

main() {
	local start
	start="$(now_ms)"
	[[ "$(id -u)" == 0 ]] || die "run as root"
	if [[ ! -d "${KUBE_DIR}" ]]; then
		log "${KUBE_DIR}: nothing to tear down"
		delete_links
		exit "${FAILED}"
	fi
	local d
	for d in "${KUBE_DIR}"-node[2-9]; do
		[[ -d "${d}" ]] || continue
		bash "${ROOT}/hack/kube/node.sh" down "${d##*-node}" || FAILED=1
	done
	delete_workloads
	local c
	for c in netns-pin-api-relay kubelet kube-scheduler kube-controller-manager kube-apiserver etcd registry; do stop "${c}"; done
	# teardown.sh removes the folder; keep what step 4 needs
	cp "${KUBE_DIR}/host.orig" "${KUBE_CACHE}/.host.orig" 2>/dev/null
	KEEP_DIR=0 bash "${ROOT}/hack/runtime/teardown.sh" "${KUBE_DIR}" || FAILED=1
	if mountpoint -q "${HOST_ROOT_BIND}"; then umount -l "${HOST_ROOT_BIND}" || FAILED=1; fi
	if [[ -d "${HOST_ROOT_BIND}" ]]; then rmdir "${HOST_ROOT_BIND}" || FAILED=1; fi
	mkdir -p "${KUBE_DIR}"
	mv "${KUBE_CACHE}/.host.orig" "${KUBE_DIR}/host.orig" 2>/dev/null
	restore_host
	unregister_stores
	rm -rf "${KUBE_DIR}"
	delete_links
	rm -f "${ADMIN_KUBECONFIG}" "${KUBE_CACHE}/env"
	log "down in $((($(now_ms) - start) / 1000)) s$( ((FAILED)) && echo ' (with errors)')"
	exit "${FAILED}"
}

main "$@"

#!/usr/bin/env bash
# hack/runtime/teardown.sh <dir> - undo hack/runtime/setup.sh <dir>, also after
# a failed or interrupted run:
#   1. while containerd answers: stop and remove every pod sandbox (a holder
#      whose DEL netns-pin refuses stays; step 4 takes its netns down),
#      noting each sandbox's netns path in <dir>/netns.list;
#   2. stop the suite's kube-apiserver and etcd (<dir>/kube-api/*.pid), and
#      the runtime by the PID in <dir>/containerd.pid or <dir>/crio.pid
#      (TERM, then KILL);
#   3. kill what is left of the shims and sandbox processes, by the PIDs in
#      containerd's state folder (CRI-O's: the conmon and container pid
#      files in its runroot), checking each is what it should be;
#   4. unmount everything under <dir> (pins, rootfs, shm) and the sandbox
#      netns mounts listed in <dir>/netns.list; remove the cgroups made for
#      the pods ($CGROUP_PARENT), containerd's CNI result cache entries and
#      the host links named in <dir>/links.list;
#   5. remove <dir> (kept with KEEP_DIR=1), refusing while a mount is left.
# Exits non-zero when something could not be undone, after trying the rest.
set -uo pipefail

LOG_PREFIX="runtime-teardown"
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

[[ $# -eq 1 ]] || {
	echo "usage: $0 <dir>" >&2
	exit 2
}
[[ -d "$1" ]] || {
	log "$1: nothing to tear down"
	exit 0
}
DIR="$(cd "$1" && pwd)"
[[ "${DIR}" != / ]] || exit 2
START="$(now_ms)"
FAILED=0
CRICTL="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cache/runtime/bin/crictl"
CGROUP_PARENT=""
if [[ -f "${DIR}/env" ]]; then
	# shellcheck disable=SC1091
	source "${DIR}/env"
fi
SOCK="${DIR}/run/containerd.sock"
PIDFILE="${DIR}/containerd.pid"
EXE=containerd
if [[ -f "${DIR}/crio.pid" ]]; then
	SOCK="${DIR}/run/crio.sock"
	PIDFILE="${DIR}/crio.pid"
	EXE=crio
fi

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# wait_gone PID MS: poll until PID is gone or MS pass.
wait_gone() {
	local deadline=$(($(now_ms) + $2))
	while alive "$1"; do
		(($(now_ms) < deadline)) || return 1
		sleep 0.05
	done
}

crictl_() { timeout 90 "${CRICTL}" --config "${DIR}/crictl.yaml" "$@"; }

cpid=""
[[ -f "${PIDFILE}" ]] && cpid="$(cat "${PIDFILE}")"
if alive "${cpid}" && [[ "$(readlink "/proc/${cpid}/exe")" != */"${EXE}" ]]; then
	log "pid ${cpid} from ${PIDFILE} is not ${EXE} any more; not touching it"
	cpid=""
fi

# 1. sandboxes
if alive "${cpid}" && [[ -x "${CRICTL}" ]] && [[ -S "${SOCK}" ]]; then
	for id in $(crictl_ pods -q 2>/dev/null); do
		ns="$(crictl_ inspectp -o json "${id}" 2>/dev/null |
			jq -r '.info.runtimeSpec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null)"
		[[ -n "${ns}" ]] && echo "${ns}" >>"${DIR}/netns.list"
		echo "${id}" >>"${DIR}/sandboxes.list"
		if ! out="$(crictl_ stopp "${id}" 2>&1)"; then
			log "stopp ${id} failed (left for the forced cleanup): ${out}"
			continue
		fi
		crictl_ rmp -f "${id}" >/dev/null 2>&1 || log "rmp ${id} failed"
	done
fi

# 2. the suite's kube-apiserver and etcd (test/runtime starts them with
# their PIDs in <dir>/kube-api/), when their test process died first
for f in "${DIR}"/kube-api/kube-apiserver.pid "${DIR}"/kube-api/etcd.pid; do
	[[ -f "${f}" ]] || continue
	pid="$(cat "${f}")"
	alive "${pid}" || continue
	[[ "$(readlink "/proc/${pid}/exe")" == */"$(basename "${f}" .pid)" ]] || continue
	kill -TERM "${pid}"
	wait_gone "${pid}" 10000 || kill -KILL "${pid}"
done

# the runtime
if alive "${cpid}"; then
	kill -TERM "${cpid}"
	if ! wait_gone "${cpid}" 10000; then
		log "${EXE} ${cpid} ignored SIGTERM for 10s: SIGKILL"
		kill -KILL "${cpid}"
		wait_gone "${cpid}" 5000 || {
			log "${EXE} ${cpid} does not die"
			FAILED=1
		}
	fi
fi

# 3. shims and sandbox processes, by their pid files
tasks="${DIR}/containerd/state/io.containerd.runtime.v2.task"
if [[ -d "${tasks}" ]]; then
	for d in "${tasks}"/*/*/; do
		[[ -d "${d}" ]] || continue
		id="$(basename "${d}")"
		echo "${id}" >>"${DIR}/sandboxes.list"
		for f in init.pid shim.pid; do
			[[ -f "${d}${f}" ]] || continue
			pid="$(cat "${d}${f}")"
			alive "${pid}" || continue
			case "${f}" in
			shim.pid) grep -qa -- "${id}" "/proc/${pid}/cmdline" || continue ;;
			# the sandbox process: its cgroup names the container id
			init.pid) grep -q -- "${id}" "/proc/${pid}/cgroup" || continue ;;
			esac
			kill -KILL "${pid}" 2>/dev/null
			wait_gone "${pid}" 5000 || {
				log "pid ${pid} (${f} of ${id}) does not die"
				FAILED=1
			}
		done
	done
fi

# CRI-O: conmon and the container's first process of each container
# (sandboxes' infra containers among them), by the pid files in its runroot
for d in "${DIR}"/crio/runroot/*-containers/*/userdata/; do
	[[ -d "${d}" ]] || continue
	id="$(basename "$(dirname "${d}")")"
	echo "${id}" >>"${DIR}/sandboxes.list"
	for f in pidfile conmon-pid; do
		[[ -f "${d}${f}" ]] || continue
		pid="$(cat "${d}${f}")"
		alive "${pid}" || continue
		case "${f}" in
		conmon-pid) grep -qa -- "${id}" "/proc/${pid}/cmdline" || continue ;;
		pidfile) grep -q -- "${id}" "/proc/${pid}/cgroup" || continue ;;
		esac
		kill -KILL "${pid}" 2>/dev/null
		wait_gone "${pid}" 5000 || {
			log "pid ${pid} (${f} of ${id}) does not die"
			FAILED=1
		}
	done
done

# 4. mounts under <dir>, deepest first, then the sandboxes' netns mounts
mapfile -t mounts < <(findmnt -rn -o TARGET | awk -v d="${DIR}/" 'index($0, d) == 1' | sort -r)
for m in "${mounts[@]}"; do
	umount -l "${m}" 2>/dev/null || umount -l "$(printf '%b' "${m}")" 2>/dev/null || {
		log "umount ${m} failed"
		FAILED=1
	}
done
if [[ -f "${DIR}/netns.list" ]]; then
	sort -u "${DIR}/netns.list" | while read -r ns; do
		case "${ns}" in
		/var/run/netns/* | /run/netns/*) ;;
		*) continue ;;
		esac
		if mountpoint -q "${ns}" 2>/dev/null; then
			umount -l "${ns}" || {
				log "umount ${ns} failed"
				FAILED=1
			}
		fi
		rm -f "${ns}"
	done
fi
# host links the suite made (test/runtime writes their names); only names
# with the suite's prefix, deleting a veth end takes its peer along
if [[ -f "${DIR}/links.list" ]]; then
	while read -r l; do
		[[ "${l}" == nprt* ]] || continue
		if ip link show "${l}" >/dev/null 2>&1; then
			ip link del "${l}" || {
				log "ip link del ${l} failed"
				FAILED=1
			}
		fi
	done <"${DIR}/links.list"
fi
if [[ -n "${CGROUP_PARENT}" ]]; then
	for root in /sys/fs/cgroup /sys/fs/cgroup/*/; do
		cg="${root%/}${CGROUP_PARENT}"
		[[ -d "${cg}" ]] || continue
		# deepest first; a cgroup folder goes with rmdir only
		find "${cg}" -depth -type d -exec rmdir {} \; 2>/dev/null
		[[ -d "${cg}" ]] && {
			log "cgroup ${cg} is still there"
			FAILED=1
		}
	done
fi
if [[ -f "${DIR}/sandboxes.list" ]]; then
	sort -u "${DIR}/sandboxes.list" | while read -r id; do
		[[ ${#id} -ge 12 ]] && rm -f /var/lib/cni/results/*-"${id}"-* 2>/dev/null
	done
fi

# 5. the folder
if [[ "${KEEP_DIR:-0}" != 1 ]]; then
	if findmnt -rn -o TARGET | awk -v d="${DIR}" 'index($0, d) == 1' | grep -q .; then
		log "mounts are left under ${DIR}; not removing it"
		FAILED=1
	else
		rm -rf "${DIR}"
	fi
fi
log "done in $(($(now_ms) - START)) ms$( ((FAILED)) && echo ' (with errors)')"
exit "${FAILED}"

#!/usr/bin/env bash
# hack/ceph/down.sh [--keep-dir] <dir> - tear down the cluster that up.sh made in <dir>.
#
# Idempotent and safe to run on a half-made cluster. In this order:
#   1. unmounts the ceph-fuse mounts of this cluster (mounts under <dir>, and
#      the mountpoints of every ceph-fuse whose command line names <dir>),
#      then ends the remaining Ceph client processes of this cluster;
#   2. stops mds, osd, mgr, mon by their recorded PIDs: SIGTERM, SIGKILL
#      after 1 s for the mds (it waits ~7 s for a last beacon ack), 5 s for
#      the others; a PID whose command line does not name <dir> is left alone;
#   3. deletes the daemons' veth, netns and bridge;
#   4. removes <dir> (only when it carries up.sh's marker; --keep-dir keeps it,
#      e.g. to read the logs).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/ceph/lib.sh
. "${HERE}/lib.sh"

KEEP=0
if [[ "${1:-}" == --keep-dir ]]; then
	KEEP=1
	shift
fi
[[ $# -eq 1 ]] || {
	echo "usage: $0 [--keep-dir] <dir>" >&2
	exit 2
}
[[ "$(id -u)" == 0 ]] || die "needs root"
DIR="$(abs_dir "$1")"
START_MS="$(now_ms)"

if [[ ! -e "${DIR}" ]]; then
	clog "${DIR} does not exist: nothing to do"
	exit 0
fi
if [[ ! -e "${DIR}/.netns-pin-ceph" ]]; then
	die "${DIR} is not a cluster folder made by hack/ceph/up.sh (no .netns-pin-ceph marker): not touching it"
fi
load_state "${DIR}"

# cluster_clients: PIDs of Ceph client processes (ceph-fuse, rados, ceph, ...)
# of this cluster, i.e. whose command line names <dir>, except the daemons.
cluster_clients() {
	local p comm daemons=" ${PID_mon_a:-} ${PID_mgr_x:-} ${PID_osd_0:-} ${PID_mds_a:-} "
	for p in /proc/[0-9]*; do
		p="${p#/proc/}"
		[[ "${daemons}" == *" ${p} "* || "${p}" == "$$" ]] && continue
		read -r comm 2>/dev/null <"/proc/${p}/comm" || continue
		[[ "${comm}" == ceph* || "${comm}" == rados* || "${comm}" == rbd* ]] || continue
		pid_alive "${p}" "${DIR}" && printf '%s\n' "${p}"
	done
	return 0
}

# fuse_mountpoint <pid>: the mountpoint argument of a ceph-fuse command line.
fuse_mountpoint() {
	local -a argv
	mapfile -d '' -t argv < <(timeout -s KILL 2 cat "/proc/$1/cmdline" 2>/dev/null)
	local i=1 a
	while ((i < ${#argv[@]})); do
		a="${argv[i]}"
		case "${a}" in
		--) printf '%s\n' "${argv[i + 1]:-}" && return 0 ;;
		-f | -d | -s | --foreground | --debug) ;;
		--*=*) ;;
		-*) i=$((i + 1)) ;; # an option with a value
		*) printf '%s\n' "${a}" && return 0 ;;
		esac
		i=$((i + 1))
	done
}

# mountinfo_has <path>: a mount exists at exactly <path>.
mountinfo_has() { awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }

# 1. clients: umount first, then whatever is left.
mounts=()
while read -r mp; do mounts+=("${mp}"); done < <(
	awk -v d="${DIR}" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo
	for p in $(cluster_clients); do
		[[ "$(cat "/proc/${p}/comm" 2>/dev/null)" == ceph-fuse ]] && fuse_mountpoint "${p}"
	done
)
for mp in "${mounts[@]}"; do
	[[ -n "${mp}" ]] && mountinfo_has "${mp}" || continue
	umount_fuse "${mp}" 10
	clog "unmounted ${mp}"
done
for p in $(cluster_clients); do
	stop_pid "client $(cat "/proc/${p}/comm" 2>/dev/null)" "${p}" "${DIR}" 2
done

# 2. daemons, in the order mds, osd, mgr, mon.
for d in mds_a osd_0 mgr_x mon_a; do
	v="PID_${d}"
	if [[ -n "${!v:-}" ]] && pid_alive "${!v}" "${DIR}"; then
		t0="$(now_ms)"
		# the mds waits for a last beacon ack before it exits on SIGTERM
		# (~7 s): its data goes with <dir>, so do not wait for it long
		grace=5
		[[ "${d}" == mds_a ]] && grace=1
		stop_pid "${d/_/.}" "${!v}" "${DIR}" "${grace}"
		clog "stopped ${d/_/.} (pid ${!v}) in $(($(now_ms) - t0)) ms"
	fi
done

# 3. network: anything else still in the daemons' netns is ours (e.g. a stuck CLI).
if [[ -n "${CEPH_NETNS:-}" && -e "/run/netns/${CEPH_NETNS}" ]]; then
	for p in /proc/[0-9]*; do
		p="${p#/proc/}"
		[[ "/proc/${p}/ns/net" -ef "/run/netns/${CEPH_NETNS}" ]] 2>/dev/null || continue
		if pid_alive "${p}" "${DIR}"; then
			stop_pid "process $(cat "/proc/${p}/comm" 2>/dev/null)" "${p}" "${DIR}" 5
		else
			clog "warning: pid ${p} ($(cat "/proc/${p}/comm" 2>/dev/null)) is in netns ${CEPH_NETNS} but is not ours: left alone"
		fi
	done
fi
# Delete the veth explicitly: the daemons' closed TCP connections to a client
# that vanished (FIN_WAIT/LAST_ACK, retransmitting) keep their netns alive,
# without a name, for minutes after `ip netns del`; its links would stay.
if [[ -n "${VETH_HOST:-}" ]] && ip link show "${VETH_HOST}" >/dev/null 2>&1; then
	ip link del "${VETH_HOST}"
fi
if [[ -n "${CEPH_NETNS:-}" && -e "/run/netns/${CEPH_NETNS}" ]]; then
	ip netns del "${CEPH_NETNS}"
	clog "deleted netns ${CEPH_NETNS} and veth ${VETH_HOST:-}"
fi
if [[ -n "${CEPH_BRIDGE:-}" ]] && ip link show "${CEPH_BRIDGE}" >/dev/null 2>&1; then
	ip link del "${CEPH_BRIDGE}"
	clog "deleted bridge ${CEPH_BRIDGE}"
fi

# 4. the folder (never across a mount).
while read -r mp; do
	umount -l "${mp}" 2>/dev/null || true
done < <(awk -v d="${DIR}" 'index($5, d "/") == 1 { print length($5) " " $5 }' /proc/self/mountinfo | sort -rn | cut -d' ' -f2-)
if ((KEEP)); then
	rm -f "${DIR}/env"
	clog "kept ${DIR} (logs in ${DIR}/log)"
else
	rm -rf "${DIR}"
fi
end="$(now_ms)"
clog "down in $(((end - START_MS) / 1000)).$(((end - START_MS) % 1000 / 100))s"

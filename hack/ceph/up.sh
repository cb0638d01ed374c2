#!/usr/bin/env bash
# hack/ceph/up.sh <dir> - a real one-node Ceph cluster for netns-pin's tests.
# hack/ceph/up.sh --packages - only step 1 (e.g. in CI's package phase).
#
# Needs root. Idempotent: a cluster already up in <dir> is left as it is; a
# broken or half-made one is torn down (hack/ceph/down.sh) and made again.
#
#   1. Installs Debian's ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse
#      ceph-common (16.2.x) when one is missing (apt-get update first, then).
#   2. Makes a network namespace "npceph-<id>" for the daemons, attached by a
#      veth to a new host bridge "npcbr<id>" (no address on the host side):
#      the daemons listen on ${CEPH_SUBNET_PREFIX}.10 (default 10.96.0.10/24).
#      Put a client netns on that bridge with an address in the same /24, as
#      the CNI bridge plugin does, to reach the cluster.
#   3. Bootstraps mon.a, mgr.x, osd.0 (memstore of CEPH_MEMSTORE_MB), mds.a in
#      that netns, msgr2 only, cephx, pool size 1; every data, run, log and
#      admin-socket path under <dir>. Daemons run in the foreground, started
#      by hand (no systemd); their PIDs go to <dir>/state.
#   4. Creates the CephFS volume "cephfs", a pool "bench" (for rados bench) and
#      the client key client.netnspin (CephFS rw, pool bench rw).
#   5. Writes <dir>/env (sourceable): CEPH_CONF, CEPH_KEYRING, CEPH_CLIENT,
#      CEPH_FS, CEPH_POOL, CEPH_NETNS, CEPH_BRIDGE, CEPH_SUBNET, CEPH_MON_IP,
#      CEPH_CLIENT_RANGE_START/END (free addresses on the bridge for clients),
#      CEPH_FSID, CEPH_MEMSTORE_BYTES.
#
# The `ceph` CLI reaches the cluster only from a netns on the bridge, e.g.
#   nsenter --net=/run/netns/$CEPH_NETNS ceph -c $CEPH_CONF -s
#
# Environment: CEPH_SUBNET_PREFIX (default 10.96.0: a /24 used only inside
# namespaces made here and by the tests), CEPH_MEMSTORE_MB (default 2048),
# CEPH_IPV6_PREFIX (e.g. fd96:0:0:1; unset by default): an IPv6-only
# cluster instead, on <prefix>::/64 (ms_bind_ipv6), mon on <prefix>::10,
# clients <prefix>::100-<prefix>::199; CEPH_MON_IP is then the bare IPv6
# address (write it "[<ip>]:3300" in a monitor address).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/ceph/lib.sh
. "${HERE}/lib.sh"

[[ $# -eq 1 ]] || {
	echo "usage: $0 <dir> | --packages" >&2
	exit 2
}
[[ "$(id -u)" == 0 ]] || die "needs root (network namespaces, bridges, daemons)"
PACKAGES_ONLY=0
if [[ "$1" == --packages ]]; then
	PACKAGES_ONLY=1
else
	DIR="$(abs_dir "$1")"
fi
START_MS="$(now_ms)"
PREFIX="${CEPH_SUBNET_PREFIX:-10.96.0}"
MEMSTORE_MB="${CEPH_MEMSTORE_MB:-2048}"
[[ "${PREFIX}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "CEPH_SUBNET_PREFIX=${PREFIX}: want three octets, e.g. 10.96.0"
PREFIX6="${CEPH_IPV6_PREFIX:-}"
[[ -z "${PREFIX6}" || "${PREFIX6}" =~ ^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){3}$ ]] || die "CEPH_IPV6_PREFIX=${PREFIX6}: want four groups, e.g. fd96:0:0:1"
[[ "${MEMSTORE_MB}" =~ ^[0-9]+$ ]] || die "CEPH_MEMSTORE_MB=${MEMSTORE_MB}: want a number of MiB"

export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH}"

# --- 1. packages ---------------------------------------------------------------
ensure_packages() {
	local missing=() p
	for p in "${CEPH_PACKAGES[@]}"; do
		if [[ "$(dpkg-query -W -f='${db:Status-Status}' "${p}" 2>/dev/null)" != installed ]]; then
			missing+=("${p}")
		fi
	done
	for p in ip:iproute2 nsenter:util-linux setsid:util-linux; do
		command -v "${p%%:*}" >/dev/null 2>&1 || missing+=("${p#*:}")
	done
	((${#missing[@]})) || return 0
	local t0
	t0="$(now_ms)"
	clog "installing Debian packages: ${missing[*]}"
	apt-get update -qq </dev/null >/dev/null
	apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
	clog "packages installed in $((($(now_ms) - t0) / 1000))s ($(dpkg-query -W -f='${Version}' ceph-mon))"
}

# ceph_cli ARGS...: the ceph CLI as admin, from inside the daemons' netns.
ceph_cli() {
	timeout 60 nsenter --net="/run/netns/${CEPH_NETNS}" \
		ceph -c "${DIR}/ceph.conf" --connect-timeout 15 "$@"
}

# cli_quiet ARGS...: ceph_cli, output shown only when it fails.
cli_quiet() {
	local out
	if ! out="$(ceph_cli "$@" 2>&1)"; then
		clog "ceph $* failed:"
		printf '%s\n' "${out}" >&2
		return 1
	fi
}

# poll <seconds> <what> CMD...: run CMD until it succeeds or the deadline passes.
poll() {
	local secs="$1" what="$2" deadline out=
	shift 2
	deadline=$(($(now_ms) + secs * 1000))
	until out="$("$@" 2>&1)"; do
		daemons_alive || return 1
		if (($(now_ms) > deadline)); then
			clog "timed out after ${secs}s waiting for ${what}; last output:"
			printf '%s\n' "${out}" | tail -n 5 >&2
			return 1
		fi
		sleep 0.2
	done
}

# daemons_alive: every daemon started so far still runs (else say which died).
daemons_alive() {
	local n v
	for n in mon_a mgr_x osd_0 mds_a; do
		v="PID_${n}"
		[[ -n "${!v:-}" ]] || continue
		if ! pid_alive "${!v}" "${DIR}"; then
			clog "${n/_/.} (pid ${!v}) exited; last lines of ${DIR}/log/${n/_/.}.out and ceph-${n/_/.}.log:"
			tail -n 5 "${DIR}/log/${n/_/.}.out" "${DIR}/log/ceph-${n/_/.}.log" >&2 2>/dev/null || true
			return 1
		fi
	done
}

# start_daemon <name> <binary> ARGS...: run in the foreground inside the
# daemons' netns, detached from this shell, output to log/<name>.out.
start_daemon() {
	local name="$1" bin="$2" pid
	shift 2
	setsid nsenter --net="/run/netns/${CEPH_NETNS}" -- "${bin}" -f -c "${DIR}/ceph.conf" "$@" \
		</dev/null >>"${DIR}/log/${name}.out" 2>&1 &
	pid=$!
	# setsid and nsenter exec (neither forks here), so $! is the daemon.
	state_set "${DIR}" "PID_${name//./_}" "${pid}"
	printf -v "PID_${name//./_}" '%s' "${pid}"
	clog "started ${name} (pid ${pid})"
}

is_up() {
	[[ -f "${DIR}/env" ]] || return 1
	load_state "${DIR}"
	local n
	for n in mon_a mgr_x osd_0 mds_a; do
		local v="PID_${n}"
		pid_alive "${!v:-}" "${DIR}" || return 1
	done
	[[ -e "/run/netns/${CEPH_NETNS:-}" ]] || return 1
	ceph_cli health >/dev/null 2>&1
}

if ((PACKAGES_ONLY)); then
	ensure_packages
	exit 0
fi
if is_up; then
	clog "cluster in ${DIR} is already up"
	exit 0
fi
if [[ -e "${DIR}/.netns-pin-ceph" ]]; then
	clog "cluster in ${DIR} is not healthy: tearing it down first"
	"${HERE}/down.sh" "${DIR}"
fi

ensure_packages
for b in ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph ceph-authtool monmaptool rados; do
	command -v "${b}" >/dev/null || die "${b} not found after installing ${CEPH_PACKAGES[*]}"
done

BOOT_MS="$(now_ms)"
if [[ -e "${DIR}" ]] && [[ -n "$(ls -A "${DIR}")" ]]; then
	die "${DIR} exists and is not empty (and is not a cluster folder of this script)"
fi
mkdir -p "${DIR}"/{run,log,crash,mon/ceph-a,mgr/ceph-x,osd/ceph-0,mds/ceph-a}
chmod 0700 "${DIR}"
: >"${DIR}/.netns-pin-ceph"
: >"${DIR}/state"
trap 'clog "failed at line ${LINENO}: ${BASH_COMMAND}"' ERR
trap 'rc=$?; if ((rc)); then clog "up failed (exit ${rc}); logs in ${DIR}/log; tearing down"; "${HERE}/down.sh" --keep-dir "${DIR}" || true; fi' EXIT

# --- 2. network ----------------------------------------------------------------
ID="$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
CEPH_NETNS="npceph-${ID}"
CEPH_BRIDGE="npcbr${ID}"
VETH_HOST="npcv${ID}h"
VETH_PEER="npcv${ID}p"
MON_IP="${PREFIX}.10" MON_ADDR="${PREFIX}.10" PLEN=24 SUBNET="${PREFIX}.0/24"
RANGE_START="${PREFIX}.100" RANGE_END="${PREFIX}.199" BIND="ms_bind_ipv4 = true"
if [[ -n "${PREFIX6}" ]]; then
	MON_IP="${PREFIX6}::10" MON_ADDR="[${PREFIX6}::10]" PLEN=64 SUBNET="${PREFIX6}::/64"
	RANGE_START="${PREFIX6}::100" RANGE_END="${PREFIX6}::199"
	BIND=$'ms_bind_ipv4 = false\nms_bind_ipv6 = true'
fi
state_set "${DIR}" CEPH_NETNS "${CEPH_NETNS}"
state_set "${DIR}" CEPH_BRIDGE "${CEPH_BRIDGE}"
state_set "${DIR}" VETH_HOST "${VETH_HOST}"

ip netns add "${CEPH_NETNS}"
ip link add "${CEPH_BRIDGE}" type bridge
# a fixed MAC: the bridge plugin's CHECK compares it with the ADD result
ip link set "${CEPH_BRIDGE}" address "02:00:$(od -An -N4 -tx1 /dev/urandom | tr -s ' ' ':' | sed 's/^://')" up
ip link add "${VETH_HOST}" type veth peer name "${VETH_PEER}"
ip link set "${VETH_PEER}" netns "${CEPH_NETNS}"
ip link set "${VETH_HOST}" master "${CEPH_BRIDGE}" up
ip -n "${CEPH_NETNS}" link set lo up
ip -n "${CEPH_NETNS}" link set "${VETH_PEER}" name eth0
# (nodad: the address is usable at once; nothing else on the bridge has it)
ip -n "${CEPH_NETNS}" addr add "${MON_IP}/${PLEN}" dev eth0 $([[ -z "${PREFIX6}" ]] || echo nodad)
ip -n "${CEPH_NETNS}" link set eth0 up
clog "netns ${CEPH_NETNS} (${MON_IP}/${PLEN}) on bridge ${CEPH_BRIDGE}"

# --- 3. configuration and keys -------------------------------------------------
FSID="$(cat /proc/sys/kernel/random/uuid)"
MEMSTORE_BYTES=$((MEMSTORE_MB * 1024 * 1024))
cat >"${DIR}/ceph.conf" <<EOF
# Written by hack/ceph/up.sh: a throwaway one-node cluster for tests.
[global]
fsid = ${FSID}
mon_initial_members = a
mon_host = [v2:${MON_ADDR}:3300]
public_network = ${SUBNET}
${BIND}
ms_bind_msgr1 = false
ms_bind_msgr2 = true
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
keyring = ${DIR}/\$cluster.\$name.keyring
run_dir = ${DIR}/run
admin_socket = ${DIR}/run/\$cluster-\$name.asok
pid_file = ${DIR}/run/\$cluster-\$name.pid
log_file = ${DIR}/log/\$cluster-\$name.log
crash_dir = ${DIR}/crash
mon_cluster_log_file = ${DIR}/log/\$cluster.log
mon_data = ${DIR}/mon/\$cluster-\$id
mgr_data = ${DIR}/mgr/\$cluster-\$id
osd_data = ${DIR}/osd/\$cluster-\$id
mds_data = ${DIR}/mds/\$cluster-\$id
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
mon_data_avail_warn = 5
mon_data_avail_crit = 1
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mgr_initial_modules = iostat
mgr_module_path = ${DIR}/mgr-modules
# a small cluster that comes up in seconds: short beacon, tick, report and
# proposal intervals
mds_beacon_interval = 1
mon_tick_interval = 1
paxos_propose_interval = 0.1
mgr_stats_period = 1
mon_mgr_digest_period = 1
osd_mon_report_interval = 1

[mon]
keyring = \$mon_data/keyring

[mgr]
keyring = \$mgr_data/keyring

[osd]
keyring = \$osd_data/keyring
osd_objectstore = memstore
memstore_device_bytes = ${MEMSTORE_BYTES}

[mds]
keyring = \$mds_data/keyring

[client]
# clients (ceph-fuse, rados, ceph) of several processes at once
admin_socket = ${DIR}/run/\$cluster-\$name.\$pid.asok
log_file = ${DIR}/log/\$cluster-\$name.\$pid.log
client_mount_timeout = 30
EOF

# The mgr imports every Python module it finds (~25: seconds of CPU on a small
# machine). Offer it only the always-on ones (volumes serves CephFS) and
# iostat (mgr_initial_modules).
mkdir -p "${DIR}/mgr-modules"
for m in mgr_module.py mgr_util.py balancer crash devicehealth orchestrator pg_autoscaler \
	progress rbd_support status telemetry volumes iostat; do
	ln -s "/usr/share/ceph/mgr/${m}" "${DIR}/mgr-modules/${m}"
done

auth() { ceph-authtool "$@" >/dev/null; }
auth --create-keyring "${DIR}/mon.keyring" --gen-key -n mon. --cap mon 'allow *'
auth --create-keyring "${DIR}/ceph.client.admin.keyring" --gen-key -n client.admin \
	--cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *'
auth --create-keyring "${DIR}/mgr/ceph-x/keyring" --gen-key -n mgr.x \
	--cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *'
auth --create-keyring "${DIR}/mds/ceph-a/keyring" --gen-key -n mds.a \
	--cap mon 'allow profile mds' --cap osd 'allow *' --cap mds 'allow' --cap mgr 'allow profile mds'
for k in ceph.client.admin.keyring mgr/ceph-x/keyring mds/ceph-a/keyring; do
	auth "${DIR}/mon.keyring" --import-keyring "${DIR}/${k}"
done
monmaptool --create --clobber --fsid "${FSID}" --addv a "[v2:${MON_ADDR}:3300]" "${DIR}/monmap" >/dev/null
in_netns() { nsenter --net="/run/netns/${CEPH_NETNS}" -- "$@"; }
# (mkfs picks the address in public_network: run it in the netns too)
in_netns ceph-mon -c "${DIR}/ceph.conf" --mkfs -i a --monmap "${DIR}/monmap" --keyring "${DIR}/mon.keyring" \
	>>"${DIR}/log/mkfs.out" 2>&1
rm -f "${DIR}/mon.keyring" "${DIR}/monmap"

# --- 4. daemons ----------------------------------------------------------------
start_daemon mon.a ceph-mon -i a
poll 30 "mon.a" ceph_cli mon stat
start_daemon mgr.x ceph-mgr -i x

# OSD: key made here and registered with `ceph auth add` before --mkfs.
OSD_UUID="$(cat /proc/sys/kernel/random/uuid)"
auth --create-keyring "${DIR}/osd/ceph-0/keyring" --gen-key -n osd.0
cli_quiet auth add osd.0 osd 'allow *' mon 'allow profile osd' mgr 'allow profile osd' \
	-i "${DIR}/osd/ceph-0/keyring"
osd_id="$(ceph_cli osd create "${OSD_UUID}" 2>/dev/null)"
[[ "${osd_id}" == 0 ]] || die "ceph osd create returned '${osd_id}', want 0"
in_netns ceph-osd -c "${DIR}/ceph.conf" -i 0 --mkfs --osd-uuid "${OSD_UUID}" >>"${DIR}/log/mkfs.out" 2>&1
start_daemon osd.0 ceph-osd -i 0
start_daemon mds.a ceph-mds -i a

# --- 5. CephFS, pool, client key ------------------------------------------------
# `fs volume create` is served by the mgr's volumes module: retry until the mgr
# is active and the module answers.
poll 90 "mgr volumes module (ceph fs volume create cephfs)" ceph_cli fs volume create cephfs
clog "CephFS volume cephfs created"
cli_quiet osd pool create bench 8 8
cli_quiet osd pool application enable bench rados
cli_quiet auth get-or-create "client.${CEPH_CLIENT_NAME}" \
	mon 'allow r' mgr 'allow r' mds 'allow rw' \
	osd 'allow rw tag cephfs data=cephfs, allow rw pool=bench' \
	-o "${DIR}/ceph.client.${CEPH_CLIENT_NAME}.keyring"

# ready: osd.0 up and in, mds.a up:active, every placement group active+clean
# (one `ceph status` per try: each CLI call costs ~0.5 s of CPU here).
ready() {
	ceph_cli status --format json | python3 -c '
import json, sys
s = json.load(sys.stdin)
osd = s["osdmap"]
mds = [m["status"] for m in s["fsmap"].get("by_rank", [])]
pgs = s["pgmap"]
clean = sum(p["count"] for p in pgs.get("pgs_by_state", []) if p["state_name"] == "active+clean")
why = []
if osd["num_up_osds"] < 1 or osd["num_in_osds"] < 1: why.append("osd.0 not up and in")
if mds != ["up:active"]: why.append("mds ranks %s" % mds)
if pgs["num_pgs"] == 0 or clean != pgs["num_pgs"]: why.append("%d of %d pgs active+clean" % (clean, pgs["num_pgs"]))
if why: sys.exit("; ".join(why))
'
}
poll 90 "osd.0 up, mds.a up:active, all placement groups active+clean" ready

# --- 6. env --------------------------------------------------------------------
cat >"${DIR}/env.tmp" <<EOF
# Written by hack/ceph/up.sh for the cluster in ${DIR}; sourceable.
CEPH_DIR=${DIR}
CEPH_CONF=${DIR}/ceph.conf
CEPH_CLIENT=client.${CEPH_CLIENT_NAME}
CEPH_KEYRING=${DIR}/ceph.client.${CEPH_CLIENT_NAME}.keyring
CEPH_ADMIN_KEYRING=${DIR}/ceph.client.admin.keyring
CEPH_FS=cephfs
CEPH_POOL=bench
CEPH_FSID=${FSID}
CEPH_NETNS=${CEPH_NETNS}
CEPH_BRIDGE=${CEPH_BRIDGE}
CEPH_SUBNET=${SUBNET}
CEPH_MON_IP=${MON_IP}
CEPH_CLIENT_RANGE_START=${RANGE_START}
CEPH_CLIENT_RANGE_END=${RANGE_END}
CEPH_MEMSTORE_BYTES=${MEMSTORE_BYTES}
EOF
mv "${DIR}/env.tmp" "${DIR}/env"
trap - EXIT

end="$(now_ms)"
clog "cluster ${FSID} up in $(((end - START_MS) / 1000)).$(((end - START_MS) % 1000 / 100))s (bootstrap $(((end - BOOT_MS) / 1000)).$(((end - BOOT_MS) % 1000 / 100))s): mon ${MON_ADDR}:3300 in netns ${CEPH_NETNS}, bridge ${CEPH_BRIDGE}; env: ${DIR}/env"

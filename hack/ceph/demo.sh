#!/usr/bin/env bash
# hack/ceph/demo.sh - netns-pin with a real Ceph client, in under two minutes (root).
#
# On a real one-node Ceph cluster (hack/ceph/up.sh) and with the real cnitool
# and reference bridge + host-local plugins, a ceph-fuse client started the
# way ceph-csi starts it (`nsenter --net=<netNamespaceFilePath> -- ceph-fuse`)
# writes and checks files continuously while its holder pod is replaced:
#   1. holder A is pinned by netns-pin; the client mounts through the link
#   2. DEL of holder A is refused (CNI error 11) while the client uses it
#   3. holder B comes up and takes the link; A's netns name is deleted and its
#      DEL retried: the client keeps writing
#   4. the client unmounts: A's DEL now releases the pin, its netns goes
#   5. the same with a Rook-style holder (a process and a symlink to
#      /proc/<pid>/ns/net): removing the holder hangs the client
#
# Environment:
#   NETNS_PIN_CEPH_DIR   use the cluster up.sh made there (default: make one
#                        in a temporary folder and tear it down at the end)
#   NETNS_PIN_CNI_PATH   plugins folder (default .cache/cni/bin, built here)
#   NETNS_PIN_CNITOOL    cnitool (default .cache/bin/cnitool)
# Everything is made in namespaces, on a bridge and under a temporary folder
# made here, and removed at exit (also on Ctrl-C).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/ceph/lib.sh
. "${HERE}/lib.sh"
ROOT="$(cd "${HERE}/../.." && pwd)"
CNI_BIN="${NETNS_PIN_CNI_PATH:-${ROOT}/.cache/cni/bin}"
CNITOOL="${NETNS_PIN_CNITOOL:-${ROOT}/.cache/bin/cnitool}"
export PATH="/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH}"

if [[ -t 1 ]]; then B=$'\033[1m' D=$'\033[2m' G=$'\033[32m' R=$'\033[31m' N=$'\033[0m'; else B= D= G= R= N=; fi
T0="$(date +%s)"
step() { printf '\n%s== [%3ss] %s%s\n' "${B}" "$(($(date +%s) - T0))" "$*" "${N}"; }
say() { printf '   %s\n' "$*"; }
ok() { printf '   %s%s%s\n' "${G}" "$*" "${N}"; }
bad() { printf '   %s%s%s\n' "${R}" "$*" "${N}"; }
cmd() { printf '   %s$ %s%s\n' "${D}" "$*" "${N}"; }

[[ "$(id -u)" == 0 ]] || {
	echo "demo: needs root (network namespaces, bridges, FUSE mounts, Ceph daemons)" >&2
	exit 1
}

ID="$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
WORK="$(mktemp -d /tmp/netns-pin-ceph-demo.XXXXXX)"
NET="ceph-public-${ID}"
ROOK_NET="ceph-public-rook-${ID}"
HOLDER_A="npcdemo-a-${ID}"
HOLDER_B="npcdemo-b-${ID}"
HOLDER_R="npcdemo-rook-${ID}"
PIN_DIR="${WORK}/pin"
STATE_DIR="${WORK}/state"
LINK="${PIN_DIR}/rook-ceph/my-cluster.net"
ROOK_LINK="${WORK}/plugins/rook-ceph.cephfs.csi.ceph.com/rook-ceph.net.ns"
args_for() { echo "IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=$1;K8S_POD_UID=$(cat /proc/sys/kernel/random/uuid)"; }
ARGS_A="$(args_for csi-holder-a)"
ARGS_B="$(args_for csi-holder-b)"
ARGS_R="$(args_for csi-cephfsplugin-holder-my-cluster)"
OUR_CLUSTER=0
FUSE_PIDS=()
WRITER_PIDS=()
SLEEP_PID=

cnitool() { # cnitool <verb> <network> <netns name> <CNI_ARGS>
	CNI_PATH="${CNI_BIN}" NETCONFPATH="${WORK}/net.d" CNI_ARGS="$4" CNI_IFNAME=eth0 \
		"${CNITOOL}" "$1" "$2" "/run/netns/$3"
}
# the error line of a failed cnitool (cobra prints the usage after it)
cnierr() { grep -m1 '^Error:' <<<"$1" | sed -e 's/^Error: //' -e 's/\((see: [^)]*)\).*/\1/' | fold -s -w 110 | sed '2,$s/^/       /'; }
# pin_del_code <netns name> <CNI_ARGS>: run netns-pin's DEL alone, as libcni
# runs it (cnitool prints only the message) and print the CNI error code.
pin_del_code() {
	local cid out
	cid="cnitool-$(printf '%s' "/run/netns/$1" | sha512sum | cut -c1-20)"
	out="$(printf '{"cniVersion":"1.0.0","name":"%s","type":"netns-pin","pinDir":"%s","stateDir":"%s","logFile":"%s"}' \
		"${NET}" "${PIN_DIR}" "${STATE_DIR}" "${WORK}/netns-pin.log" |
		CNI_COMMAND=DEL CNI_CONTAINERID="${cid}" CNI_NETNS="/run/netns/$1" CNI_IFNAME=eth0 CNI_ARGS="$2" \
			CNI_PATH="${CNI_BIN}" "${CNI_BIN}/netns-pin" 2>/dev/null)" || true
	python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get("code", "none"))' "${out}" 2>/dev/null || echo "? (${out})"
}
mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }
# gone <pid>: wait (up to 30 s) until a client process has exited. ceph-fuse
# keeps running for a moment after its umount, and while it runs in a
# holder's netns netns-pin rightly refuses that holder's DEL.
gone() {
	local i
	for ((i = 0; i < 300; i++)); do
		[[ -e "/proc/$1" ]] || return 0
		[[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" == Z ]] && { wait "$1" 2>/dev/null; return 0; }
		sleep 0.1
	done
	bad "process $1 did not exit"
	return 1
}
ns_ino() { stat -L -c %i "$1"; }

cleanup() {
	local rc=$? p mp ns
	trap - EXIT INT TERM
	set +e
	step "Clean up"
	for p in "${WRITER_PIDS[@]}"; do kill "${p}" 2>/dev/null; done
	# the Rook-style client cannot answer: abort its FUSE connection first
	mounted "${WORK}/mnt-rook" && abort_fuse "${WORK}/mnt-rook"
	for mp in "${WORK}/mnt-rook" "${WORK}/mnt1" "${WORK}/mnt2"; do
		mounted "${mp}" && umount_fuse "${mp}" 10
	done
	for p in "${FUSE_PIDS[@]}" ${SLEEP_PID}; do kill -9 "${p}" 2>/dev/null; done
	wait 2>/dev/null
	[[ -n "${CEPH_CONF:-}" ]] && evict_rook_client
	cnitool del "${NET}" "${HOLDER_A}" "${ARGS_A}" >/dev/null 2>&1
	cnitool del "${NET}" "${HOLDER_B}" "${ARGS_B}" >/dev/null 2>&1
	cnitool del "${ROOK_NET}" "${HOLDER_R}" "${ARGS_R}" >/dev/null 2>&1
	while read -r mp; do umount -l "${mp}" 2>/dev/null; done < <(awk -v w="${WORK}" 'index($5, w "/") == 1 { print length($5) " " $5 }' /proc/self/mountinfo | sort -rn | cut -d' ' -f2-)
	for ns in "${HOLDER_A}" "${HOLDER_B}" "${HOLDER_R}"; do [[ -e "/run/netns/${ns}" ]] && ip netns del "${ns}"; done
	rm -f /var/lib/cni/results/"${NET}"-* /var/lib/cni/results/"${ROOK_NET}"-* 2>/dev/null
	if ((OUR_CLUSTER)); then
		"${HERE}/down.sh" "${CEPH_DIR}" 2>&1 | tail -n1 | sed 's/^/   /'
	fi
	rm -rf "${WORK}"
	say "removed the holders' namespaces, mounts, pins and ${WORK}"
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# writer <name> <dir>: write 64 KiB of random data, fsync, read back, compare,
# forever; one line per operation in ${WORK}/<name>.ops: "<end ms> ok|FAIL|MISMATCH <ms>".
writer() {
	local name="$1" dir="$2" i=0 t0 t1 res tmp="${WORK}/$1.data"
	mkdir -p "${dir}"
	while :; do
		head -c 65536 /dev/urandom >"${tmp}"
		t0="$(date +%s%3N)"
		if dd if="${tmp}" of="${dir}/f$((i % 8))" bs=64k conv=fsync status=none 2>/dev/null; then
			if cmp -s "${tmp}" "${dir}/f$((i % 8))"; then res=ok; else res=MISMATCH; fi
		else
			res=FAIL
		fi
		t1="$(date +%s%3N)"
		echo "${t1} ${res} $((t1 - t0))" >>"${WORK}/${name}.ops"
		i=$((i + 1))
		sleep 0.05
	done
}
start_writer() {
	: >"${WORK}/$1.ops"
	writer "$1" "$2" </dev/null >/dev/null 2>&1 &
	WRITER_PIDS+=($!)
}
# stats <name>: "N writes ok, N failed, slowest N ms, last one N s ago"
stats() {
	awk -v now="$(date +%s%3N)" '
		{ n[$2]++; if ($3 > max) max = $3; last = $1 }
		END { printf "%d writes ok, %d failed, %d corrupt; slowest %d ms; last one finished %.1f s ago\n",
			n["ok"], n["FAIL"], n["MISMATCH"], max, (now - last) / 1000 }' "${WORK}/$1.ops"
}
count_ok() { grep -c ' ok ' "${WORK}/$1.ops" || true; }
wait_writes() { # wait_writes <name> <n more>
	local want=$(($(count_ok "$1") + $2)) end=$(($(date +%s) + 60))
	while (($(count_ok "$1") < want)); do
		(($(date +%s) < end)) || {
			bad "writer $1 stuck: $(stats "$1")"
			return 1
		}
		sleep 0.1
	done
}

# ceph_fuse <netns path> <mountpoint> <root>: as ceph-csi, through nsenter.
ceph_fuse() {
	mkdir -p "$2"
	cmd "nsenter --net=${1#"${WORK}"/} -- ceph-fuse ${2#"${WORK}"/} -r $3 -n ${CEPH_CLIENT} ..."
	nsenter --net="$1" -- ceph-fuse -f "$2" -r "$3" -c "${CEPH_CONF}" -n "${CEPH_CLIENT}" --keyring "${CEPH_KEYRING}" \
		</dev/null >>"${WORK}/ceph-fuse.log" 2>&1 &
	FUSE_PID=$!
	FUSE_PIDS+=("${FUSE_PID}")
	local end=$(($(date +%s) + 60))
	until mounted "$2"; do
		kill -0 "${FUSE_PID}" 2>/dev/null && (($(date +%s) < end)) || {
			bad "ceph-fuse did not mount $2:"
			tail -n5 "${WORK}/ceph-fuse.log"
			exit 1
		}
		sleep 0.1
	done
}

evict_rook_client() {
	local id
	for id in $(nsenter --net="/run/netns/${CEPH_NETNS}" ceph -c "${CEPH_CONF}" tell 'mds.*' client ls --format json 2>/dev/null |
		sed 's/^[^[]*//' | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s.get("client_metadata", {}).get("mount_point", "").endswith("/mnt-rook"): print(s["id"])' 2>/dev/null); do
		nsenter --net="/run/netns/${CEPH_NETNS}" ceph -c "${CEPH_CONF}" tell 'mds.*' client evict "id=${id}" >/dev/null 2>&1
	done
}

# -----------------------------------------------------------------------------
step "Build cnitool, the reference plugins and netns-pin; bring up Ceph"
if [[ -z "${NETNS_PIN_CNI_PATH:-}" ]]; then
	"${ROOT}/hack/tools.sh" all 2>&1 | sed 's/^/   /'
fi
if [[ -n "${NETNS_PIN_CEPH_DIR:-}" ]]; then
	CEPH_DIR="${NETNS_PIN_CEPH_DIR}"
else
	CEPH_DIR="${WORK}/ceph"
	OUR_CLUSTER=1
	cmd "hack/ceph/up.sh ${CEPH_DIR}"
	"${HERE}/up.sh" "${CEPH_DIR}" 2>&1 | grep -E 'install|up in|error|fail' | sed 's/^/   /'
fi
# shellcheck disable=SC1091
. "${CEPH_DIR}/env"
say "$(nsenter --net="/run/netns/${CEPH_NETNS}" ceph -c "${CEPH_CONF}" health): mon, mgr, osd (memstore), mds in netns ${CEPH_NETNS} at ${CEPH_MON_IP}, bridge ${CEPH_BRIDGE}"
RANGE_BASE="${CEPH_CLIENT_RANGE_START%.*}"

mkdir -p "${WORK}/net.d" "$(dirname "${ROOK_LINK}")"
conflist() { # conflist <name> <first host> <last host> <with netns-pin 0|1>
	local pin=""
	(($4)) && pin=',
    {
      "type": "netns-pin", "pinDir": "'"${PIN_DIR}"'", "stateDir": "'"${STATE_DIR}"'",
      "holders": [{"podNamespace": "rook-ceph", "podName": "csi-holder-*", "cluster": "rook-ceph/my-cluster"}],
      "logFile": "'"${WORK}/netns-pin.log"'"
    }'
	cat >"${WORK}/net.d/$1.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$1",
  "plugins": [
    {
      "type": "bridge", "bridge": "${CEPH_BRIDGE}", "isGateway": false,
      "ipam": {"type": "host-local", "dataDir": "${WORK}/host-local",
               "ranges": [[{"subnet": "${CEPH_SUBNET}", "rangeStart": "${RANGE_BASE}.$2", "rangeEnd": "${RANGE_BASE}.$3"}]]}
    }${pin}
  ]
}
EOF
}
conflist "${NET}" 200 219 1
conflist "${ROOK_NET}" 220 239 0

# -----------------------------------------------------------------------------
step "1. Holder A (rook-ceph/csi-holder-a): ADD through [bridge + host-local, netns-pin]"
ip netns add "${HOLDER_A}"
cmd "cnitool add ${NET} /run/netns/${HOLDER_A}"
IP_A="$(cnitool add "${NET}" "${HOLDER_A}" "${ARGS_A}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ips"][0]["address"])')"
INO_A="$(ns_ino "/run/netns/${HOLDER_A}")"
say "holder A got ${IP_A}; ${LINK#"${WORK}"/} -> $(readlink "${LINK}")  (net:[$(ns_ino "${LINK}")])"
ceph_fuse "${LINK}" "${WORK}/mnt1" /
M1_PID="${FUSE_PID}"
mkdir -p "${WORK}/mnt1/demo-${ID}/rook"
start_writer pin "${WORK}/mnt1/demo-${ID}/pin"
wait_writes pin 10
ok "ceph-fuse pid ${M1_PID} runs in net:[$(ns_ino "/proc/${M1_PID}/ns/net")] (holder A: net:[${INO_A}]); writer: $(stats pin)"

step "2. DEL of holder A while the client uses it"
cmd "cnitool del ${NET} /run/netns/${HOLDER_A}"
if out="$(cnitool del "${NET}" "${HOLDER_A}" "${ARGS_A}" 2>&1)"; then
	bad "DEL succeeded although ceph-fuse uses the netns"
	exit 1
fi
ok "refused: netns-pin returns CNI error code $(pin_del_code "${HOLDER_A}" "${ARGS_A}") (11 = try again later):"
say "  $(cnierr "${out}")"
say "the pin, the veth and ${IP_A} stay; the runtime keeps retrying"

step "3. Holder B comes up and takes the link; A's netns name goes; A's DEL retried"
ip netns add "${HOLDER_B}"
IP_B="$(cnitool add "${NET}" "${HOLDER_B}" "${ARGS_B}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ips"][0]["address"])')"
say "holder B got ${IP_B}; ${LINK#"${WORK}"/} -> $(readlink "${LINK}")  (net:[$(ns_ino "${LINK}")])"
cmd "ip netns del ${HOLDER_A}"
ip netns del "${HOLDER_A}"
for try in 1 2 3; do
	wait_writes pin 10
	if cnitool del "${NET}" "${HOLDER_A}" "${ARGS_A}" >/dev/null 2>&1; then
		bad "DEL retry ${try} succeeded although ceph-fuse still runs"
		exit 1
	fi
	say "DEL retry ${try}: refused; writer: $(stats pin)"
done
ok "the client kept writing through holder A's removal: $(stats pin)"
ceph_fuse "${LINK}" "${WORK}/mnt2" /
M2_PID="${FUSE_PID}"
ok "a new mount lands in holder B's netns: ceph-fuse pid ${M2_PID} in net:[$(ns_ino "/proc/${M2_PID}/ns/net")]"

step "4. The client unmounts: A's next DEL releases the pin, A's netns goes"
kill "${WRITER_PIDS[0]}"
wait "${WRITER_PIDS[0]}" 2>/dev/null || true
PIN_ROW="$(stats pin)"
cmd "umount ${WORK#/}/mnt1"
umount "${WORK}/mnt1"
gone "${M1_PID}"
cnitool del "${NET}" "${HOLDER_A}" "${ARGS_A}" >/dev/null
ok "DEL of holder A: ok; pins left: $(ls "${PIN_DIR}/pins" | wc -l) (holder B's)"
if grep -q "net:\[${INO_A}\]" /proc/self/mountinfo; then bad "a mount of net:[${INO_A}] remains"; else ok "no mount of net:[${INO_A}] remains: holder A's netns is gone"; fi
umount "${WORK}/mnt2"
gone "${M2_PID}"
cnitool del "${NET}" "${HOLDER_B}" "${ARGS_B}" >/dev/null
ip netns del "${HOLDER_B}"

# -----------------------------------------------------------------------------
step "5. The design it replaces: a Rook-style holder (process + symlink to /proc/<pid>/ns/net)"
ip netns add "${HOLDER_R}"
IP_R="$(cnitool add "${ROOK_NET}" "${HOLDER_R}" "${ARGS_R}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ips"][0]["address"])')"
nsenter --net="/run/netns/${HOLDER_R}" -- sleep infinity &
SLEEP_PID=$!
until [[ "/proc/${SLEEP_PID}/ns/net" -ef "/run/netns/${HOLDER_R}" ]]; do sleep 0.05; done
ln -s "/proc/${SLEEP_PID}/ns/net" "${ROOK_LINK}"
say "holder got ${IP_R} (chain without netns-pin); ${ROOK_LINK#"${WORK}"/} -> /proc/${SLEEP_PID}/ns/net"
ceph_fuse "${ROOK_LINK}" "${WORK}/mnt-rook" "/demo-${ID}/rook"
start_writer rook "${WORK}/mnt-rook"
wait_writes rook 10
say "writer: $(stats rook)"
cmd "kill ${SLEEP_PID}; cnitool del ${ROOK_NET} /run/netns/${HOLDER_R}; ip netns del ${HOLDER_R}"
kill "${SLEEP_PID}"
wait "${SLEEP_PID}" 2>/dev/null || true
cnitool del "${ROOK_NET}" "${HOLDER_R}" "${ARGS_R}" >/dev/null
ip netns del "${HOLDER_R}"
if nsenter --net="${ROOK_LINK}" true 2>/dev/null; then bad "the symlink still works?"; else say "new clients: nsenter --net=${ROOK_LINK##*/}: No such file or directory"; fi
for _ in 1 2 3 4 5 6; do
	sleep 1
	say "writer: $(stats rook)"
done
ROOK_ROW="$(stats rook)"
bad "the Rook-style client hangs: its interface and address are gone with the holder, and it"
bad "stays blocked for as long as the mount exists (here: until we abort its FUSE connection)"

step "Summary"
printf '   %-11s %s\n' "netns-pin:" "${PIN_ROW}" "Rook-style:" "${ROOK_ROW} (hung)"

#!/usr/bin/env bash
# hack/demo.sh - netns-pin in two minutes, on this machine (needs root).
#
# Builds the plugin and the pinned tools, then with the real cnitool and the
# reference bridge + host-local plugins:
#   1. ADD a Ceph holder pod (matched by a `holders` rule) and a plain pod
#   2. shows the pin, the well-known link and that both are the pod's netns
#   3. deletes the netns name (`ip netns del`): the pinned netns lives on
#   4. a client process in the pinned netns: DEL is refused (CNI error 11)
#   5. the client stops: DEL releases the pin, the link and the netns
#   6. the runtime gives up (as CRI-O does after one failed DEL): the
#      sweeper finishes the teardown, IPAM included, once the client stops
# It exits non-zero when anything it shows is not as it should be.
# Everything is made under a temporary folder, in namespaces and on a bridge
# made here with local addresses only (10.99.0.0/24), and removed at exit,
# also on Ctrl-C.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# NETNS_PIN_CNI_PATH / NETNS_PIN_CNITOOL (as for the e2e suite) skip the build.
CNI_BIN="${NETNS_PIN_CNI_PATH:-${ROOT}/.cache/cni/bin}"
CTL="${NETNS_PIN_CTL:-${ROOT}/bin/netns-pinctl}"
CNITOOL="${NETNS_PIN_CNITOOL:-${ROOT}/.cache/bin/cnitool}"

if [[ -t 1 ]]; then B=$'\033[1m' D=$'\033[2m' G=$'\033[32m' R=$'\033[31m' N=$'\033[0m'; else B= D= G= R= N=; fi
step() { printf '\n%s== %s%s\n' "${B}" "$*" "${N}"; }
say() { printf '   %s\n' "$*"; }
ok() { printf '   %s%s%s\n' "${G}" "$*" "${N}"; }
FAILED=
bad() {
	printf '   %s%s%s\n' "${R}" "$*" "${N}"
	FAILED=1
}
count() { find "$1" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# show and run a command, indented
run() {
	printf '   %s$ %s%s\n' "${D}" "$*" "${N}"
	"$@" 2>&1 | sed 's/^/     /'
	return "${PIPESTATUS[0]}"
}

if [[ "$(id -u)" != 0 ]]; then
	echo "demo: needs root (network namespaces, bridges, mounts)" >&2
	exit 1
fi

step "Build: cnitool, reference plugins, netns-pin"
if [[ -z "${NETNS_PIN_CNI_PATH:-}" ]]; then
	"${ROOT}/hack/tools.sh" all 2>&1 | sed 's/^/   /'
fi
say "CNI plugins in ${CNI_BIN#"${ROOT}"/}: $(cd "${CNI_BIN}" && ls | tr '\n' ' ')"

ID="$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
NET="netns-pin-demo-${ID}"
HOLDER_NS="npdemo-holder-${ID}"
OTHER_NS="npdemo-other-${ID}"
GAVEUP_NS="npdemo-gaveup-${ID}"
BRIDGE="npdemo${ID}"
SUBNET="10.99.0.0/24"
WORK="$(mktemp -d /tmp/netns-pin-demo.XXXXXX)"
PIN_DIR="${WORK}/pin"
STATE_DIR="${WORK}/state"
NETCONF="${WORK}/net.d"
LINK="${PIN_DIR}/rook-ceph/my-cluster.net"
HOLDER_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=csi-holder-abc;K8S_POD_UID=6f1c9e0a-5b7d-4c3e-9a51-${ID}0000"
OTHER_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=0b3d2f6e-8c4a-4e1f-b7d2-${ID}0000"
GAVEUP_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=csi-holder-def;K8S_POD_UID=7a2d0f1b-6c8e-4d4f-8b62-${ID}0000"

cnitool() {
	local verb="$1" ns="$2" args="$3"
	CNI_PATH="${CNI_BIN}" NETCONFPATH="${NETCONF}" CNI_ARGS="${args}" CNI_IFNAME=eth0 \
		"${CNITOOL}" "${verb}" "${NET}" "/run/netns/${ns}"
}

cleanup() {
	local rc=$?
	# run to the end even if interrupted again
	trap - EXIT
	trap '' INT TERM
	set +e
	step "Clean up"
	[[ -n "${CLIENT_PID:-}" ]] && kill "${CLIENT_PID}" 2>/dev/null
	[[ -n "${SWEEPER_PID:-}" ]] && kill "${SWEEPER_PID}" 2>/dev/null
	# DEL first so the plugin releases its pins (no-op when already done)
	cnitool del "${HOLDER_NS}" "${HOLDER_ARGS}" >/dev/null 2>&1
	cnitool del "${OTHER_NS}" "${OTHER_ARGS}" >/dev/null 2>&1
	[[ -e "/run/netns/${GAVEUP_NS}" ]] && cnitool del "${GAVEUP_NS}" "${GAVEUP_ARGS}" >/dev/null 2>&1
	"${CTL}" --pin-dir "${PIN_DIR}" --state-dir "${STATE_DIR}" release --force "${GAVEUP_ATT:-none}" >/dev/null 2>&1
	# then whatever is still mounted under the work folder: pins, then pinDir
	local mp
	while read -r mp; do
		umount -l "${mp}" 2>/dev/null
	done < <(awk -v w="${WORK}" '$5 == w || index($5, w "/") == 1 { print length($5) " " $5 }' /proc/self/mountinfo | sort -rn | cut -d' ' -f2-)
	local ns
	for ns in "${HOLDER_NS}" "${OTHER_NS}" "${GAVEUP_NS}"; do
		[[ -e "/run/netns/${ns}" ]] && ip netns del "${ns}"
	done
	ip link show "${BRIDGE}" >/dev/null 2>&1 && ip link del "${BRIDGE}"
	rm -f /var/lib/cni/results/"${NET}"-* 2>/dev/null
	rm -rf "${WORK}"
	say "removed netns ${HOLDER_NS} ${OTHER_NS}, bridge ${BRIDGE}, ${WORK}"
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "Set up: two network namespaces and a conflist [bridge + host-local, netns-pin]"
run ip netns add "${HOLDER_NS}"
run ip netns add "${OTHER_NS}"
mkdir -p "${NETCONF}"
cat >"${NETCONF}/${NET}.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "${NET}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${BRIDGE}",
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${SUBNET}"}]],
        "dataDir": "${WORK}/host-local"
      }
    },
    {
      "type": "netns-pin",
      "pinDir": "${PIN_DIR}",
      "stateDir": "${STATE_DIR}",
      "holders": [
        {"podNamespace": "rook-ceph", "podName": "csi-holder-*", "cluster": "rook-ceph/my-cluster"}
      ],
      "logFile": "${WORK}/netns-pin.log"
    }
  ]
}
EOF
say "${NETCONF}/${NET}.conflist:"
sed 's/^/     /' "${NETCONF}/${NET}.conflist"

step "ADD the holder pod rook-ceph/csi-holder-abc (matches the holders rule)"
say "CNI_ARGS=${HOLDER_ARGS}"
result="$(cnitool add "${HOLDER_NS}" "${HOLDER_ARGS}")"
HOLDER_IP="$(jq -r '.ips[0].address' <<<"${result}")"
ok "holder got ${HOLDER_IP}"

step "The pin and the well-known link"
run ls -l "${PIN_DIR}/pins" "${PIN_DIR}/rook-ceph"
PIN="$(find "${PIN_DIR}/pins" -mindepth 1 -maxdepth 1 | head -n1)"
[[ -n "${PIN}" ]] || { bad "no pin under ${PIN_DIR}/pins"; exit 1; }
say "mounts under ${PIN_DIR}:"
awk -v p="${PIN_DIR}" 'index($5, p) == 1 {
	prop = "private"; for (i = 7; $i != "-"; i++) if ($i ~ /^shared:/) prop = "shared"
	for (i = 7; $i != "-"; i++); print "     " $5 "  (" $(i+1) ", root " $4 ", " prop ")" }' /proc/self/mountinfo
orig_id="$(stat -L -c '%d:%i' "/run/netns/${HOLDER_NS}")"
link_id="$(stat -L -c '%d:%i' "${LINK}")"
pin_id="$(stat -L -c '%d:%i' "${PIN}")"
say "nsfs dev:inode  /run/netns/${HOLDER_NS}=${orig_id}  pin=${pin_id}  link=${link_id}"
if [[ "${orig_id}" == "${link_id}" && "${orig_id}" == "${pin_id}" ]]; then
	ok "the link leads to the holder's netns"
else
	bad "the link does not lead to the holder's netns"
fi
say "record:"
{ jq . "${STATE_DIR}"/records/*.json 2>&1 || true; } | sed 's/^/     /'

step "ADD a plain pod default/web-0 (not a holder: passes through)"
result="$(cnitool add "${OTHER_NS}" "${OTHER_ARGS}")"
ok "web-0 got $(jq -r '.ips[0].address' <<<"${result}"); pins: $(count "${PIN_DIR}/pins"), records: $(count "${STATE_DIR}/records") (still only the holder's)"

step "Delete the holder's netns name: the pinned netns lives on"
run ip netns del "${HOLDER_NS}"
run ls /run/netns
run nsenter --net="${LINK}" ip -br addr
if nsenter --net="${LINK}" ip -br addr | grep -q "${HOLDER_IP%/*}"; then
	ok "${HOLDER_IP} is still there, reachable through ${LINK#"${WORK}"/}"
else
	bad "${HOLDER_IP} is gone"
fi

step "A Ceph client in the pinned netns: DEL is refused"
say "start a client the way ceph-csi does (nsenter --net=<link>); here a plain process stands in for ceph-fuse"
nsenter --net="${LINK}" -- sleep 600 &
CLIENT_PID=$!
for _ in $(seq 200); do
	[[ "$(stat -L -c '%d:%i' "/proc/${CLIENT_PID}/ns/net" 2>/dev/null)" == "${orig_id}" ]] && break
	sleep 0.05
done
say "client pid ${CLIENT_PID} runs in the pinned netns"
printf '   %s$ cnitool del %s%s\n' "${D}" "${NET}" "${N}"
if out="$(cnitool del "${HOLDER_NS}" "${HOLDER_ARGS}" 2>&1)"; then
	bad "DEL succeeded while the netns was in use"
	exit 1
fi
grep -m1 'netns-pin' <<<"${out}" | fold -s -w 100 | sed 's/^/     /'
ok "DEL refused (CNI error 11, try again later): pin, interface and IP stay"
run nsenter --net="${LINK}" ip -br addr show eth0
run "${CTL}" --pin-dir "${PIN_DIR}" --state-dir "${STATE_DIR}" list
run "${CTL}" --pin-dir "${PIN_DIR}" --state-dir "${STATE_DIR}" inuse rook-ceph/my-cluster
say "stop the client (as when the last volume is unmapped)"
kill "${CLIENT_PID}"
wait "${CLIENT_PID}" 2>/dev/null || true

step "DEL the holder: nothing uses the netns, the pin is released"
cnitool del "${HOLDER_NS}" "${HOLDER_ARGS}"
ok "cnitool del succeeded"
run ls -lA "${PIN_DIR}/pins"
if [[ -e "${LINK}" || -L "${LINK}" ]]; then bad "link ${LINK} still exists"; else ok "link ${LINK#"${WORK}"/} is gone"; fi
ino="${orig_id#*:}"
if grep -q "net:\[${ino}\]" /proc/self/mountinfo; then
	bad "a mount of net:[${ino}] remains"
else
	ok "no mount of net:[${ino}] remains: the netns is free to go"
fi
say "records left: $(count "${STATE_DIR}/records")"

step "DEL the plain pod"
cnitool del "${OTHER_NS}" "${OTHER_ARGS}"
ok "done"

step "When the runtime gives up: the sweeper finishes the teardown"
say "CRI-O 1.32.8+ calls DEL once; on failure it removes its netns file and the libcni result"
say "cache of the sandbox and never calls DEL again (cri-o PR #9372, server/sandbox_network.go)."
run ip netns add "${GAVEUP_NS}"
result="$(cnitool add "${GAVEUP_NS}" "${GAVEUP_ARGS}")"
GAVEUP_IP="$(jq -r '.ips[0].address' <<<"${result}")"
GAVEUP_CID="cnitool-$(printf '%s' "/run/netns/${GAVEUP_NS}" | sha512sum | cut -c1-20)"
GAVEUP_ATT="${GAVEUP_CID}.eth0"
say "holder rook-ceph/csi-holder-def got ${GAVEUP_IP}; a client enters through the link"
nsenter --net="${LINK}" -- sleep 600 &
CLIENT_PID=$!
gaveup_id="$(stat -L -c '%d:%i' "/run/netns/${GAVEUP_NS}")"
for _ in $(seq 200); do
	[[ "$(stat -L -c '%d:%i' "/proc/${CLIENT_PID}/ns/net" 2>/dev/null)" == "${gaveup_id}" ]] && break
	sleep 0.05
done
if cnitool del "${GAVEUP_NS}" "${GAVEUP_ARGS}" >/dev/null 2>&1; then
	bad "DEL succeeded while the netns was in use"
	exit 1
fi
ok "the runtime's one DEL is refused"
say "the runtime gives up: removes its netns and its result cache, and never retries"
run ip netns del "${GAVEUP_NS}"
run rm "/var/lib/cni/results/${NET}-${GAVEUP_CID}-eth0"
say "the node's sweeper (the installer DaemonSet runs it on every node):"
printf '   %s$ netns-pinctl --conf %s sweep --interval 1s &%s\n' "${D}" "${NETCONF#"${WORK}"/}/${NET}.conflist" "${N}"
"${CTL}" --conf "${NETCONF}/${NET}.conflist" sweep --interval 1s &
SWEEPER_PID=$!
for _ in $(seq 100); do
	grep -q '"abandoned": true' "${STATE_DIR}/records/${GAVEUP_ATT}.json" 2>/dev/null && break
	sleep 0.1
done
run "${CTL}" --pin-dir "${PIN_DIR}" --state-dir "${STATE_DIR}" list
if nsenter --net="${LINK}" ip -br addr | grep -q "${GAVEUP_IP%/*}"; then
	ok "abandoned, but in use: the pin, the interface and ${GAVEUP_IP} stay"
else
	bad "${GAVEUP_IP} is gone while the client uses the netns"
fi
say "stop the client"
kill "${CLIENT_PID}"
wait "${CLIENT_PID}" 2>/dev/null || true
CLIENT_PID=
# The sweeper removes the record and then logs: wait for the log line, so
# that both are there to show.
for _ in $(seq 300); do
	grep -q '"finished abandoned teardown".*"ipamReleased"' "${WORK}/netns-pin.log" && break
	sleep 0.1
done
if [[ -e "${STATE_DIR}/records/${GAVEUP_ATT}.json" ]] || ! grep -q '"finished abandoned teardown"' "${WORK}/netns-pin.log"; then
	bad "the sweeper did not finish the teardown"
else
	grep '"finished abandoned teardown"' "${WORK}/netns-pin.log" | jq -c '{msg, cluster, pod, ips, draining, ipamReleased}' | sed 's/^/     /'
	if [[ -e "${WORK}/host-local/${NET}/${GAVEUP_IP%/*}" ]]; then bad "host-local still holds ${GAVEUP_IP%/*}"; else ok "pin, record and link gone; host-local gave ${GAVEUP_IP%/*} back"; fi
fi
kill "${SWEEPER_PID}"
wait "${SWEEPER_PID}" 2>/dev/null || true
SWEEPER_PID=

if [[ -n "${FAILED}" ]]; then
	bad "the demo saw something wrong (above)"
	exit 1
fi

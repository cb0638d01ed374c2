#!/usr/bin/env bash
# hack/runtime/setup.sh - a real CRI runtime for netns-pin's runtime end to end
# suite (test/runtime): containerd + runc (Debian), crictl, Multus (thin, and
# thick: multus-shim + the multus-daemon image), the reference CNI plugins,
# netns-pin and a local pause image.
#
# Usage:
#   hack/runtime/setup.sh tools   build/install what is missing, start nothing
#   hack/runtime/setup.sh <dir>   tools, then a containerd whose root, state,
#                                 socket, CNI bin and conf dirs are all under
#                                 <dir>, started in the background
#   hack/runtime/teardown.sh <dir>   stop and remove all of it (see there)
#
# Idempotent: run it twice and the second run only checks. From nothing it
# installs `containerd` and `runc` with apt (`apt-get update` only when one is
# missing) and builds from the Go module proxy, into the git-ignored .cache/:
#   .cache/runtime/bin/crictl   sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}
#   .cache/runtime/bin/multus   gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus@${MULTUS_VERSION}
#                               (the thin plugin; the version is named, never listed)
#   .cache/runtime/bin/multus-shim, multus-daemon   the thick plugin's two halves,
#                               same module and version
#   .cache/runtime/multus-daemon.tar   OCI archive of multus-daemon (hack/runtime/ociimage)
#   .cache/runtime/pause.tar    OCI archive of hack/runtime/pause (static Go), made
#                               by hack/runtime/ociimage: no registry is reachable
#   .cache/cni/bin/*            reference plugins + netns-pin (hack/tools.sh)
#
# <dir> after a run:
#   env                       shell variables for the suite and for people:
#                             `source <dir>/env; $CRICTL pods`
#   containerd/config.toml    CRI with restrict_oom_score_adj = true,
#                             sandbox_image = the local pause image
#   containerd.pid, containerd.log, run/containerd.sock
#   cni/bin/                  links to multus, multus-shim, the reference plugins, netns-pin
#   cni/net.d/                empty: the caller writes the Multus config
#   crictl.yaml
#
# Environment: NETNS_PIN_BIN (netns-pin binary to install, default
# .cache/cni/bin/netns-pin, built with hack/tools.sh when missing),
# SETUP_TIMEOUT (seconds to wait for containerd, default 60).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${ROOT}/.cache"
RT_CACHE="${CACHE}/runtime"
RT_BIN="${RT_CACHE}/bin"
STAMP_DIR="${CACHE}/stamps"

CRICTL_VERSION="v1.34.0"
MULTUS_MODULE="gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
MULTUS_VERSION="v4.2.3"
PAUSE_IMAGE="localhost/netns-pin/pause:test"
MULTUS_DAEMON_IMAGE="localhost/netns-pin/multus-daemon:${MULTUS_VERSION}"
SETUP_TIMEOUT="${SETUP_TIMEOUT:-60}"

export PATH="/usr/local/go/bin:${PATH}"
export GOFLAGS="-buildvcs=false"

LOG_PREFIX="runtime-setup"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

ensure_packages() {
	local missing=()
	for entry in containerd:containerd ctr:containerd containerd-shim-runc-v2:containerd runc:runc jq:jq findmnt:util-linux; do
		if ! command -v "${entry%%:*}" >/dev/null 2>&1; then
			[[ " ${missing[*]-} " == *" ${entry#*:} "* ]] || missing+=("${entry#*:}")
		fi
	done
	apt_install "${missing[@]}"
	# Debian's package enables a systemd unit; there is no systemd here and the
	# suite runs its own containerd, so nothing else is started.
}

build_crictl() {
	stamp_ok crictl "${CRICTL_VERSION}" "${RT_BIN}/crictl" && return 0
	log "go install sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}"
	(cd / && CGO_ENABLED=0 GOBIN="${RT_BIN}" go install -trimpath \
		"sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}")
	stamp_set crictl "${CRICTL_VERSION}"
}

# Multus: `go install pkg@version` asks the proxy for the module's version
# list (deprecation check), which the proxy refuses for this module. Download
# exactly the named version and build its thin plugin (cmd/multus) and the
# thick plugin's shim and daemon in the module cache with the module's own
# go.sum; the daemon goes into an image, as upstream ships it.
build_multus() {
	stamp_ok multus "${MULTUS_VERSION}-thick2" "${RT_BIN}/multus" && [[ -f "${RT_CACHE}/multus-daemon.tar" ]] && return 0
	log "go mod download ${MULTUS_MODULE}@${MULTUS_VERSION}; go build ./cmd/multus ./cmd/multus-shim ./cmd/multus-daemon"
	local dir cmd
	dir="$(cd / && go mod download -json "${MULTUS_MODULE}@${MULTUS_VERSION}" | jq -r .Dir)"
	[[ -d "${dir}" ]] || die "multus module not downloaded (${dir})"
	for cmd in multus multus-shim multus-daemon; do
		(cd "${dir}" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "${RT_BIN}/.${cmd}.tmp" "./cmd/${cmd}")
		mv -f "${RT_BIN}/.${cmd}.tmp" "${RT_BIN}/${cmd}"
	done
	# multus-daemon checks that it runs as root with os/user, which needs
	# /etc/passwd in a static build.
	printf 'root:x:0:0:root:/root:/sbin/nologin\n' >"${RT_CACHE}/passwd"
	(cd "${ROOT}" && go run ./hack/runtime/ociimage -bin "${RT_BIN}/multus-daemon" -add "/etc/passwd=${RT_CACHE}/passwd" \
		-ref "${MULTUS_DAEMON_IMAGE}" -o "${RT_CACHE}/multus-daemon.tar")
	stamp_set multus "${MULTUS_VERSION}-thick2"
}

build_pause_image() {
	local sum
	sum="$(cat "${ROOT}/hack/runtime/pause/main.go" "${ROOT}/hack/runtime/ociimage/main.go" | cksum | cut -d' ' -f1)"
	stamp_ok pause-image "${sum}" "${RT_BIN}/pause" && [[ -f "${RT_CACHE}/pause.tar" ]] && return 0
	log "build the pause image ${PAUSE_IMAGE} (static Go binary in an OCI archive)"
	(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "${RT_BIN}/pause" ./hack/runtime/pause)
	(cd "${ROOT}" && go run ./hack/runtime/ociimage -bin "${RT_BIN}/pause" -ref "${PAUSE_IMAGE}" -o "${RT_CACHE}/pause.tar")
	stamp_set pause-image "${sum}"
}

ensure_cni_plugins() {
	bash "${ROOT}/hack/tools.sh" tools
	if [[ -z "${NETNS_PIN_BIN:-}" ]]; then
		NETNS_PIN_BIN="${CACHE}/cni/bin/netns-pin"
		[[ -x "${NETNS_PIN_BIN}" ]] || bash "${ROOT}/hack/tools.sh" plugin
	fi
	[[ -x "${NETNS_PIN_BIN}" ]] || die "netns-pin binary ${NETNS_PIN_BIN} missing"
}

tools() {
	[[ "$(id -u)" == 0 ]] || die "run as root"
	command -v go >/dev/null || die "go not found (expected /usr/local/go/bin/go)"
	mkdir -p "${RT_BIN}"
	ensure_packages
	ensure_cni_plugins
	build_pause_image
	# the two large builds run side by side
	local pids=() rc=0 p
	build_crictl &
	pids+=($!)
	build_multus &
	pids+=($!)
	for p in "${pids[@]}"; do wait "${p}" || rc=1; done
	((rc == 0)) || die "building crictl or multus failed"
}

# For wait_until (hack/lib.sh): containerd must still run, and its log
# tells why a wait timed out.
containerd_alive() {
	if [[ -n "${CONTAINERD_PID:-}" ]] && ! kill -0 "${CONTAINERD_PID}" 2>/dev/null; then
		containerd_log
		die "containerd (pid ${CONTAINERD_PID}) exited while waiting for $1"
	fi
}
containerd_log() { tail -n 30 "${DIR}/containerd.log" >&2 || true; }
WAIT_ALIVE=containerd_alive
WAIT_DIAG=containerd_log

write_config() {
	mkdir -p "${DIR}/containerd/root" "${DIR}/containerd/state" "${DIR}/run" "${DIR}/opt" \
		"${DIR}/cni/bin" "${DIR}/cni/net.d"
	chmod 0711 "${DIR}"
	{
		echo "# Written by hack/runtime/setup.sh for the netns-pin runtime end to end suite."
		containerd_config "${DIR}" "${DIR}/run/containerd.sock" "${PAUSE_IMAGE}" "${DIR}/cni/bin" "${DIR}/cni/net.d"
	} >"${DIR}/containerd/config.toml"
	cat >"${DIR}/crictl.yaml" <<EOF
runtime-endpoint: unix://${DIR}/run/containerd.sock
image-endpoint: unix://${DIR}/run/containerd.sock
timeout: 60
debug: false
EOF
	# CNI binaries: links, so a rebuilt netns-pin (make build) is picked up.
	local p
	for p in "${CACHE}"/cni/bin/*; do
		[[ "$(basename "${p}")" == netns-pin ]] && continue
		ln -sfn "${p}" "${DIR}/cni/bin/$(basename "${p}")"
	done
	ln -sfn "${NETNS_PIN_BIN}" "${DIR}/cni/bin/netns-pin"
	ln -sfn "${RT_BIN}/multus" "${DIR}/cni/bin/multus"
	ln -sfn "${RT_BIN}/multus-shim" "${DIR}/cni/bin/multus-shim"
}

running() {
	[[ -f "${DIR}/containerd.pid" ]] || return 1
	CONTAINERD_PID="$(cat "${DIR}/containerd.pid")"
	kill -0 "${CONTAINERD_PID}" 2>/dev/null || return 1
	[[ "$(readlink "/proc/${CONTAINERD_PID}/exe" 2>/dev/null)" == "$(readlink -f "$(command -v containerd)")" ]] || return 1
	ctr --address "${DIR}/run/containerd.sock" version >/dev/null 2>&1
}

start_containerd() {
	if running; then
		log "containerd already running (pid ${CONTAINERD_PID})"
		return 0
	fi
	CONTAINERD_PID=""
	# its own session, so the caller's terminal signals do not reach it;
	# stdin closed, output to the log
	setsid containerd --config "${DIR}/containerd/config.toml" \
		</dev/null >>"${DIR}/containerd.log" 2>&1 &
	CONTAINERD_PID=$!
	echo "${CONTAINERD_PID}" >"${DIR}/containerd.pid"
	log "containerd started (pid ${CONTAINERD_PID}), log ${DIR}/containerd.log"
	wait_until "${SETUP_TIMEOUT}" "containerd's socket" ctr --address "${DIR}/run/containerd.sock" version
}

import_images() {
	local ctr=(ctr --address "${DIR}/run/containerd.sock" -n k8s.io) have ref
	have="$("${ctr[@]}" images ls -q)"
	for ref in "${PAUSE_IMAGE}=pause.tar" "${MULTUS_DAEMON_IMAGE}=multus-daemon.tar"; do
		grep -qxF "${ref%%=*}" <<<"${have}" && continue
		"${ctr[@]}" images import "${RT_CACHE}/${ref#*=}" >/dev/null
	done
}

write_env() {
	cat >"${DIR}/env" <<EOF
# Written by hack/runtime/setup.sh; source it.
NETNS_PIN_RT_DIR=${DIR}
CONTAINERD_PID=${CONTAINERD_PID}
CONTAINERD_ADDRESS=${DIR}/run/containerd.sock
CONTAINER_RUNTIME_ENDPOINT=unix://${DIR}/run/containerd.sock
CRI_CONFIG_FILE=${DIR}/crictl.yaml
CRICTL=${RT_BIN}/crictl
CTR=$(command -v ctr)
CNI_BIN_DIR=${DIR}/cni/bin
CNI_CONF_DIR=${DIR}/cni/net.d
PAUSE_IMAGE=${PAUSE_IMAGE}
MULTUS_DAEMON_IMAGE=${MULTUS_DAEMON_IMAGE}
MULTUS_BIN_DIR=${RT_BIN}
CGROUP_PARENT=/netns-pin-rt-$(basename "${DIR}" | tr -c 'a-zA-Z0-9_\n-' '_')
MULTUS_VERSION=${MULTUS_VERSION}
CRICTL_VERSION=${CRICTL_VERSION}
EOF
}

main() {
	local arg="${1:-}" start
	start="$(now_ms)"
	case "${arg}" in
	"" | -h | --help | help)
		sed -n '2,40p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		[[ -n "${arg}" ]] || exit 2
		return 0
		;;
	tools)
		tools
		log "tools ready ($((($(now_ms) - start))) ms)"
		return 0
		;;
	esac
	mkdir -p "${arg}"
	DIR="$(cd "${arg}" && pwd)"
	# the socket path must fit in sun_path (108 bytes)
	((${#DIR} < 80)) || die "<dir> ${DIR} is too long for a unix socket path under it"
	tools
	local t_tools
	t_tools="$(now_ms)"
	write_config
	start_containerd
	import_images
	CRI_CONFIG_FILE="${DIR}/crictl.yaml" wait_until "${SETUP_TIMEOUT}" "the CRI plugin" \
		"${RT_BIN}/crictl" --config "${DIR}/crictl.yaml" info
	write_env
	log "ready in $((($(now_ms) - start))) ms (tools $((t_tools - start)) ms, containerd $(($(now_ms) - t_tools)) ms): source ${DIR}/env"
}

main "$@"

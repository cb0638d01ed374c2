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
#   hack/runtime/setup.sh <dir> crio   the same with CRI-O (hack/runtime/crio.sh:
#                                 built from the Go module proxy, conmon and
#                                 runc from Debian), every file of it under
#                                 <dir>/crio
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
#   .cache/crio/bin/crio, copyimg, pinns   CRI-O (hack/runtime/crio.sh)
#
# <dir> after a run (containerd; with crio: crio/crio.conf, crio.pid,
# crio.log, run/crio.sock, and the rest the same):
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
# shellcheck source=hack/runtime/crio.sh
source "${ROOT}/hack/runtime/crio.sh"

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
# thick plugin's commands in the module cache with the module's own go.sum;
# the thick ones go into an image laid out as upstream's (its Dockerfile:
# /usr/src/multus-cni/bin/, which deployments/multus-daemonset-thick.yml
# runs the daemon and the shim's installer from).
build_multus() {
	stamp_ok multus "${MULTUS_VERSION}-thick3" "${RT_BIN}/multus" && [[ -f "${RT_CACHE}/multus-daemon.tar" ]] && return 0
	log "go mod download ${MULTUS_MODULE}@${MULTUS_VERSION}; go build ./cmd/multus ./cmd/multus-shim ./cmd/multus-daemon ./cmd/install_multus ./cmd/passthru-cni"
	local dir cmd
	dir="$(cd / && go mod download -json "${MULTUS_MODULE}@${MULTUS_VERSION}" | jq -r .Dir)"
	[[ -d "${dir}" ]] || die "multus module not downloaded (${dir})"
	for cmd in multus multus-shim multus-daemon install_multus passthru-cni; do
		(cd "${dir}" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "${RT_BIN}/.${cmd}.tmp" "./cmd/${cmd}")
		mv -f "${RT_BIN}/.${cmd}.tmp" "${RT_BIN}/${cmd}"
	done
	# multus-daemon checks that it runs as root with os/user, which needs
	# /etc/passwd in a static build.
	printf 'root:x:0:0:root:/root:/sbin/nologin\n' >"${RT_CACHE}/passwd"
	local src=/usr/src/multus-cni/bin
	(cd "${ROOT}" && go run ./hack/runtime/ociimage -bin "${RT_BIN}/multus-daemon" -name "${src}/multus-daemon" \
		-add "${src}/multus-shim=${RT_BIN}/multus-shim" -add "${src}/install_multus=${RT_BIN}/install_multus" \
		-add "${src}/passthru=${RT_BIN}/passthru-cni" -add "/etc/passwd=${RT_CACHE}/passwd" \
		-ref "${MULTUS_DAEMON_IMAGE}" -o "${RT_CACHE}/multus-daemon.tar")
	stamp_set multus "${MULTUS_VERSION}-thick3"
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
	# CRI-O's packages first: apt must not run in two builds at once
	stamp_ok crio "${CRIO_VERSION}-${CRIO_COMMIT:0:12}" "${CRIO_BIN}/crio" || crio_packages
	# the large builds run side by side
	local pids=() rc=0 p
	build_crictl &
	pids+=($!)
	build_multus &
	pids+=($!)
	build_crio &
	pids+=($!)
	for p in "${pids[@]}"; do wait "${p}" || rc=1; done
	((rc == 0)) || die "building crictl, multus or crio failed"
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
	write_crictl_yaml "${DIR}/run/containerd.sock"
	link_cni_bin
}

write_crictl_yaml() {
	cat >"${DIR}/crictl.yaml" <<EOF
runtime-endpoint: unix://$1
image-endpoint: unix://$1
timeout: 60
debug: false
EOF
}

# CNI binaries: links, so a rebuilt netns-pin (make build) is picked up.
link_cni_bin() {
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

# CRI-O (hack/runtime/crio.sh): the same layout, every file of CRI-O under
# <dir>/crio, stopped by its PID in <dir>/crio.pid.
write_config_crio() {
	mkdir -p "${DIR}/run" "${DIR}/cni/bin" "${DIR}/cni/net.d" "${DIR}/crio/crio.conf.d"
	chmod 0711 "${DIR}"
	crio_prepare "${DIR}"
	{
		echo "# Written by hack/runtime/setup.sh for the netns-pin runtime end to end suite."
		crio_config "${DIR}" "${DIR}/run/crio.sock" "${PAUSE_IMAGE}" "${DIR}/cni/bin" "${DIR}/cni/net.d"
	} >"${DIR}/crio/crio.conf"
	write_crictl_yaml "${DIR}/run/crio.sock"
	link_cni_bin
}

crio_running() {
	[[ -f "${DIR}/crio.pid" ]] || return 1
	RUNTIME_PID="$(cat "${DIR}/crio.pid")"
	kill -0 "${RUNTIME_PID}" 2>/dev/null || return 1
	[[ "$(readlink "/proc/${RUNTIME_PID}/exe" 2>/dev/null)" == "${CRIO_BIN}/crio" ]] || return 1
	"${RT_BIN}/crictl" --config "${DIR}/crictl.yaml" version >/dev/null 2>&1
}

crio_alive() {
	if [[ -n "${RUNTIME_PID:-}" ]] && ! kill -0 "${RUNTIME_PID}" 2>/dev/null; then
		tail -n 30 "${DIR}/crio.log" >&2 || true
		die "crio (pid ${RUNTIME_PID}) exited while waiting for $1"
	fi
}
crio_log() { tail -n 30 "${DIR}/crio.log" >&2 || true; }

start_crio() {
	WAIT_ALIVE=crio_alive
	WAIT_DIAG=crio_log
	if crio_running; then
		log "crio already running (pid ${RUNTIME_PID})"
		return 0
	fi
	RUNTIME_PID=""
	# the pause image, from its OCI archive, before CRI-O opens the storage
	crio_import_image "${DIR}" "${RT_CACHE}/pause.tar" "${PAUSE_IMAGE}"
	# --config-dir: no drop-in of /etc/crio/crio.conf.d applies
	setsid "${CRIO_BIN}/crio" --config "${DIR}/crio/crio.conf" --config-dir "${DIR}/crio/crio.conf.d" \
		</dev/null >>"${DIR}/crio.log" 2>&1 &
	RUNTIME_PID=$!
	echo "${RUNTIME_PID}" >"${DIR}/crio.pid"
	log "crio ${CRIO_VERSION} (commit ${CRIO_COMMIT:0:12}) started (pid ${RUNTIME_PID}), log ${DIR}/crio.log"
	wait_until "${SETUP_TIMEOUT}" "crio's socket" "${RT_BIN}/crictl" --config "${DIR}/crictl.yaml" version
}

write_env() {
	local sock=containerd.sock
	[[ "${RUNTIME}" == crio ]] && sock=crio.sock
	cat >"${DIR}/env" <<EOF
# Written by hack/runtime/setup.sh; source it.
NETNS_PIN_RT_DIR=${DIR}
RUNTIME=${RUNTIME}
EOF
	if [[ "${RUNTIME}" == crio ]]; then
		cat >>"${DIR}/env" <<EOF
CRIO_PID=${RUNTIME_PID}
CRIO_LOG=${DIR}/crio.log
CRIO_CONFIG=${DIR}/crio/crio.conf
CRIO_VERSION=${CRIO_VERSION}
CRIO_COMMIT=${CRIO_COMMIT}
EOF
	else
		cat >>"${DIR}/env" <<EOF
CONTAINERD_PID=${CONTAINERD_PID}
CONTAINERD_ADDRESS=${DIR}/run/containerd.sock
EOF
	fi
	cat >>"${DIR}/env" <<EOF
CONTAINER_RUNTIME_ENDPOINT=unix://${DIR}/run/${sock}
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
		sed -n '2,45p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		[[ -n "${arg}" ]] || exit 2
		return 0
		;;
	tools)
		tools
		log "tools ready ($((($(now_ms) - start))) ms)"
		return 0
		;;
	esac
	RUNTIME="${2:-containerd}"
	[[ "${RUNTIME}" == containerd || "${RUNTIME}" == crio ]] || die "unknown runtime ${RUNTIME} (containerd|crio)"
	mkdir -p "${arg}"
	DIR="$(cd "${arg}" && pwd)"
	# the socket path must fit in sun_path (108 bytes)
	((${#DIR} < 80)) || die "<dir> ${DIR} is too long for a unix socket path under it"
	tools
	local t_tools
	t_tools="$(now_ms)"
	if [[ "${RUNTIME}" == crio ]]; then
		write_config_crio
		start_crio
	else
		write_config
		start_containerd
		import_images
	fi
	CRI_CONFIG_FILE="${DIR}/crictl.yaml" wait_until "${SETUP_TIMEOUT}" "the CRI plugin" \
		"${RT_BIN}/crictl" --config "${DIR}/crictl.yaml" info
	write_env
	log "ready in $((($(now_ms) - start))) ms (tools $((t_tools - start)) ms, ${RUNTIME} $(($(now_ms) - t_tools)) ms): source ${DIR}/env"
}

main "$@"

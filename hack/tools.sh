#!/usr/bin/env bash
# hack/tools.sh - install what netns-pin's build, demo and tests need.
#
# Usage: hack/tools.sh [packages|tools|helm|plugin|all|env]
#
#   packages  Debian packages the tests and the demo run (ip, nsenter, unshare,
#             mount, jq, make, a C compiler for -race, qemu-system-x86 and
#             busybox-static for the kernel guest, skopeo to read the
#             installer image, qemu-user-static for the arm64 unit tests); `apt-get update` runs
#             once, and only when something is missing.
#   tools     pinned cnitool and reference CNI plugins, built from the Go module
#             proxy into .cache/ (skipped when the stamp for that version exists),
#             and helm (below).
#   helm      helm ${HELM_VERSION} alone, built from the Go module proxy into
#             .cache/bin/helm: the chart's lint, template and package
#             (deploy/chart/, make manifests, make chart).
#   plugin    go build ./plugin -> bin/netns-pin (copied to .cache/cni/bin/) and
#             ./cmd/netns-pin-agent -> bin/netns-pin-agent (the node agent) and
#             ./cmd/netns-pin-controller -> bin/netns-pin-controller (the cluster
#             controller), all stamped with hack/version.sh.
#   all       packages + tools + plugin (the default).
#   env       print the variables the e2e suite reads (eval-able).
#
# Everything lands in the git-ignored folder .cache/:
#   .cache/bin/cnitool          cnitool ${CNITOOL_VERSION}
#   .cache/bin/staticcheck      staticcheck ${STATICCHECK_VERSION}
#   .cache/bin/helm             helm ${HELM_VERSION}
#   .cache/cni/bin/<plugin>     reference plugins ${PLUGINS_VERSION} + netns-pin
#   .cache/stamps/              one file per built tool version
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ROOT}/.cache"
BIN_DIR="${CACHE}/bin"
CNI_BIN_DIR="${CACHE}/cni/bin"
STAMP_DIR="${CACHE}/stamps"

CNITOOL_VERSION="v1.3.1"
PLUGINS_VERSION="v1.10.0"
STATICCHECK_VERSION="v0.8.2"
# Helm 4 from the Go module proxy (helm.sh/helm/v4): no release binary is
# downloaded. deploy/'s tests run this binary (deploy/chart_test.go).
HELM_VERSION="v4.3.2"
# golang.org/x/perf has no release tags: a pinned pseudo-version.
# Reference plugins (path under github.com/containernetworking/plugins/plugins/).
PLUGINS=(
	main/bridge
	main/macvlan
	main/ipvlan
	main/ptp
	main/loopback
	ipam/host-local
	ipam/static
	meta/tuning
)

# command -> Debian package providing it
PACKAGES=(
	ip:iproute2
	nsenter:util-linux
	unshare:util-linux
	mountpoint:util-linux
	findmnt:util-linux
	mount:mount
	umount:mount
	jq:jq
	make:make
	gcc:gcc
	# the kernel-client suite's guest (hack/vm/build.sh builds the rest)
	qemu-system-x86_64:qemu-system-x86
	# CRI-O (hack/runtime/crio.sh): its monitor and OCI runtime, and
	# pkg-config for its cgo parts
	conmon:conmon
	runc:runc
	pkg-config:pkg-config
	# make image's test reads the OCI archive with skopeo; make arm64 runs
	# unit tests under qemu-user
	skopeo:skopeo
	qemu-aarch64-static:qemu-user-static
	# hack/kube/node.sh: the API server's port relayed into each extra
	# node's network namespace
	socat:socat
)

LOG_PREFIX="tools"
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_go() {
	if ! command -v go >/dev/null 2>&1; then
		if [[ -x /usr/local/go/bin/go ]]; then
			export PATH="/usr/local/go/bin:${PATH}"
		else
			log "go not found (expected at /usr/local/go/bin/go)"
			exit 1
		fi
	fi
}

ensure_packages() {
	local missing=() entry cmd pkg
	for entry in "${PACKAGES[@]}"; do
		cmd="${entry%%:*}"
		pkg="${entry#*:}"
		if ! command -v "${cmd}" >/dev/null 2>&1; then
			[[ " ${missing[*]-} " == *" ${pkg} "* ]] || missing+=("${pkg}")
		fi
	done
	# the race detector needs libc headers besides gcc
	if ! [[ -e /usr/include/stdlib.h ]]; then
		missing+=(libc6-dev)
	fi
	# the guest's busybox must be the static one (the busybox package is not)
	if [[ "$(dpkg-query -W -f='${db:Status-Status}' busybox-static 2>/dev/null)" != installed ]]; then
		missing+=(busybox-static)
	fi
	# CRI-O's build links libseccomp and sqlite3 (hack/runtime/crio.sh)
	[[ -e /usr/include/seccomp.h ]] || missing+=(libseccomp-dev)
	[[ -e /usr/include/sqlite3.h ]] || missing+=(libsqlite3-dev)
	apt_install "${missing[@]}"
}

# go_install <name> <tag> <gobin> <pkg@version>...
# The stamp ${STAMP_DIR}/<name>@<tag> records a finished install of that tag.
go_install() {
	local name="$1" stamp="${STAMP_DIR}/$1@$2" gobin="$3"
	shift 3
	if [[ -f "${stamp}" ]]; then
		local want have=1
		for want in "$@"; do
			want="${want%@*}"
			[[ -x "${gobin}/${want##*/}" ]] || have=0
		done
		if ((have)); then
			return 0
		fi
	fi
	log "go install $* -> ${gobin#"${ROOT}"/}"
	mkdir -p "${gobin}" "${STAMP_DIR}"
	# Outside the module: `go install pkg@version` builds exactly that version.
	(cd / && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="${gobin}" go install -trimpath "$@")
	rm -f "${STAMP_DIR}/${name}@"*
	printf '%s\n' "$@" >"${stamp}"
}

install_tools() {
	ensure_go
	go_install cnitool "${CNITOOL_VERSION}" "${BIN_DIR}" \
		"github.com/containernetworking/cni/cnitool@${CNITOOL_VERSION}"
	go_install staticcheck "${STATICCHECK_VERSION}" "${BIN_DIR}" \
		"honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
	local pkgs=() p sum
	for p in "${PLUGINS[@]}"; do
		pkgs+=("github.com/containernetworking/plugins/plugins/${p}@${PLUGINS_VERSION}")
	done
	# the stamp names the version and the plugin set
	sum="$(printf '%s\n' "${PLUGINS[@]}" | cksum | cut -d' ' -f1)"
	go_install cni-plugins "${PLUGINS_VERSION}-${sum}" "${CNI_BIN_DIR}" "${pkgs[@]}"
	install_helm
}

install_helm() {
	ensure_go
	go_install helm "${HELM_VERSION}" "${BIN_DIR}" "helm.sh/helm/v4/cmd/helm@${HELM_VERSION}"
}

build_plugin() {
	ensure_go
	mkdir -p "${ROOT}/bin" "${CNI_BIN_DIR}"
	log "go build ./plugin -> bin/netns-pin and .cache/cni/bin/netns-pin; ./cmd/netns-pinctl -> bin/netns-pinctl; ./cmd/netns-pin-agent -> bin/netns-pin-agent; ./cmd/netns-pin-controller -> bin/netns-pin-controller"
	local ldflags
	ldflags="$("${ROOT}/hack/version.sh" ldflags)"
	(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/netns-pin ./plugin)
	# the operator's commands and the sweeper: never in the CNI bin folder
	(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/netns-pinctl ./cmd/netns-pinctl)
	# the node agent (client-go, Prometheus): its own program, no CNI plugin
	(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/netns-pin-agent ./cmd/netns-pin-agent)
	# the cluster controller (client-go): its own program too
	(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/netns-pin-controller ./cmd/netns-pin-controller)
	# copy + rename so that a running test never sees a half-written binary
	cp -f "${ROOT}/bin/netns-pin" "${CNI_BIN_DIR}/.netns-pin.tmp"
	mv -f "${CNI_BIN_DIR}/.netns-pin.tmp" "${CNI_BIN_DIR}/netns-pin"
}

print_env() {
	printf 'export NETNS_PIN_CNI_PATH=%q\n' "${CNI_BIN_DIR}"
	printf 'export NETNS_PIN_CNITOOL=%q\n' "${BIN_DIR}/cnitool"
}

main() {
	local what="${1:-all}"
	case "${what}" in
	packages) ensure_packages ;;
	tools) install_tools ;;
	helm) install_helm ;;
	plugin) build_plugin ;;
	all)
		ensure_packages
		install_tools
		build_plugin
		;;
	env) print_env ;;
	-h | --help | help) sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
	*)
		log "unknown target ${what} (packages|tools|helm|plugin|all|env)"
		exit 2
		;;
	esac
}

main "$@"

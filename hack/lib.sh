# hack/lib.sh - what the scripts of hack/ share (sourced, not run): logging
# under the script's prefix, a millisecond clock, installing missing Debian
# packages, and the containerd configuration of the runtime and Kubernetes
# suites. Set LOG_PREFIX before sourcing.
# shellcheck shell=bash

log() { printf '[%s] %s\n' "${LOG_PREFIX:-hack}" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
now_ms() { date +%s%3N; }

# apt_install PKG...: install the packages (none: nothing to do), as root,
# after one `apt-get update`.
apt_install() {
	(($# > 0)) || return 0
	[[ "$(id -u)" == 0 ]] || die "missing Debian packages $* and not root: install them with apt-get"
	log "apt-get install $*"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq </dev/null >/dev/null
	apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null
}

# stamp_ok NAME VERSION [FILE]: a build of that version finished (its stamp
# is in STAMP_DIR) and FILE, when given, is executable.
stamp_ok() { [[ -f "${STAMP_DIR}/$1@$2" && (-z "${3:-}" || -x "${3:-}") ]]; }
# stamp_set NAME VERSION: the build of that version finished.
stamp_set() {
	rm -f "${STAMP_DIR}/$1@"*
	mkdir -p "${STAMP_DIR}"
	date -u +%FT%TZ >"${STAMP_DIR}/$1@$2"
}

# wait_until SECONDS DESCRIPTION CMD...: poll CMD until it succeeds. Each
# round first calls WAIT_ALIVE (a function that dies when what is awaited
# cannot come any more), when set; a timeout calls WAIT_DIAG first.
wait_until() {
	local timeout="$1" what="$2" deadline
	shift 2
	deadline=$(($(now_ms) + timeout * 1000))
	until "$@" >/dev/null 2>&1; do
		[[ -z "${WAIT_ALIVE:-}" ]] || "${WAIT_ALIVE}" "${what}"
		if (($(now_ms) > deadline)); then
			[[ -z "${WAIT_DIAG:-}" ]] || "${WAIT_DIAG}"
			die "timed out after ${timeout}s waiting for ${what}"
		fi
		sleep 0.1
	done
}

# containerd_config DIR SOCK PAUSE_IMAGE CNI_BIN CNI_CONF [CRI_EXTRA [RUNC_EXTRA]]:
# prints a containerd 1.6/1.7 configuration with its root, state, opt and
# socket under DIR, the CRI plugin on PAUSE_IMAGE, runc without systemd and
# one CNI configuration from CNI_CONF; CRI_EXTRA and RUNC_EXTRA are more
# lines for the CRI section and runc's options.
containerd_config() {
	local dir="$1" sock="$2" pause="$3" bin="$4" conf="$5" cri_extra="${6:-}" runc_extra="${7:-}"
	cat <<EOC
version = 2
root = "${dir}/containerd/root"
state = "${dir}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "${sock}"

[ttrpc]
  address = "${sock}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "${dir}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${pause}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
${cri_extra}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
${runc_extra}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${bin}"
    conf_dir = "${conf}"
    max_conf_num = 1
EOC
}

# hack/runtime/crio.sh - CRI-O for the runtime and Kubernetes suites (sourced
# by hack/runtime/setup.sh and hack/kube/up.sh, not run). Set ROOT, CACHE and
# LOG_PREFIX and source hack/lib.sh before sourcing.
#
# What it builds, from the Go module proxy, into .cache/crio/bin (cached by
# the module version and commit below):
#   crio      github.com/cri-o/cri-o ./cmd/crio
#   copyimg   its ./test/copyimg, to import the local pause image (an OCI
#             layout) into CRI-O's storage: no registry is reachable
#   pinns     its pinns/src/*.c (C, in the module zip), the helper CRI-O
#             pins a sandbox's namespaces with
# conmon and runc are Debian's. Debian's crun 1.8.1 refuses the OCI
# runtime-spec 1.2 that CRI-O writes ("unknown version specified").
#
# The version: the module proxy serves one version of github.com/cri-o/cri-o,
# v1.34.0, and that is not the v1.34.0 release: its .info names commit
# 5dd0877c91adb0d2b253f8009d12bb6531ca0104 (main of 2025-05-14, before
# 1.34's release branch; the tag moved after the proxy cached it). The
# binary reports "1.34.0"; its server/sandbox_network.go networkStop is
# v1.33.0's, which calls CNI DEL again at every StopPodSandbox while the
# network is not stopped, like CRI-O up to 1.32.7 and 1.33.3. `go install
# ...@v1.34.0` asks the proxy for the version list, which it refuses, so the
# build runs inside the module cache (its go.mod has no replace directives).
# shellcheck shell=bash

CRIO_MODULE="github.com/cri-o/cri-o"
CRIO_VERSION="v1.34.0"
CRIO_COMMIT="5dd0877c91adb0d2b253f8009d12bb6531ca0104"
# cri-o's Makefile BUILDTAGS without btrfs, devicemapper and gpgme (their C
# libraries are not needed for the vfs driver and an accept-anything policy)
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper seccomp libsqlite3"
CRIO_BIN="${CACHE}/crio/bin"

crio_packages() {
	local missing=() entry
	for entry in conmon:conmon runc:runc gcc:gcc pkg-config:pkg-config jq:jq; do
		if ! command -v "${entry%%:*}" >/dev/null 2>&1; then
			[[ " ${missing[*]-} " == *" ${entry#*:} "* ]] || missing+=("${entry#*:}")
		fi
	done
	# headers the cgo parts link against (seccomp, the sqlite3 store of
	# containers/storage), and libc.a for the static pinns
	[[ -e /usr/include/seccomp.h ]] || missing+=(libseccomp-dev)
	[[ -e /usr/include/sqlite3.h ]] || missing+=(libsqlite3-dev)
	[[ -e /usr/include/stdlib.h ]] || missing+=(libc6-dev)
	apt_install "${missing[@]}"
}

# build_crio: crio, copyimg and pinns into CRIO_BIN, unless that version's
# stamp is there.
build_crio() {
	local stamp="${CRIO_VERSION}-${CRIO_COMMIT:0:12}"
	stamp_ok crio "${stamp}" "${CRIO_BIN}/crio" && [[ -x "${CRIO_BIN}/copyimg" && -x "${CRIO_BIN}/pinns" ]] && return 0
	crio_packages
	log "go mod download ${CRIO_MODULE}@${CRIO_VERSION} (commit ${CRIO_COMMIT:0:12}); go build ./cmd/crio ./test/copyimg; gcc pinns"
	local json dir hash start
	start="$(now_ms)"
	json="$(cd / && go mod download -json "${CRIO_MODULE}@${CRIO_VERSION}")"
	dir="$(jq -r .Dir <<<"${json}")"
	hash="$(jq -r '.Origin.Hash // empty' <<<"${json}")"
	[[ -d "${dir}" ]] || die "${CRIO_MODULE}@${CRIO_VERSION} not downloaded: ${json}"
	# The proxy's .info names the commit; a different one is another CRI-O.
	[[ -z "${hash}" || "${hash}" == "${CRIO_COMMIT}" ]] ||
		die "${CRIO_MODULE}@${CRIO_VERSION} is commit ${hash}, not ${CRIO_COMMIT}: check its CNI DEL behaviour before changing CRIO_COMMIT"
	mkdir -p "${CRIO_BIN}"
	local cmd
	for cmd in cmd/crio test/copyimg; do
		(cd "${dir}" && CGO_ENABLED=1 go build -mod=readonly -trimpath -tags "${CRIO_TAGS}" \
			-o "${CRIO_BIN}/.$(basename "${cmd}").tmp" "./${cmd}")
		mv -f "${CRIO_BIN}/.$(basename "${cmd}").tmp" "${CRIO_BIN}/$(basename "${cmd}")"
	done
	gcc -std=c99 -O2 -static -o "${CRIO_BIN}/.pinns.tmp" "${dir}"/pinns/src/*.c
	mv -f "${CRIO_BIN}/.pinns.tmp" "${CRIO_BIN}/pinns"
	stamp_set crio "${stamp}"
	log "crio ${CRIO_VERSION} built in $((($(now_ms) - start) / 1000)) s"
}

# crio_runc_wrapper FILE: the OCI runtime CRI-O runs, runc with the
# bundle's process.oomScoreAdj removed, and its hugepage limits where the
# host has no hugetlb cgroup controller. CRI-O gives the infra container
# -998 (and the kubelet gives Guaranteed containers -997); lowering a
# process's oom_score_adj takes CAP_SYS_RESOURCE, which root in a container
# host does not always have (runc then fails "failed to update
# /proc/self/oom_score_adj"). containerd's restrict_oom_score_adj does the
# same clamp; CRI-O has no such setting. A privileged container gets every
# capability CRI-O knows, and runc fails "unable to apply caps" for one the
# runtime's own bounding set lacks: the wrapper keeps the capabilities of
# that set, as containerd does for privileged containers (its
# WithAllCurrentCapabilities). CRI-O writes the kubelet's hugepage
# limits (0 for every page size) into each container's spec, and runc fails
# "cannot set hugetlb limit" on a cgroup v1 host without that controller;
# containerd writes none.
crio_runc_wrapper() {
	cat >"$1" <<'EOF'
#!/bin/sh
# Written by hack/runtime/crio.sh: runc without the bundle's oomScoreAdj,
# capabilities beyond this process's bounding set, and hugepage limits
# without a hugetlb controller.
bundle=
prev=
for a in "$@"; do
	case "$prev" in --bundle | -b) bundle="$a" ;; esac
	case "$a" in --bundle=*) bundle="${a#--bundle=}" ;; esac
	prev="$a"
done
# the capability names by number (linux/capability.h, 0 to 40)
caps='["CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_DAC_READ_SEARCH","CAP_FOWNER","CAP_FSETID","CAP_KILL",
"CAP_SETGID","CAP_SETUID","CAP_SETPCAP","CAP_LINUX_IMMUTABLE","CAP_NET_BIND_SERVICE","CAP_NET_BROADCAST",
"CAP_NET_ADMIN","CAP_NET_RAW","CAP_IPC_LOCK","CAP_IPC_OWNER","CAP_SYS_MODULE","CAP_SYS_RAWIO",
"CAP_SYS_CHROOT","CAP_SYS_PTRACE","CAP_SYS_PACCT","CAP_SYS_ADMIN","CAP_SYS_BOOT","CAP_SYS_NICE",
"CAP_SYS_RESOURCE","CAP_SYS_TIME","CAP_SYS_TTY_CONFIG","CAP_MKNOD","CAP_LEASE","CAP_AUDIT_WRITE",
"CAP_AUDIT_CONTROL","CAP_SETFCAP","CAP_MAC_OVERRIDE","CAP_MAC_ADMIN","CAP_SYSLOG","CAP_WAKE_ALARM",
"CAP_BLOCK_SUSPEND","CAP_AUDIT_READ","CAP_PERFMON","CAP_BPF","CAP_CHECKPOINT_RESTORE"]'
bnd="$(awk '$1 == "CapBnd:" {print $2}' /proc/self/status)"
filter='del(.process.oomScoreAdj)
| ($bnd | ascii_downcase | explode | reduce .[] as $c (0; . * 16 + (if $c >= 97 then $c - 87 else $c - 48 end))) as $n
| [range(0; $caps | length) | select(((($n / pow(2; .)) | floor) % 2) == 1) | $caps[.]] as $ok
| if .process.capabilities then .process.capabilities |= map_values(map(select(. as $c | any($ok[]; . == $c)))) else . end'
if [ ! -d /sys/fs/cgroup/hugetlb ] && [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
	filter="$filter | del(.linux.resources.hugepageLimits)"
fi
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
	jq --arg bnd "$bnd" --argjson caps "$caps" "$filter" "$bundle/config.json" >"$bundle/config.json.tmp" &&
		mv -f "$bundle/config.json.tmp" "$bundle/config.json"
fi
exec runc "$@"
EOF
	chmod 0755 "$1"
}

# crio_config DIR SOCK PAUSE_IMAGE CNI_BIN CNI_CONF: prints a crio.conf with
# every file of CRI-O under DIR/crio (root, runroot, the socket SOCK,
# namespaces, state, logs, exits, attach sockets, hooks, the signature
# policy) and nothing under /etc/crio or /var/lib/containers. What CRI-O
# keeps in /var/lib/cni/results (libcni's cache, fixed) is shared with
# other runtimes: network names must differ.
crio_config() {
	local dir="$1" sock="$2" pause="$3" bin="$4" conf="$5" d="$1/crio"
	cat <<EOC
[crio]
root = "${d}/root"
runroot = "${d}/runroot"
storage_driver = "vfs"
log_dir = "${d}/pods"
version_file = "${d}/run/version"
version_file_persist = "${d}/lib/version"
clean_shutdown_file = "${d}/lib/clean.shutdown"
internal_wipe = true

[crio.api]
listen = "${sock}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
namespaces_dir = "${d}/ns"
pinns_path = "${CRIO_BIN}/pinns"
container_exits_dir = "${d}/exits"
container_attach_socket_dir = "${d}/attach"
hooks_dir = ["${d}/hooks.d"]
log_level = "info"
# no iptables or nft on the node for hostPort mappings, no irqbalance
disable_hostport_mapping = true
irqbalance_config_restore_file = "disable"
selinux = false
apparmor_profile = ""
seccomp_profile = ""

[crio.runtime.runtimes.runc]
runtime_path = "${d}/runc-wrapper"
runtime_type = "oci"
runtime_root = "${d}/runc"
monitor_path = "$(command -v conmon)"

[crio.image]
pause_image = "${pause}"
signature_policy = "${d}/policy.json"
signature_policy_dir = "${d}/policies"

[crio.network]
network_dir = "${conf}"
plugin_dirs = ["${bin}"]

[crio.metrics]
enable_metrics = false

# NRI's socket is a fixed path of the host (/var/run/nri/nri.sock)
[crio.nri]
enable_nri = false
EOC
}

# crio_prepare DIR: the folders, the policy and the runc wrapper crio_config
# names.
crio_prepare() {
	local d="$1/crio"
	mkdir -p "${d}/root" "${d}/runroot" "${d}/pods" "${d}/run" "${d}/lib" "${d}/ns" "${d}/exits" \
		"${d}/attach" "${d}/hooks.d" "${d}/runc" "${d}/policies"
	printf '{"default":[{"type":"insecureAcceptAnything"}]}\n' >"${d}/policy.json"
	crio_runc_wrapper "${d}/runc-wrapper"
}

# crio_import_image DIR OCI_TAR REF: imports the OCI archive (made by
# hack/runtime/ociimage, its one image tagged as REF's tag) into the storage
# of the CRI-O of DIR as REF. copyimg also keeps a blob cache in
# /var/lib/containers/cache (containers/image's default for root): it runs
# in a mount namespace of its own where that folder is a tmpfs, or, where
# the host has none, /var/lib is read-only (containers/image then keeps the
# cache in memory) but for DIR.
crio_import_image() {
	local dir="$1" tar="$2" ref="$3" layout
	layout="${dir}/crio/images/$(basename "${tar}" .tar)"
	rm -rf "${layout}"
	mkdir -p "${layout}"
	tar -xf "${tar}" -C "${layout}"
	# shellcheck disable=SC2016
	unshare -m sh -ec '
		mount --make-rprivate /
		mount --bind "$1" "$1"
		if [ -d /var/lib/containers ]; then
			mount -t tmpfs tmpfs /var/lib/containers
		else
			mount --rbind /var/lib /var/lib
			mount -o remount,bind,ro /var/lib
		fi
		shift
		exec "$@"' copyimg "${dir}" \
		"${CRIO_BIN}/copyimg" --root "${dir}/crio/root" --runroot "${dir}/crio/runroot" --storage-driver vfs \
		--signature-policy "${dir}/crio/policy.json" \
		--import-from "oci:${layout}:${ref##*:}" --image-name "${ref}" >/dev/null
}

#!/usr/bin/env bash
# hack/vm/build.sh - a qemu guest with Debian's stock 6.1 kernel, for the
# kernel-client suite (test/kernel): krbd and CephFS kernel mounts need the
# rbd, libceph and ceph modules, which a container host's kernel may lack.
#
# Usage: hack/vm/build.sh            build (or reuse) the guest, print its folder
#        hack/vm/build.sh --packages install the Debian packages only
#
# Everything comes from Debian's repositories:
#   1. qemu-system-x86 and busybox-static are installed as packages (apt).
#   2. The kernel package ${VM_KERNEL_PACKAGE} (${VM_KERNEL_VERSION}) is
#      downloaded with `apt-get download` and unpacked with `dpkg-deb -x` into
#      .cache/vm/<version>/ - never installed on this host, never in /boot.
#      `busybox depmod` writes modules.dep; the ELF vmlinux is cut out of the
#      bzImage (its payload is xz) so that qemu boots it through PVH (faster
#      than the bzImage's own decompressor under TCG).
#   3. initramfs.cpio.gz: static busybox (linked at boot), iproute2's `ip`
#      with the shared libraries it needs (busybox's ip has no `netns`), the
#      modules the suite loads with their modules.dep closure, in load order
#      in /etc/modules.load, and hack/vm/init as /init.
#
# The guest's own programs (netns-pin, cnitool, the reference plugins, the
# scenario runner) are added by the suite as a second cpio archive appended
# to this one (the kernel unpacks concatenated archives in order), so a new
# plugin build does not rebuild this image.
#
# Output, in .cache/vm/<kernel version>/:
#   vmlinux  initramfs.cpio.gz  kernel.release  stamp
# The stamp holds the inputs (kernel package, busybox and iproute2 versions,
# this script and hack/vm/init); a different input rebuilds the image.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="${ROOT}/hack/vm"
LOG_PREFIX="vm"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

# Debian bookworm's kernel ABI 6.1.0-57 (linux 6.1.192-3). A newer ABI
# replaces it in the archive from time to time: set both variables (from
# `apt-cache search '^linux-image-6\.1\.0-[0-9]+-amd64$'` and
# `apt-cache policy <package>`) to build another one.
VM_KERNEL_PACKAGE="${VM_KERNEL_PACKAGE:-linux-image-6.1.0-57-amd64}"
VM_KERNEL_VERSION="${VM_KERNEL_VERSION:-6.1.192-3}"

# Modules the guest loads (names as in modules.dep, without .ko); their
# dependencies come from modules.dep. crc32c_generic: the TCG CPU has no
# SSE4.2; gcm/ghash/ctr: ms_mode=secure; veth/bridge: the CNI bridge plugin.
MODULES=(
	virtio_pci virtio_net 9pnet_virtio 9p
	crc32c_generic libcrc32c gf128mul ghash-generic ctr gcm dns_resolver
	libceph rbd ceph
	veth bridge
)

export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH}"

ensure_packages() {
	local missing=() p
	for p in qemu-system-x86 busybox-static xz-utils; do
		if [[ "$(dpkg-query -W -f='${db:Status-Status}' "${p}" 2>/dev/null)" != installed ]]; then
			missing+=("${p}")
		fi
	done
	apt_install "${missing[@]}"
}

pkg_version() { dpkg-query -W -f='${Version}' "$1"; }

if [[ "${1:-}" == --packages ]]; then
	ensure_packages
	exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [--packages]"
ensure_packages

OUT="${ROOT}/.cache/vm/${VM_KERNEL_VERSION}"
stamp="$(
	printf 'kernel %s %s\nbusybox-static %s\niproute2 %s\n' "${VM_KERNEL_PACKAGE}" "${VM_KERNEL_VERSION}" \
		"$(pkg_version busybox-static)" "$(pkg_version iproute2)"
	sha256sum "${HERE}/build.sh" "${HERE}/init" | sed "s|${ROOT}/||"
)"
if [[ -f "${OUT}/stamp" && "$(cat "${OUT}/stamp")" == "${stamp}" && -s "${OUT}/vmlinux" && -s "${OUT}/initramfs.cpio.gz" ]]; then
	echo "${OUT}"
	exit 0
fi

t0="$(now_ms)"
rm -rf "${OUT}"
mkdir -p "${OUT}/deb"
# --- 2. the kernel package ----------------------------------------------------
deb="$(ls "${ROOT}/.cache/vm/debs/${VM_KERNEL_PACKAGE}_${VM_KERNEL_VERSION}_amd64.deb" 2>/dev/null || true)"
if [[ -z "${deb}" ]]; then
	mkdir -p "${ROOT}/.cache/vm/debs"
	log "apt-get download ${VM_KERNEL_PACKAGE}=${VM_KERNEL_VERSION}"
	if ! (cd "${ROOT}/.cache/vm/debs" && apt-get download -q "${VM_KERNEL_PACKAGE}=${VM_KERNEL_VERSION}" </dev/null >/dev/null 2>&1); then
		apt-get update -qq </dev/null >/dev/null
		(cd "${ROOT}/.cache/vm/debs" && apt-get download -q "${VM_KERNEL_PACKAGE}=${VM_KERNEL_VERSION}" </dev/null >/dev/null) ||
			die "apt-get download ${VM_KERNEL_PACKAGE}=${VM_KERNEL_VERSION} failed: the archive may serve a newer ABI now (apt-cache search '^linux-image-6\\.1\\.0-[0-9]+-amd64\$'); set VM_KERNEL_PACKAGE and VM_KERNEL_VERSION"
	fi
	deb="${ROOT}/.cache/vm/debs/${VM_KERNEL_PACKAGE}_${VM_KERNEL_VERSION}_amd64.deb"
	[[ -f "${deb}" ]] || die "apt-get download left no ${deb}"
fi
dpkg-deb -x "${deb}" "${OUT}/deb"
kver="$(ls "${OUT}/deb/lib/modules")"
[[ "$(wc -w <<<"${kver}")" == 1 ]] || die "${deb}: want one folder under lib/modules, got: ${kver}"
printf '%s\n' "${kver}" >"${OUT}/kernel.release"
mods="${OUT}/deb/lib/modules/${kver}"
busybox depmod -b "${OUT}/deb" "${kver}"
[[ -s "${mods}/modules.dep" ]] || die "busybox depmod wrote no ${mods}/modules.dep"

# vmlinux: the bzImage's payload is an xz stream; cut at its magic and
# decompress (xz ignores the bytes after the stream: --single-stream).
bz="${OUT}/deb/boot/vmlinuz-${kver}"
off="$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "${bz}" | head -n1 | cut -d: -f1)"
[[ -n "${off}" ]] || die "${bz}: no xz payload found"
tail -c +"$((off + 1))" "${bz}" | xz -dc --single-stream >"${OUT}/vmlinux" 2>/dev/null || true
[[ "$(head -c 4 "${OUT}/vmlinux" | od -An -c | tr -d ' ')" == '177ELF' ]] || die "${bz}: the xz payload is not an ELF vmlinux"

# --- 3. initramfs -------------------------------------------------------------
rootfs="${OUT}/rootfs"
mkdir -p "${rootfs}"/{bin,sbin,etc,proc,sys,dev,run,tmp,share,lib64,usr/lib/x86_64-linux-gnu,lib/x86_64-linux-gnu}
cp /bin/busybox "${rootfs}/bin/busybox"
# (ldd fails on a static program: "not a dynamic executable")
if ldd "${rootfs}/bin/busybox" >/dev/null 2>&1; then die "/bin/busybox is not static (install busybox-static)"; fi
ln -s busybox "${rootfs}/bin/sh"
# the kernel calls /sbin/modprobe (crypto algorithms): busybox's
ln -s ../bin/busybox "${rootfs}/sbin/modprobe"
# iproute2's ip with its libraries
cp "$(command -v ip)" "${rootfs}/sbin/ip"
ldd "$(command -v ip)" | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
	real="$(readlink -f "${lib}")"
	mkdir -p "${rootfs}$(dirname "${lib}")"
	cp "${real}" "${rootfs}${lib}"
done
cp "${HERE}/init" "${rootfs}/init"
chmod 0755 "${rootfs}/init"

# modules: the closure of MODULES in load order (dependencies first)
declare -A path_of=() deps_of=() seen=()
while IFS= read -r line; do
	m="${line%%:*}"
	name="$(basename "${m}" .ko)"
	path_of["${name//-/_}"]="${m}"
	deps_of["${m}"]="${line#*:}"
done <"${mods}/modules.dep"
order=()
visit() {
	local m="$1" d i deps
	[[ -z "${seen[${m}]:-}" ]] || return 0
	seen["${m}"]=1
	read -ra deps <<<"${deps_of[${m}]}"
	# modprobe loads the last listed dependency first
	for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
		visit "${deps[i]}"
	done
	order+=("${m}")
}
for name in "${MODULES[@]}"; do
	p="${path_of[${name//-/_}]:-}"
	[[ -n "${p}" ]] || die "module ${name} not in ${VM_KERNEL_PACKAGE}'s modules.dep"
	visit "${p}"
done
for m in "${order[@]}"; do
	mkdir -p "${rootfs}/lib/modules/${kver}/$(dirname "${m}")"
	cp "${mods}/${m}" "${rootfs}/lib/modules/${kver}/${m}"
done
printf '%s\n' "${order[@]}" >"${rootfs}/etc/modules.load"
cp "${mods}/modules.dep" "${rootfs}/lib/modules/${kver}/"

(cd "${rootfs}" && find . -mindepth 1 | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"${OUT}/initramfs.cpio.gz"
rm -rf "${rootfs}" "${OUT}/deb"
printf '%s\n' "${stamp}" >"${OUT}/stamp"
log "guest kernel ${kver} (${VM_KERNEL_PACKAGE} ${VM_KERNEL_VERSION}), ${#order[@]} modules, initramfs $(du -h "${OUT}/initramfs.cpio.gz" | cut -f1) in $((($(now_ms) - t0) / 1000))s: ${OUT}"
echo "${OUT}"

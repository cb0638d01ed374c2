#!/usr/bin/env bash
# hack/vm/build.sh - qemu guests with Debian's stock kernels 6.1 and 6.12,
# for the kernel-client suite (test/kernel): krbd and CephFS kernel mounts
# need the rbd, libceph and ceph modules, which a container host's kernel may
# lack.
#
# Usage: hack/vm/build.sh [KERNEL...]  build (or reuse) the guest of each
#                                      KERNEL (6.1, 6.12; none: all), print
#                                      its folder, one a line
#        hack/vm/build.sh --packages   install the Debian packages only
#
# Everything comes from Debian's repositories:
#   1. qemu-system-x86, busybox-static, xz-utils and zstd are installed as
#      packages (apt).
#   2. Each kernel package of KERNELS (below) is downloaded with `apt-get
#      download` and unpacked with `dpkg-deb -x` into .cache/vm/<version>/ -
#      never installed on this host, never in /boot. `busybox depmod` writes
#      modules.dep; the ELF vmlinux is cut out of the bzImage (its payload is
#      xz on 6.1, zstd on 6.12) so that qemu boots it through PVH (faster than
#      the bzImage's own decompressor under TCG).
#   3. initramfs.cpio.gz: static busybox (linked at boot), iproute2's `ip`
#      with the shared libraries it needs (busybox's ip has no `netns`), the
#      modules the suite loads with their modules.dep closure (decompressed:
#      6.12 ships .ko.xz, which busybox's insmod does not read), in load
#      order in /etc/modules.load, and hack/vm/init as /init.
#
# The guest's own programs (netns-pin, cnitool, the reference plugins, the
# scenario runner) are added by the suite as a second cpio archive appended
# to this one (the kernel unpacks concatenated archives in order), so a new
# plugin build does not rebuild this image.
#
# Output, in .cache/vm/<package version>/:
#   vmlinux  initramfs.cpio.gz  kernel.release  stamp
# The stamp holds the inputs (kernel package, busybox and iproute2 versions,
# this script and hack/vm/init); a different input rebuilds the image.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="${ROOT}/hack/vm"
LOG_PREFIX="vm"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

# The guest kernels, one line each: name, Debian package, its exact version.
# Both are served by bookworm's own archive: 6.1 is bookworm's stock kernel;
# 6.12, the long-term kernel most distributions now ship, comes from
# bookworm-security (source linux-signed-6.12-amd64), which a stock bookworm
# has in its sources. A newer ABI replaces a package in the archive from time
# to time: list them with
#   apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$'
#   apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-amd64$'
# and `apt-cache policy <package>`, then change the line here (and refresh
# inuse/testdata/kernel: docs/testing.md), or set VM_KERNEL_6_1 or
# VM_KERNEL_6_12 to <package>=<version> for one build.
KERNELS=(
	"6.1 linux-image-6.1.0-57-amd64 6.1.192-3"
	"6.12 linux-image-6.12.117+deb12-amd64 6.12.117-1~deb12u1"
)

# Modules the guest loads (names as in modules.dep, without .ko); their
# dependencies come from modules.dep, and a kernel that has one built in
# (modules.builtin: 6.12's virtio_pci and ctr) needs no file for it.
# crc32c_generic: the TCG CPU has no SSE4.2; gcm/ghash/ctr: ms_mode=secure;
# veth/bridge: the CNI bridge plugin.
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
	for p in qemu-system-x86 busybox-static xz-utils zstd; do
		if [[ "$(dpkg-query -W -f='${db:Status-Status}' "${p}" 2>/dev/null)" != installed ]]; then
			missing+=("${p}")
		fi
	done
	apt_install "${missing[@]}"
}

pkg_version() { dpkg-query -W -f='${Version}' "$1"; }

# kernel_line NAME: "package version" of that kernel (VM_KERNEL_<name with _>
# overrides KERNELS' line).
kernel_line() {
	local name="$1" line var n pkg ver
	var="VM_KERNEL_${name//./_}"
	if [[ -n "${!var:-}" ]]; then
		[[ "${!var}" =~ ^[^=]+=[^=]+$ ]] || die "${var}=${!var}: want <package>=<version>"
		echo "${!var%%=*} ${!var#*=}"
		return
	fi
	for line in "${KERNELS[@]}"; do
		read -r n pkg ver <<<"${line}"
		if [[ "${n}" == "${name}" ]]; then
			echo "${pkg} ${ver}"
			return
		fi
	done
	die "no kernel ${name} (KERNELS has: $(printf '%s\n' "${KERNELS[@]}" | cut -d' ' -f1 | tr '\n' ' '))"
}

# download PACKAGE VERSION: the .deb in .cache/vm/debs (kept: a rebuild of
# the image does not download it again), its path on stdout.
download() {
	local pkg="$1" ver="$2" debs="${ROOT}/.cache/vm/debs" deb
	deb="${debs}/${pkg}_${ver}_amd64.deb"
	if [[ -f "${deb}" ]]; then
		echo "${deb}"
		return
	fi
	mkdir -p "${debs}"
	log "apt-get download ${pkg}=${ver}"
	local t0
	t0="$(now_ms)"
	if ! (cd "${debs}" && apt-get download -q "${pkg}=${ver}" </dev/null >/dev/null 2>&1); then
		apt-get update -qq </dev/null >/dev/null
		(cd "${debs}" && apt-get download -q "${pkg}=${ver}" </dev/null >/dev/null) ||
			die "apt-get download ${pkg}=${ver} failed: the archive may serve a newer ABI now (apt-cache search --names-only '^linux-image-6\\.1\\.0-[0-9]+-amd64\$' or '^linux-image-6\\.12\\.[0-9]+\\+deb12-amd64\$'; 6.12 comes from bookworm-security); change KERNELS in hack/vm/build.sh"
	fi
	[[ -f "${deb}" ]] || die "apt-get download left no ${deb}"
	log "${pkg}=${ver}: $(du -h "${deb}" | cut -f1) in $((($(now_ms) - t0) / 1000))s"
	echo "${deb}"
}

# extract_vmlinux BZIMAGE OUT: the ELF vmlinux inside a bzImage. The setup
# header tells where the compressed payload starts (setup_sects at 0x1f1,
# payload_offset at 0x248) and how long it is (payload_length at 0x24c); its
# last 4 bytes are the decompressed size (the kernel build appends it), which
# the result must have: a cut stream fails here, not at boot.
extract_vmlinux() {
	local bz="$1" out="$2" sects off len size magic unpack
	le() { od -An -tu"$2" -j"$1" -N"$2" "${bz}" | tr -d ' '; }
	sects="$(le $((0x1f1)) 1)"
	((sects > 0)) || sects=4
	off=$(((sects + 1) * 512 + $(le $((0x248)) 4)))
	len="$(le $((0x24c)) 4)"
	size="$(od -An -tu4 -j$((off + len - 4)) -N4 "${bz}" | tr -d ' ')"
	magic="$(od -An -tx1 -j"${off}" -N4 "${bz}" | tr -d ' ')"
	case "${magic}" in
	fd377a58) unpack=(xz -dc) ;;
	28b52ffd) unpack=(zstd -dcq) ;;
	*) die "${bz}: payload at ${off} is neither xz nor zstd (magic ${magic})" ;;
	esac
	dd if="${bz}" iflag=skip_bytes,count_bytes skip="${off}" count="$((len - 4))" bs=1M status=none |
		"${unpack[@]}" >"${out}" || die "${bz}: ${unpack[*]} of the payload failed"
	[[ "$(head -c 4 "${out}" | od -An -c | tr -d ' ')" == '177ELF' ]] || die "${bz}: the payload is not an ELF vmlinux"
	[[ "$(stat -c %s "${out}")" == "${size}" ]] || die "${bz}: vmlinux has $(stat -c %s "${out}") bytes, the bzImage says ${size}"
}

# stamp_of PACKAGE VERSION: the inputs of that kernel's image.
stamp_of() {
	printf 'kernel %s %s\nbusybox-static %s\niproute2 %s\n' "$1" "$2" \
		"$(pkg_version busybox-static)" "$(pkg_version iproute2)"
	sha256sum "${HERE}/build.sh" "${HERE}/init" | sed "s|${ROOT}/||"
}

# up_to_date DIR STAMP: DIR holds an image built from the inputs STAMP.
up_to_date() {
	[[ -f "$1/stamp" && "$(cat "$1/stamp")" == "$2" && -s "$1/vmlinux" && -s "$1/initramfs.cpio.gz" ]]
}

# build NAME: the guest of kernel NAME, its folder on stdout.
build() {
	local name="$1" line pkg ver out stamp t0 deb kver mods rootfs
	# (an assignment, not a here-string: kernel_line's die must end the script)
	line="$(kernel_line "${name}")"
	read -r pkg ver <<<"${line}"
	[[ -n "${pkg}" && -n "${ver}" && "${ver}" != */* && "${ver}" != .* ]] || die "kernel ${name}: package '${pkg}', version '${ver}'"
	out="${ROOT}/.cache/vm/${ver}"
	stamp="$(stamp_of "${pkg}" "${ver}")"
	if up_to_date "${out}" "${stamp}"; then
		echo "${out}"
		return
	fi

	t0="$(now_ms)"
	rm -rf "${out}"
	mkdir -p "${out}/deb"
	# --- 2. the kernel package --------------------------------------------
	deb="$(download "${pkg}" "${ver}")"
	dpkg-deb -x "${deb}" "${out}/deb"
	kver="$(ls "${out}/deb/lib/modules")"
	[[ "$(wc -w <<<"${kver}")" == 1 ]] || die "${deb}: want one folder under lib/modules, got: ${kver}"
	printf '%s\n' "${kver}" >"${out}/kernel.release"
	mods="${out}/deb/lib/modules/${kver}"
	busybox depmod -b "${out}/deb" "${kver}"
	[[ -s "${mods}/modules.dep" ]] || die "busybox depmod wrote no ${mods}/modules.dep"
	extract_vmlinux "${out}/deb/boot/vmlinuz-${kver}" "${out}/vmlinux"

	# --- 3. initramfs -----------------------------------------------------
	rootfs="${out}/rootfs"
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

	# modules: the closure of MODULES in load order (dependencies first),
	# each stored as a plain .ko
	local -A path_of=() deps_of=() seen=() builtin=()
	local m n p order=()
	while IFS= read -r line; do
		m="${line%%:*}"
		n="$(basename "${m}")"
		n="${n%.xz}"
		n="${n%.ko}"
		path_of["${n//-/_}"]="${m}"
		deps_of["${m}"]="${line#*:}"
	done <"${mods}/modules.dep"
	while IFS= read -r m; do
		n="$(basename "${m}" .ko)"
		builtin["${n//-/_}"]=1
	done <"${mods}/modules.builtin"
	visit() {
		local m="$1" d i deps
		[[ -z "${seen[${m}]:-}" ]] || return 0
		seen["${m}"]=1
		read -ra deps <<<"${deps_of[${m}]}"
		# modprobe loads the last listed dependency first
		for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
			visit "${deps[i]}"
		done
		order+=("${m%.xz}")
	}
	for n in "${MODULES[@]}"; do
		p="${path_of[${n//-/_}]:-}"
		if [[ -z "${p}" ]]; then
			[[ -n "${builtin[${n//-/_}]:-}" ]] || die "module ${n} neither in ${pkg}'s modules.dep nor in its modules.builtin"
			continue
		fi
		visit "${p}"
	done
	for m in "${order[@]}"; do
		mkdir -p "${rootfs}/lib/modules/${kver}/$(dirname "${m}")"
		if [[ -f "${mods}/${m}.xz" ]]; then
			xz -dc "${mods}/${m}.xz" >"${rootfs}/lib/modules/${kver}/${m}"
		else
			cp "${mods}/${m}" "${rootfs}/lib/modules/${kver}/${m}"
		fi
	done
	printf '%s\n' "${order[@]}" >"${rootfs}/etc/modules.load"
	# modules.dep (for busybox's modprobe, which the kernel calls) and
	# modules.builtin, naming the files as stored
	sed 's/\.ko\.xz\b/.ko/g' "${mods}/modules.dep" >"${rootfs}/lib/modules/${kver}/modules.dep"
	cp "${mods}/modules.builtin" "${rootfs}/lib/modules/${kver}/"

	(cd "${rootfs}" && find . -mindepth 1 | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"${out}/initramfs.cpio.gz"
	rm -rf "${rootfs}" "${out}/deb"
	printf '%s\n' "${stamp}" >"${out}/stamp"
	log "guest kernel ${kver} (${pkg} ${ver}), ${#order[@]} modules, initramfs $(du -h "${out}/initramfs.cpio.gz" | cut -f1) in $((($(now_ms) - t0) / 1000))s: ${out}"
	echo "${out}"
}

if [[ "${1:-}" == --packages ]]; then
	[[ $# -eq 1 ]] || die "usage: $0 --packages"
	ensure_packages
	exit 0
fi
ensure_packages
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
	for line in "${KERNELS[@]}"; do
		names+=("${line%% *}")
	done
fi
for name in "${names[@]}"; do
	[[ "${name}" != -* ]] || die "usage: $0 [--packages | KERNEL...]"
	# the packages first, one apt-get at a time (its fallback runs apt-get update)
	line="$(kernel_line "${name}")"
	read -r pkg ver <<<"${line}"
	up_to_date "${ROOT}/.cache/vm/${ver}" "$(stamp_of "${pkg}" "${ver}")" || download "${pkg}" "${ver}" >/dev/null
done
# then the images at once, each in its own folder (unpacking and
# decompressing is one core's work each); their folders in the order asked
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
pids=()
for i in "${!names[@]}"; do
	build "${names[i]}" >"${tmp}/${i}" &
	pids+=("$!")
done
failed=0
for i in "${!names[@]}"; do
	wait "${pids[i]}" || failed=1
done
((failed == 0)) || die "building the guest of ${names[*]} failed (its error above)"
for i in "${!names[@]}"; do
	cat "${tmp}/${i}"
done

#!/usr/bin/env bash
# hack/image.sh - make image: the installer image, without a container
# engine, as one OCI archive.
#
#   .cache/image/netns-pin.oci.tar   an OCI image layout in a tar file (what
#                                    `skopeo copy oci-archive:...` and
#                                    `ctr images import` read): one image
#                                    index, a manifest for each of
#                                    IMAGE_PLATFORMS, each one layer with
#                                    the static binaries at / and nothing
#                                    else (no shell), entrypoint /netns-pinctl
#   .cache/image/bin/<os>-<arch>/    the binaries it holds
#
# It prints the image reference and the index's digest, the digest a
# registry shows for the pushed tag. The same commit gives the same
# digests: the binaries are built with -trimpath, CGO_ENABLED=0 and the
# version stamp of hack/version.sh; every file of the image has the
# commit's time (SOURCE_DATE_EPOCH), owner 0:0, and the archive's entries
# are sorted (hack/runtime/ociimage).
#
# Environment:
#   IMAGE_DIR        output folder (default .cache/image)
#   IMAGE_NAME       repository of the reference written into the archive
#                    (default registry.example.org/netns-pin, deploy/'s)
#   IMAGE_BINS       what goes into the image, NAME=PACKAGE[:TAGS] words
#                    (default: netns-pin=./plugin netns-pinctl=./cmd/netns-pinctl
#                    netns-pin-agent=./cmd/netns-pin-agent
#                    netns-pin-controller=./cmd/netns-pin-controller);
#                    one more binary is one more word
#   IMAGE_PLATFORMS  default: linux/amd64 linux/arm64
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE_DIR="${IMAGE_DIR:-${ROOT}/.cache/image}"
IMAGE_NAME="${IMAGE_NAME:-registry.example.org/netns-pin}"
IMAGE_BINS="${IMAGE_BINS:-netns-pin=./plugin netns-pinctl=./cmd/netns-pinctl netns-pin-agent=./cmd/netns-pin-agent netns-pin-controller=./cmd/netns-pin-controller}"
IMAGE_PLATFORMS="${IMAGE_PLATFORMS:-linux/amd64 linux/arm64}"

LOG_PREFIX="image"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

export PATH="/usr/local/go/bin:${PATH}"

version="$("${ROOT}/hack/version.sh" version)"
commit="$("${ROOT}/hack/version.sh" commit)"
epoch="$("${ROOT}/hack/version.sh" epoch)"
ldflags="-s -w $("${ROOT}/hack/version.sh" ldflags)"
ref="${IMAGE_NAME}:${version}"

mkdir -p "${IMAGE_DIR}"
rm -rf "${IMAGE_DIR}/bin"
platform_args=()
for plat in ${IMAGE_PLATFORMS}; do
	goos="${plat%/*}" goarch="${plat#*/}"
	out="${IMAGE_DIR}/bin/${goos}-${goarch}"
	mkdir -p "${out}"
	for spec in ${IMAGE_BINS}; do
		name="${spec%%=*}" pkg="${spec#*=}" tags=""
		if [[ "${pkg}" == *:* ]]; then
			tags="${pkg#*:}" pkg="${pkg%%:*}"
		fi
		[[ -n "${name}" && "${name}" != "${spec}" && -n "${pkg}" ]] || die "IMAGE_BINS: ${spec}: want NAME=PACKAGE[:TAGS]"
		(cd "${ROOT}" && CGO_ENABLED=0 GOOS="${goos}" GOARCH="${goarch}" \
			go build -trimpath -buildvcs=false -tags "${tags}" -ldflags "${ldflags}" -o "${out}/${name}" "${pkg}")
	done
	platform_args+=(-platform "${plat}=${out}")
done

digest="$(cd "${ROOT}" && go run ./hack/runtime/ociimage "${platform_args[@]}" \
	-entrypoint /netns-pinctl -cmd version -epoch "${epoch}" -ref "${ref}" \
	-annotation "org.opencontainers.image.version=${version}" \
	-annotation "org.opencontainers.image.revision=${commit}" \
	-annotation "org.opencontainers.image.created=$(date -u -d "@${epoch}" +%FT%TZ)" \
	-annotation "org.opencontainers.image.source=https://github.com/netns-pin/netns-pin" \
	-annotation "org.opencontainers.image.licenses=Apache-2.0" \
	-o "${IMAGE_DIR}/netns-pin.oci.tar")"
printf '%s\n' "${digest}" >"${IMAGE_DIR}/netns-pin.oci.tar.digest"
log "${ref} (${IMAGE_PLATFORMS// /, }) -> ${IMAGE_DIR#"${ROOT}"/}/netns-pin.oci.tar"
printf '%s@%s\n' "${ref}" "${digest}"

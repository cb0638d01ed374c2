#!/usr/bin/env bash
# hack/kube/build.sh - build (or find in the cache) everything the one-node
# cluster of hack/kube/up.sh runs, at pinned versions, from the Go module
# proxy and Debian's packages:
#
#   .cache/kube/k8s-<version>/   kube-apiserver, kube-controller-manager,
#                                kube-scheduler, kubelet, kubectl and etcd, one
#                                `go build` of the wrapper module hack/kube/k8s
#   .cache/kube/whereabouts-<v>/ whereabouts (IPAM plugin), ip-control-loop
#                                (its controller), its CRDs and its
#                                doc/crds/daemonset-install.yaml (whose RBAC
#                                test/runtime applies as it is)
#   .cache/kube/registry-<v>/   distribution's registry, the node's registry
#                                for the chart scenario (hack/kube/up.sh)
#   .cache/kube/images/*.tar     OCI archives: the pause image, a busybox image
#                                and whereabouts' controller (hack/kube/whereabouts.sh)
#   .cache/image/netns-pin.oci.tar
#                                netns-pin's image: make image (hack/image.sh),
#                                the archive that ships, installed as it is
#   .cache/kube/upgrade-from-<commit>/netns-pin.oci.tar
#                                the image of the earlier commit named in
#                                hack/kube/upgrade-from, built by that commit's
#                                own hack/image.sh from a git worktree (kept:
#                                once per commit)
#   .cache/kube/bin/             links to the binaries of the pinned versions
#
# Multus (thin plugin), crictl, containerd and runc come from
# hack/runtime/setup.sh tools, the reference CNI plugins and netns-pin from
# hack/tools.sh. A warm run only checks stamps; Kubernetes cold takes about
# ten minutes on two cores.
set -euo pipefail
# shellcheck source=hack/kube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/kube/whereabouts.sh
source "${ROOT}/hack/kube/whereabouts.sh"

ensure_packages() {
	local missing=()
	command -v openssl >/dev/null || missing+=(openssl)
	[[ -x /bin/busybox ]] || missing+=(busybox-static)
	apt_install "${missing[@]}"
}

# Kubernetes reports the version it was built as through these variables;
# kubectl version and the node's kubeletVersion read them.
k8s_ldflags() {
	local minor="${K8S_VERSION#v1.}" ld="-s -w" p
	minor="${minor%%.*}"
	for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		ld+=" -X ${p}.gitVersion=${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor} -X ${p}.gitTreeState=clean"
	done
	echo "${ld}"
}

# build_k8s: make tools starts it early, on its own (build.sh k8s), beside
# the other tool builds, whose downloads, links and apt runs leave a core
# idle; the lock makes the main run wait for that build, then find its stamp.
build_k8s() {
	mkdir -p "${KUBE_CACHE}"
	(
		flock 9
		build_k8s_locked
	) 9>"${KUBE_CACHE}/.k8s.lock"
}

build_k8s_locked() {
	local sum
	sum="$(cat "${ROOT}/hack/kube/k8s/go.sum" | cksum | cut -d' ' -f1)"
	stamp_ok k8s "${K8S_VERSION}-${sum}" && [[ -x "${K8S_BIN}/etcd" ]] && return 0
	log "go build Kubernetes ${K8S_VERSION} and etcd ${ETCD_VERSION} (cold: ~10 min) -> ${K8S_BIN#"${ROOT}"/}"
	local start tmp="${K8S_BIN}.tmp"
	start="$(now_ms)"
	rm -rf "${tmp}"
	mkdir -p "${tmp}"
	(cd "${ROOT}/hack/kube/k8s" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$(k8s_ldflags)" -o "${tmp}/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl \
		go.etcd.io/etcd/server/v3)
	# go build names etcd's main package after its module's path ("server")
	mv "${tmp}/server" "${tmp}/etcd"
	rm -rf "${K8S_BIN}"
	mv "${tmp}" "${K8S_BIN}"
	stamp_set k8s "${K8S_VERSION}-${sum}"
	log "Kubernetes built in $((($(now_ms) - start) / 1000)) s"
}

# whereabouts' go.mod has a replace directive, so `go install pkg@version`
# refuses it: build its commands from a scratch module that requires it,
# the CNI plugin (cmd) and the controller ip-control-loop (cmd/controlloop,
# hack/kube/whereabouts.sh), both of WHEREABOUTS_VERSION.
build_whereabouts() {
	stamp_ok whereabouts "${WHEREABOUTS_VERSION}+controlloop" && [[ -x "${WHEREABOUTS_BIN}/whereabouts" && -x "${WHEREABOUTS_BIN}/ip-control-loop" ]] && return 0
	log "go build ${WHEREABOUTS_MODULE}/cmd and cmd/controlloop @${WHEREABOUTS_VERSION}"
	local src="${KUBE_CACHE}/src/whereabouts-${WHEREABOUTS_VERSION}" dir
	rm -rf "${src}"
	mkdir -p "${src}" "${WHEREABOUTS_BIN}"
	(cd "${src}" && go mod init netns-pin.local/whereabouts >/dev/null 2>&1 &&
		go get "${WHEREABOUTS_MODULE}/cmd@${WHEREABOUTS_VERSION}" "${WHEREABOUTS_MODULE}/cmd/controlloop@${WHEREABOUTS_VERSION}" >/dev/null 2>&1 &&
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${WHEREABOUTS_BIN}/whereabouts" "${WHEREABOUTS_MODULE}/cmd" &&
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${WHEREABOUTS_BIN}/ip-control-loop" "${WHEREABOUTS_MODULE}/cmd/controlloop")
	dir="$(whereabouts_src_dir)"
	cp "${dir}"/doc/crds/whereabouts.cni.cncf.io_*.yaml "${WHEREABOUTS_BIN}/"
	chmod 0644 "${WHEREABOUTS_BIN}"/*.yaml
	stamp_set whereabouts "${WHEREABOUTS_VERSION}+controlloop"
}

# whereabouts_manifests: the module's doc/crds/daemonset-install.yaml
# beside the binaries (test/runtime applies its ServiceAccount, ClusterRole
# and ClusterRoleBinding as they are), from the module cache, the CRDs too
# when missing: a cache built before this copied the CRDs only.
whereabouts_manifests() {
	[[ -s "${WHEREABOUTS_BIN}/daemonset-install.yaml" ]] && compgen -G "${WHEREABOUTS_BIN}/whereabouts.cni.cncf.io_*.yaml" >/dev/null && return 0
	local dir
	dir="$(cd / && go mod download -json "${WHEREABOUTS_MODULE}@${WHEREABOUTS_VERSION}" | jq -r .Dir)"
	[[ -d "${dir}" ]] || die "whereabouts module not downloaded (${dir})"
	mkdir -p "${WHEREABOUTS_BIN}"
	cp "${dir}"/doc/crds/daemonset-install.yaml "${dir}"/doc/crds/whereabouts.cni.cncf.io_*.yaml "${WHEREABOUTS_BIN}/"
	chmod 0644 "${WHEREABOUTS_BIN}"/*.yaml
}

# multus_crd: the NetworkAttachmentDefinition CRD as Multus ships it (the
# first document of its thin DaemonSet manifest).
multus_crd() {
	[[ -s "${KUBE_CACHE}/nad-crd-${MULTUS_VERSION}.yaml" ]] && return 0
	local dir
	dir="$(cd / && go mod download -json "${MULTUS_MODULE}@${MULTUS_VERSION}" | jq -r .Dir)"
	awk 'BEGIN{RS="\n---\n"} /kind: CustomResourceDefinition/ {print; exit}' \
		"${dir}/deployments/multus-daemonset.yml" >"${KUBE_CACHE}/nad-crd-${MULTUS_VERSION}.yaml"
	grep -q 'network-attachment-definitions.k8s.cni.cncf.io' "${KUBE_CACHE}/nad-crd-${MULTUS_VERSION}.yaml" ||
		die "no NetworkAttachmentDefinition CRD in Multus ${MULTUS_VERSION}'s deployments/multus-daemonset.yml"
}

ociimage() { (cd "${ROOT}" && go run ./hack/runtime/ociimage "$@"); }

# busybox_args: -add/-symlink flags for Debian's static busybox and all its
# applets under /bin.
busybox_args() {
	local a
	echo "-add /bin/busybox=/bin/busybox"
	for a in $(/bin/busybox --list); do
		[[ "${a}" == busybox ]] || echo "-symlink /bin/${a}=busybox"
	done
}

# Images: no registry is reachable, so each is an OCI archive made here.
build_images() {
	local sum
	mkdir -p "${IMAGES}" "${KUBE_CACHE}/bin"
	sum="$(cat "${ROOT}/hack/runtime/pause/main.go" "${ROOT}/hack/runtime/ociimage/main.go" /bin/busybox | cksum | cut -d' ' -f1)"
	stamp_ok kube-images "${sum}" && [[ -f "${IMAGES}/busybox.tar" ]] && return 0
	log "OCI archives: ${PAUSE_IMAGE}, ${BUSYBOX_IMAGE}"
	(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "${KUBE_CACHE}/bin/pause" ./hack/runtime/pause)
	ociimage -bin "${KUBE_CACHE}/bin/pause" -ref "${PAUSE_IMAGE}" -o "${IMAGES}/pause.tar"
	# shellcheck disable=SC2046
	ociimage -bin /bin/busybox -name /bin/busybox $(busybox_args | grep -v '^-add') -cmd sh -ref "${BUSYBOX_IMAGE}" -o "${IMAGES}/busybox.tar"
	rm -f "${IMAGES}/netns-pin.tar" # the image of make build's binaries, before make image's
	stamp_set kube-images "${sum}"
}

# build_netns_pin_image: make image, as a release is built (both
# platforms, the same digests as `make image` of this commit); the suite
# imports this archive and installs its linux/amd64 image. The archive of a
# clean commit is the same every time (reproducible): kept while it names
# this commit's version; a tree with changes is built again (16 s warm).
build_netns_pin_image() {
	local v
	v="$("${ROOT}/hack/version.sh" version)"
	if [[ "${v}" != *-dirty && -s "${IMAGE_ARCHIVE}" && -x "${IMAGE_BIN_DIR}/netns-pin" &&
		"$(image_ref "${IMAGE_ARCHIVE}")" == *":${v}" ]]; then
		return 0
	fi
	log "make image (${v}) -> ${IMAGE_ARCHIVE#"${ROOT}"/}"
	bash "${ROOT}/hack/image.sh" >/dev/null
}

# build_upgrade_from_image: the image of the commit of hack/kube/upgrade-from,
# made by that commit's own hack/image.sh in a git worktree (removed
# afterwards), linux/amd64 only; kept under the commit's name.
build_upgrade_from_image() {
	local commit dir
	commit="$(upgrade_from_commit)"
	dir="$(upgrade_from_dir "${commit}")"
	[[ -s "${dir}/netns-pin.oci.tar" ]] && return 0
	git -C "${ROOT}" cat-file -e "${commit}^{commit}" 2>/dev/null ||
		die "hack/kube/upgrade-from names ${commit}, which this clone does not have (a shallow clone? git fetch --unshallow)"
	log "make image of ${commit:0:12} (hack/kube/upgrade-from) in a git worktree -> ${dir#"${ROOT}"/}"
	local src="${dir}/src"
	rm -rf "${dir}"
	mkdir -p "${dir}"
	# -f: a worktree of an interrupted run is registered but gone
	git -C "${ROOT}" worktree add -f --detach "${src}" "${commit}" >/dev/null
	IMAGE_DIR="${dir}/out" IMAGE_PLATFORMS=linux/amd64 bash "${src}/hack/image.sh" >/dev/null
	git -C "${ROOT}" worktree remove --force "${src}"
	mv "${dir}/out/netns-pin.oci.tar" "${dir}/netns-pin.oci.tar"
	rm -rf "${dir}/out"
}

# build_registry: distribution's registry (cmd/registry), which
# hack/kube/up.sh runs on REGISTRY_ADDR; `go install pkg@version` builds
# exactly that version.
build_registry() {
	stamp_ok registry "${REGISTRY_VERSION}" && [[ -x "${REGISTRY_BIN}/registry" ]] && return 0
	log "go install ${REGISTRY_MODULE}/cmd/registry@${REGISTRY_VERSION}"
	mkdir -p "${REGISTRY_BIN}"
	(cd / && CGO_ENABLED=0 GOBIN="${REGISTRY_BIN}" go install -trimpath -ldflags "-s -w" "${REGISTRY_MODULE}/cmd/registry@${REGISTRY_VERSION}")
	stamp_set registry "${REGISTRY_VERSION}"
}

link_bins() {
	local b
	mkdir -p "${KUBE_CACHE}/bin"
	for b in "${K8S_BIN}"/*; do ln -sfn "${b}" "${KUBE_CACHE}/bin/$(basename "${b}")"; done
	ln -sfn "${WHEREABOUTS_BIN}/whereabouts" "${KUBE_CACHE}/bin/whereabouts"
}

main() {
	local start
	start="$(now_ms)"
	[[ "$(id -u)" == 0 ]] || die "run as root"
	if [[ "${1:-}" == k8s ]]; then
		build_k8s
		return
	fi
	ensure_packages
	bash "${ROOT}/hack/runtime/setup.sh" tools
	bash "${ROOT}/hack/tools.sh" plugin
	mkdir -p "${KUBE_CACHE}"
	multus_crd
	build_images
	build_netns_pin_image
	build_upgrade_from_image
	build_whereabouts
	whereabouts_manifests
	build_whereabouts_image
	build_registry
	build_k8s
	link_bins
	log "built in $((($(now_ms) - start) / 1000)) s"
}

main "$@"

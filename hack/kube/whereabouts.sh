# hack/kube/whereabouts.sh - whereabouts' controller (ip-control-loop) on
# the one-node cluster, as whereabouts' own doc/crds/daemonset-install.yaml
# runs it (sourced by hack/kube/build.sh and hack/kube/up.sh, after lib.sh).
#
# The controller is what frees addresses behind the CNI plugin's back: its
# pod informer's DeleteFunc deallocates every address of a pod whose object
# leaves the API (pkg/controlloop/pod.go), and its cron reconciler frees
# addresses whose pod it cannot find (pkg/reconciler). A suite that
# installs only whereabouts' CNI binary cannot see either, so the cluster
# runs both:
#
#   build   cmd/controlloop of the same module and version as the CNI
#           binary (WHEREABOUTS_VERSION, lib.sh), packed as the OCI archive
#           .cache/kube/images/whereabouts.tar (ip-control-loop at
#           /ip-control-loop)
#   up      upstream's ServiceAccount, ClusterRole and ClusterRoleBinding
#           from daemonset-install.yaml as they are, then
#           hack/kube/k8s/whereabouts-controller.yaml (its ConfigMap and
#           DaemonSet, adapted: see there); waits for the log line that says
#           the pod informer watches
# shellcheck shell=bash

WHEREABOUTS_IMAGE="localhost/netns-pin/whereabouts:${WHEREABOUTS_VERSION}"
# The reconciler's schedule during the suite. Upstream's default is daily
# ("30 4 * * *"); whereabouts parses it with robfig/cron's standard parser,
# which also takes descriptors, so "@every 10s" runs it often enough for a
# test to wait for a run rather than for a day.
WHEREABOUTS_RECONCILER_SCHEDULE="${NETNS_PIN_KUBE_WHEREABOUTS_SCHEDULE:-@every 10s}"

# whereabouts_src_dir: the module's folder in the Go module cache (the
# scratch module of build_whereabouts requires it).
whereabouts_src_dir() {
	(cd "${KUBE_CACHE}/src/whereabouts-${WHEREABOUTS_VERSION}" && go list -m -f '{{.Dir}}' "${WHEREABOUTS_MODULE}")
}

# build_whereabouts_image packs ip-control-loop (built by build_whereabouts
# beside the CNI binary) into its OCI archive.
build_whereabouts_image() {
	local sum
	sum="$(cat "${WHEREABOUTS_BIN}/ip-control-loop" "${ROOT}/hack/runtime/ociimage/main.go" | cksum | cut -d' ' -f1)"
	stamp_ok whereabouts-image "${WHEREABOUTS_VERSION}-${sum}" && [[ -f "${IMAGES}/whereabouts.tar" ]] && return 0
	log "OCI archive: ${WHEREABOUTS_IMAGE}"
	mkdir -p "${IMAGES}"
	(cd "${ROOT}" && go run ./hack/runtime/ociimage -bin "${WHEREABOUTS_BIN}/ip-control-loop" -name /ip-control-loop \
		-ref "${WHEREABOUTS_IMAGE}" -o "${IMAGES}/whereabouts.tar")
	stamp_set whereabouts-image "${WHEREABOUTS_VERSION}-${sum}"
}

# whereabouts_controller_up API_PORT: applies the controller (it reaches
# the API server at 127.0.0.1:API_PORT) and waits until it watches pods.
# Idempotent; a changed manifest rolls the DaemonSet.
whereabouts_controller_up() {
	local wdir api_port="$1" start
	start="$(now_ms)"
	wdir="$(whereabouts_src_dir)"
	{
		yaml_docs_of_kind ServiceAccount "${wdir}/doc/crds/daemonset-install.yaml"
		yaml_docs_of_kind ClusterRoleBinding "${wdir}/doc/crds/daemonset-install.yaml"
		yaml_docs_of_kind ClusterRole "${wdir}/doc/crds/daemonset-install.yaml"
	} | kubectl_ apply -f - >/dev/null
	sed -e "s#@IMAGE@#${WHEREABOUTS_IMAGE}#" -e "s#@SCHEDULE@#${WHEREABOUTS_RECONCILER_SCHEDULE}#" \
		-e "s#@CNI_CONF_DIR@#${CNI_CONF_DIR}#" -e "s#@API_PORT@#${api_port}#" \
		"${ROOT}/hack/kube/k8s/whereabouts-controller.yaml" | kubectl_ apply -f - >/dev/null
	kubectl_ -n kube-system rollout status daemonset/whereabouts --timeout=180s >/dev/null
	# It logs "starting network controller", waits for its informers'
	# caches (pods of this node, NADs, IPPools), then reads its cron
	# schedule ("using expression: ..."): from that line on a deleted pod is
	# seen and the reconciler is scheduled.
	wait_until 60 "whereabouts' controller watching pods" whereabouts_controller_watching
	log "whereabouts' controller watching pods, reconciler \"${WHEREABOUTS_RECONCILER_SCHEDULE}\" ($(($(now_ms) - start)) ms)"
}

whereabouts_controller_watching() {
	local logs
	logs="$(kubectl_ -n kube-system logs daemonset/whereabouts 2>/dev/null)" || return 1
	grep -q 'starting network controller' <<<"${logs}" && grep -q 'using expression: ' <<<"${logs}"
}

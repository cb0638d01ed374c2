#!/usr/bin/env bash
# hack/chart.sh - make chart: the Helm chart deploy/chart/netns-pin as a
# package, beside make image's archive.
#
#   .cache/chart/netns-pin-<version>.tgz   `helm package` of the chart, its
#                                          version and appVersion those of
#                                          Chart.yaml (the release's)
#
# It prints the package's path and its sha256. The same commit gives the
# same bytes: helm writes the entries in the order it walks the chart
# (sorted), mode 0644, owner 0:0 and, with SOURCE_DATE_EPOCH (the
# commit's time, hack/version.sh epoch), that time for every entry
# (helm's package action, Chart.StampModTimes); its gzip header has no
# time. deploy/chart_test.go packages twice and compares.
#
# Environment:
#   CHART_DIR   output folder (default .cache/chart)
#   HELM        the helm binary (default .cache/bin/helm, hack/tools.sh helm)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART_DIR="${CHART_DIR:-${ROOT}/.cache/chart}"
HELM="${HELM:-${ROOT}/.cache/bin/helm}"

LOG_PREFIX="chart"
# shellcheck source=hack/lib.sh
source "${ROOT}/hack/lib.sh"

if [[ ! -x "${HELM}" ]]; then
	"${ROOT}/hack/tools.sh" helm
fi
epoch="$("${ROOT}/hack/version.sh" epoch)"
mkdir -p "${CHART_DIR}"
out="$(SOURCE_DATE_EPOCH="${epoch}" "${HELM}" package "${ROOT}/deploy/chart/netns-pin" --destination "${CHART_DIR}")"
# helm says "Successfully packaged chart and saved it to: <path>"
tgz="${out##*: }"
[[ -f "${tgz}" ]] || die "helm package said: ${out}"
digest="sha256:$(sha256sum "${tgz}" | cut -d' ' -f1)"
log "deploy/chart/netns-pin -> ${tgz#"${ROOT}"/}"
printf '%s %s\n' "${tgz}" "${digest}"

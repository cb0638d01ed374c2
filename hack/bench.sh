#!/usr/bin/env bash
# hack/bench.sh - what netns-pin adds to pod start and teardown, measured
# against baselines (run by `make bench`, as root).
#
# Builds the do-nothing chained plugin (test/baseline), the test binary of
# inuse/ and the runner (hack/bench), then runs the runner, which installs
# every plugin it compares by copying it into one folder (as the installer
# DaemonSet does), measures them interleaved and prints one markdown table
# of medians and ratios and a PASS/over line per ceiling (also kept in
# .cache/bench/last.md):
#
#   1. passthrough ADD and DEL (a pod that is no holder): netns-pin vs the
#      do-nothing plugin vs tuning
#   2. holder ADD and DEL (unused) vs the do-nothing plugin, real netns from
#      `ip netns add`
#   3. peak RSS of netns-pin (ru_maxrss of the probe runs of 1 and 2)
#   4. what a user sees: bridge + host-local and macvlan + host-local through
#      cnitool, ADD+DEL, the do-nothing plugin last vs netns-pin last
#   5. the in-use check of an unused pin at node scale (inuse's
#      BenchmarkCheckNode: 5,000 processes, 500 mounts, 100 rbd devices)
#
# Environment: BENCHTIME (-benchtime of 5, 200ms), BENCHCOUNT (samples of 5,
# 10), BENCH_SCALE (multiplies the rounds of 1, 2 and 4; 0.1 for a smoke
# run), BENCH_FLAGS (more runner flags), BENCH_BEFORE (a git revision: its
# plugin, built from `git archive` of it the way hack/tools.sh builds this
# tree's, is measured in the same rounds, and every figure and ceiling line
# shows it beside this tree's; so is its BenchmarkCheckNode when it has one).
#
# Everything made on the host carries the prefix printed at the start and is
# removed at the end, also when the runner fails or is interrupted.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="/usr/local/go/bin:${PATH}"

BENCHTIME="${BENCHTIME:-200ms}"
BENCHCOUNT="${BENCHCOUNT:-10}"
BENCH_SCALE="${BENCH_SCALE:-1}"
BENCH_FLAGS="${BENCH_FLAGS:-}"
BENCH_BEFORE="${BENCH_BEFORE:-}"
CNI_BIN="${NETNS_PIN_CNI_PATH:-${ROOT}/.cache/cni/bin}"
CNITOOL="${NETNS_PIN_CNITOOL:-${ROOT}/.cache/bin/cnitool}"

log() { printf '[bench] %s\n' "$*" >&2; }

if [[ "$(id -u)" != 0 ]]; then
	log "run as root: the benchmarks make network namespaces, bridges and mounts"
	exit 1
fi

# The binaries `make bench` depends on; build them when run on its own.
if [[ ! -x "${CNITOOL}" || ! -x "${CNI_BIN}/bridge" || ! -x "${CNI_BIN}/macvlan" || ! -x "${CNI_BIN}/host-local" || ! -x "${CNI_BIN}/tuning" ]]; then
	hack/tools.sh packages
	hack/tools.sh tools
fi
if [[ ! -x bin/netns-pin ]]; then
	hack/tools.sh plugin
fi

PREFIX="npb$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/netns-pin-bench.XXXXXX")"
# Fixture trees on tmpfs when there is one: sysfs and debugfs live in memory.
if FIXT="$(mktemp -d /dev/shm/netns-pin-bench.XXXXXX 2>/dev/null)"; then
	:
else
	FIXT="${WORK}/fixtures"
	mkdir -p "${FIXT}"
fi
BUILD="$(mktemp -d "${TMPDIR:-/tmp}/netns-pin-bench-bin.XXXXXX")"
RUNNER_PID=

# sweep removes whatever a runner killed without its own cleanup left:
# mounts below the work folders, network namespaces and links named with
# the prefix, cnitool cache entries; then the folders.
sweep() {
	local rc=$?
	if [[ -n "${RUNNER_PID}" ]] && kill -0 "${RUNNER_PID}" 2>/dev/null; then
		kill -TERM "${RUNNER_PID}" 2>/dev/null || true
		wait "${RUNNER_PID}" 2>/dev/null || true
	fi
	local dir mp ns link
	for dir in "${WORK}" "${FIXT}"; do
		# deepest first; mountinfo escapes spaces as \040 (our paths have none)
		awk -v d="${dir}" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo |
			awk '{ print gsub("/", "/"), $0 }' | sort -rn | cut -d' ' -f2- |
			while read -r mp; do umount -l "${mp}" 2>/dev/null || true; done
	done
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}-" || true); do
		log "sweep: ip netns del ${ns}"
		ip netns del "${ns}" 2>/dev/null || true
	done
	for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}-" || true); do
		log "sweep: ip link del ${link}"
		ip link del "${link}" 2>/dev/null || true
	done
	rm -f /var/lib/cni/results/"${PREFIX}"-* 2>/dev/null || true
	rm -rf "${WORK}" "${FIXT}" "${BUILD}"
	exit "${rc}"
}
trap sweep EXIT
trap 'exit 130' INT TERM HUP

log "building into ${BUILD} (prefix ${PREFIX})"
export CGO_ENABLED=0
go build -trimpath -o "${BUILD}/baseline" ./test/baseline
go build -o "${BUILD}/bench" ./hack/bench
go test -c -o "${BUILD}/inuse.test" ./inuse
BEFORE=()
if [[ -n "${BENCH_BEFORE}" ]]; then
	before="$(git rev-parse --verify "${BENCH_BEFORE}^{commit}")"
	BEFORE=(-before "${BUILD}/netns-pin-before" -before-rev "$(git rev-parse --short "${before}")")
	log "building the plugin of ${BENCH_BEFORE} (${before}) from git archive"
	mkdir "${BUILD}/before"
	git archive "${before}" | tar -x -C "${BUILD}/before"
	(cd "${BUILD}/before" && go build -trimpath -o "${BUILD}/netns-pin-before" \
		-ldflags "-X main.Version=$(git -C "${ROOT}" describe --tags --always "${before}") -X main.Commit=${before}" ./plugin)
	if grep -qs '^func BenchmarkCheckNode' "${BUILD}"/before/inuse/*_test.go; then
		(cd "${BUILD}/before" && go test -c -o "${BUILD}/inuse-before.test" ./inuse)
		BEFORE+=(-inuse-test-before "${BUILD}/inuse-before.test")
	fi
fi

mkdir -p .cache/bench
rev="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ -z "${BENCH_BEFORE}" ]] || rev+=", before: ${BENCH_BEFORE} = $(git rev-parse --short "${BENCH_BEFORE}^{commit}")"
log "running (BENCH_SCALE=${BENCH_SCALE}, BENCHTIME=${BENCHTIME}, BENCHCOUNT=${BENCHCOUNT}, BENCH_BEFORE=${BENCH_BEFORE})"
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
"${BUILD}/bench" \
	-plugin bin/netns-pin -baseline "${BUILD}/baseline" \
	-inuse-test "${BUILD}/inuse.test" -benchtime "${BENCHTIME}" -count "${BENCHCOUNT}" \
	-work "${WORK}" -fixtures "${FIXT}" -prefix "${PREFIX}" -scale "${BENCH_SCALE}" \
	-out .cache/bench/last.md "${BEFORE[@]}" \
	-header "### netns-pin benchmarks (commit ${rev}, $(date -u +%Y-%m-%dT%H:%MZ))" \
	${BENCH_FLAGS} &
RUNNER_PID=$!
wait "${RUNNER_PID}"

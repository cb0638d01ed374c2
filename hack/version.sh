#!/usr/bin/env bash
# hack/version.sh - the version stamp of a build, from git.
#
# Usage: hack/version.sh [version|commit|epoch|ldflags]
#
#   version  `git describe --tags --always --dirty` (v0.1.0 on the tag,
#            v0.1.0-3-gabcdef0 after it, -dirty with uncommitted changes);
#            "dev" outside a git checkout
#   commit   the full commit hash; empty outside git
#   epoch    SOURCE_DATE_EPOCH when set, else the commit's time (seconds):
#            the time of every file of the image, so the same commit gives
#            the same image; 0 outside git
#   ldflags  -X flags that stamp main.Version and main.Commit (the default)
#
# The stamp comes from these flags, not from Go's -buildvcs (CI builds with
# GOFLAGS=-buildvcs=false): the binary says which commit it is in any build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

in_git() { git -C "${ROOT}" rev-parse --is-inside-work-tree >/dev/null 2>&1; }

version() {
	if in_git; then git -C "${ROOT}" describe --tags --always --dirty; else echo dev; fi
}
commit() {
	if in_git; then git -C "${ROOT}" rev-parse HEAD; fi
}
epoch() {
	if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
		echo "${SOURCE_DATE_EPOCH}"
	elif in_git; then
		git -C "${ROOT}" log -1 --format=%ct HEAD
	else
		echo 0
	fi
}

case "${1:-ldflags}" in
version) version ;;
commit) commit ;;
epoch) epoch ;;
ldflags) echo "-X main.Version=$(version) -X main.Commit=$(commit)" ;;
*)
	echo "usage: hack/version.sh [version|commit|epoch|ldflags]" >&2
	exit 2
	;;
esac

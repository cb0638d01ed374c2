#!/usr/bin/env bash
# hack/kube/gomod.sh VERSION - (re)write hack/kube/k8s/, the wrapper module
# that builds Kubernetes VERSION's binaries and etcd with one `go build`.
#
# k8s.io/kubernetes cannot be built with `go install pkg@version`: its go.mod
# points its staging modules (k8s.io/api, k8s.io/client-go, ...) at
# ./staging/src/..., which the module zip does not carry. The wrapper
# requires k8s.io/kubernetes and replaces each staging module by its
# published release (v0.X.Y for Kubernetes v1.X.Y). Run it only to move to
# another Kubernetes version; the result (go.mod, go.sum) is committed.
set -euo pipefail

VERSION="${1:?usage: $0 v1.X.Y}"
STAGING="v0.${VERSION#v1.}"
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/k8s"
export PATH="/usr/local/go/bin:${PATH}" GOFLAGS=-mod=mod

mkdir -p "${DIR}"
cd "${DIR}"
upstream="$(go mod download -json "k8s.io/kubernetes@${VERSION}" | jq -r .GoMod)"
{
	printf 'module github.com/netns-pin/netns-pin/hack/kube/k8s\n\n'
	printf 'go %s\n\n' "$(awk '/^go /{print $2; exit}' "${upstream}")"
	printf 'require k8s.io/kubernetes %s\n\n' "${VERSION}"
	printf 'replace (\n'
	sed -n '/^replace (/,/^)/p' "${upstream}" | awk -v v="${STAGING}" '/=>/{print "\t" $1 " => " $1 " " v}'
	printf ')\n'
} >go.mod
go mod tidy

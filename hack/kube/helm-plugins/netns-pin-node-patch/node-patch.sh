#!/usr/bin/env bash
# The rendered chart on stdin, patched for the suite's node on stdout
# (plugin.yaml).
set -euo pipefail
exec "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../up.sh" node-patch

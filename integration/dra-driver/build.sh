#!/usr/bin/env bash
# build.sh [OUT]: builds dra-driver, numa-shim's sample DRA driver (the Go module in this
# directory, on k8s.io/dynamic-resource-allocation's kubeletplugin library; see main.go), to OUT (default
# $IT_BIN/dra-driver). Static (CGO_ENABLED=0), -trimpath. Skipped when OUT is newer than every
# source file; seconds with the Go module cache warm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/../lib/common.sh"
out=${1:-$IT_BIN/dra-driver}
it_go_module_build "$here" "$out"

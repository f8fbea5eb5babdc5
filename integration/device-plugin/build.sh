#!/usr/bin/env bash
# build.sh [OUT]: builds device-plugin, numa-shim's sample device plugin (the Go module in this
# directory, on k8s.io/kubelet's deviceplugin v1beta1 API; see main.go), to OUT (default
# $IT_BIN/device-plugin). Static (CGO_ENABLED=0), -trimpath. Skipped when OUT is newer than every
# source file; seconds with the Go module cache warm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/../lib/common.sh"
out=${1:-$IT_BIN/device-plugin}
it_go_module_build "$here" "$out"

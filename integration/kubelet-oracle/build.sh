#!/usr/bin/env bash
# build.sh [OUT]: builds kubelet-oracle, the Go module in this directory (the kubelet v1.37.2
# resource managers as a judge, see README.md), to OUT (default $IT_BIN/kubelet-oracle).
# Static (CGO_ENABLED=0), -trimpath. Skipped when OUT is newer than every source file; otherwise
# fast when the Go build cache is warm (the first build compiles k8s.io/kubernetes: minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/../lib/common.sh"
out=${1:-$IT_BIN/kubelet-oracle}
it_go_module_build "$here" "$out"

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
if [[ -x $out && -z $(find "$here" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$out" -print -quit) ]]; then
    exit 0
fi
mkdir -p "$(dirname "$out")"
export PATH=$PATH:/usr/local/go/bin
cd "$here"
CGO_ENABLED=0 go build -trimpath -o "$out.tmp" .
mv "$out.tmp" "$out"

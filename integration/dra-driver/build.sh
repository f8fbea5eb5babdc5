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
if [[ -x $out && -z $(find "$here" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$out" -print -quit) ]]; then
    exit 0
fi
mkdir -p "$(dirname "$out")"
export PATH=$PATH:/usr/local/go/bin
cd "$here"
CGO_ENABLED=0 go build -trimpath -o "$out.tmp" .
mv "$out.tmp" "$out"

#!/usr/bin/env bash
# build-k8s.sh VERSION OUT_DIR CMD... : builds Kubernetes commands (kubelet, kube-apiserver,
# kubectl) of k8s.io/kubernetes VERSION from the Go module proxy into OUT_DIR/<cmd>-VERSION.
#
# The k8s.io/kubernetes module replaces its 33 staging modules (k8s.io/api, client-go, kubelet, ...)
# with ./staging paths that the module zip lacks, so it is built from a throwaway module that
# requires k8s.io/kubernetes VERSION and replaces each staging module with the published v0.N.P.
# Commands already in OUT_DIR are skipped; all missing ones are built in one `go build` so they
# share compiled packages.
set -euo pipefail
version=$1 out=$2
shift 2
mkdir -p "$out"
want=()
for cmd in "$@"; do
    [[ -x $out/$cmd-$version ]] || want+=("$cmd")
done
((${#want[@]})) || exit 0

staging=v0.${version#v1.}
mod=$(mktemp -d "${TMPDIR:-/tmp}/numa-shim-k8s-mod.XXXXXX")
trap 'rm -rf "$mod"' EXIT
cd "$mod"
go mod download -json "k8s.io/kubernetes@$version" >dl.json
gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' dl.json)
{
    echo "module numa-shim-it/k8s-$version"
    grep -E '^(go|godebug) ' "$gomod"
    echo "require k8s.io/kubernetes $version"
    # Every staging replace of the upstream go.mod, pointed at the published module instead.
    sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|replace \1 => \1 '"$staging"'|p' "$gomod"
} >go.mod
pkgs=()
for cmd in "${want[@]}"; do
    pkgs+=("k8s.io/kubernetes/cmd/$cmd")
done
cat >tools.go <<GO
//go:build tools

package tools
GO
for p in "${pkgs[@]}"; do
    echo "import _ \"$p\"" >>tools.go
done
go mod tidy -e >/dev/null 2>&1 || true
GOFLAGS=-mod=mod go mod download >/dev/null
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$(cut -d. -f2 <<<"$version") -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version"
for cmd in "${want[@]}"; do
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$cmd-$version.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$out/$cmd-$version.tmp" "$out/$cmd-$version"
done

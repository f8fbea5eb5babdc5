#!/usr/bin/env bash
# build-etcd.sh VERSION OUT_DIR: builds the etcd server (go.etcd.io/etcd/server/v3 VERSION, whose
# module root is etcd's `main` package) from the Go module proxy into OUT_DIR/etcd-VERSION.
# Skipped when that file exists.
#
# `go install go.etcd.io/etcd/server/v3@VERSION` refuses the module (its go.mod has replace
# directives), so it is built from a throwaway module that requires it, with the local Go
# toolchain (GOTOOLCHAIN=local: the module's `toolchain` line names a newer patch release).
set -euo pipefail
version=$1 out=$2
[[ -x $out/etcd-$version ]] && exit 0
mkdir -p "$out"
mod=$(mktemp -d "${TMPDIR:-/tmp}/numa-shim-etcd-mod.XXXXXX")
trap 'rm -rf "$mod"' EXIT
cd "$mod"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
go mod download -json "go.etcd.io/etcd/server/v3@$version" >dl.json
gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' dl.json)
{
    echo "module numa-shim-it/etcd-$version"
    grep -E '^go ' "$gomod"
    echo "require go.etcd.io/etcd/server/v3 $version"
} >go.mod
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
# The server's own go.sum pins its dependencies; tidy resolves the same versions through MVS.
go mod tidy >/dev/null 2>&1
ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v${version#v}"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/etcd-$version.tmp" go.etcd.io/etcd/server/v3
mv "$out/etcd-$version.tmp" "$out/etcd-$version"

#!/usr/bin/env bash
# build-crio.sh VERSION OUT_DIR: builds CRI-O VERSION (github.com/cri-o/cri-o from the Go module
# proxy) into OUT_DIR/crio-VERSION and its namespace pinner into OUT_DIR/pinns-VERSION. Skips what
# is already there; each file appears only when complete (temp name + rename).
#
# The module has no replace directives, but the proxy does not list its versions (which
# `go install module@version` asks for), so it is built from a throwaway module that requires it. The build
# tags leave out btrfs and devicemapper storage and use the pure-Go OpenPGP signature verifier;
# seccomp needs Debian's libseccomp-dev. pinns is C code in the same module, built with gcc.
set -euo pipefail
version=$1 out=$2
mkdir -p "$out"
[[ -x $out/crio-$version && -x $out/pinns-$version ]] && exit 0

json=$(go mod download -json "github.com/cri-o/cri-o@$version")
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$json")
[[ -d $dir ]] || {
    echo "build-crio.sh: go mod download github.com/cri-o/cri-o@$version failed: $json" >&2
    exit 1
}
if [[ ! -x $out/crio-$version ]]; then
    mod=$(mktemp -d "${TMPDIR:-/tmp}/numa-shim-crio-mod.XXXXXX")
    trap 'rm -rf "$mod"' EXIT
    gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$json")
    {
        echo "module numa-shim-it/crio-$version"
        grep -E '^(go|godebug) ' "$gomod"
        echo "require github.com/cri-o/cri-o $version"
    } >"$mod/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/cri-o/cri-o/cmd/crio"\n' >"$mod/tools.go"
    tags="containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"
    ldflags="-s -w -X github.com/cri-o/cri-o/internal/version.buildDate=1970-01-01T00:00:00Z"
    (
        cd "$mod"
        go mod tidy -e >/dev/null 2>&1 || true
        GOFLAGS=-mod=mod CGO_ENABLED=1 go build -trimpath -tags "$tags" -ldflags "$ldflags" \
            -o "$out/crio-$version.tmp" github.com/cri-o/cri-o/cmd/crio
    )
    mv "$out/crio-$version.tmp" "$out/crio-$version"
fi
if [[ ! -x $out/pinns-$version ]]; then
    # As pinns/Makefile does: static, C99, warnings are errors.
    gcc -std=c99 -Os -Wall -Werror -Wextra -static -o "$out/pinns-$version.tmp" "$dir"/pinns/src/*.c
    strip -s "$out/pinns-$version.tmp"
    mv "$out/pinns-$version.tmp" "$out/pinns-$version"
fi

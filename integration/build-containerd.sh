#!/usr/bin/env bash
# build-containerd.sh VERSION OUT_DIR: builds containerd VERSION and its runc shim of the same
# version from the Go module proxy into OUT_DIR/containerd-VERSION and
# OUT_DIR/containerd-shim-runc-v2-VERSION. Skips what is already there; each file appears only
# when complete (temp name + rename).
#
# v1.x is the module github.com/containerd/containerd, v2.x github.com/containerd/containerd/v2.
# Their go.mod files have exclude directives, so `go install module@version` refuses them: they
# are built from a throwaway module that requires the version. The shim is built static (no cgo),
# as upstream's Makefile does.
set -euo pipefail
version=$1 out=$2
mkdir -p "$out"
[[ -x $out/containerd-$version && -x $out/containerd-shim-runc-v2-$version ]] && exit 0

case $version in
v1.*) module=github.com/containerd/containerd ;;
v2.*) module=github.com/containerd/containerd/v2 ;;
*)
    echo "build-containerd.sh: unsupported version $version" >&2
    exit 1
    ;;
esac
mod=$(mktemp -d "${TMPDIR:-/tmp}/numa-shim-containerd-mod.XXXXXX")
trap 'rm -rf "$mod"' EXIT
cd "$mod"
go mod init numa-shim-it/containerd >/dev/null 2>&1
go get "$module/cmd/containerd@$version" "$module/cmd/containerd-shim-runc-v2@$version" >/dev/null 2>&1 ||
    go get "$module/cmd/containerd@$version" "$module/cmd/containerd-shim-runc-v2@$version"
ldflags="-s -w -X $module/version.Version=$version -X $module/version.Package=$module"
tags=no_btrfs,no_devmapper,no_zfs,no_aufs,urfave_cli_no_docs
if [[ ! -x $out/containerd-$version ]]; then
    go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/containerd-$version.tmp" "$module/cmd/containerd"
    mv "$out/containerd-$version.tmp" "$out/containerd-$version"
fi
if [[ ! -x $out/containerd-shim-runc-v2-$version ]]; then
    CGO_ENABLED=0 go build -trimpath -tags "$tags,no_grpc" -ldflags "$ldflags" \
        -o "$out/containerd-shim-runc-v2-$version.tmp" "$module/cmd/containerd-shim-runc-v2"
    mv "$out/containerd-shim-runc-v2-$version.tmp" "$out/containerd-shim-runc-v2-$version"
fi

#!/usr/bin/env bash
# Installs what the real-runtime harness needs on a clean Debian 12 machine (run as root):
# containerd, runc, CNI plugins, static busybox (test images), shellcheck, and crictl + critest
# v1.37.0 built from the Go module proxy into integration/.work/bin (skipped when already there).
set -euo pipefail
# shellcheck source=integration/lib/common.sh
source "$(dirname "$0")/lib/common.sh"

pkgs=(containerd runc containernetworking-plugins busybox-static shellcheck iproute2 util-linux procps)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    it_log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Debian package starts a system containerd; the harness never uses it and leaves it alone.

export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH
if command -v rustup >/dev/null; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
command -v go >/dev/null || it_die "go is not installed"
mkdir -p "$IT_BIN"
if [[ ! -x $IT_BIN/crictl ]]; then
    it_log "building crictl $CRICTL_VERSION"
    GOBIN=$IT_BIN go install -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
fi
if [[ ! -x $IT_BIN/critest ]]; then
    # critest is cri-tools' compiled Go test binary: build it from a throwaway module.
    it_log "building critest $CRICTL_VERSION"
    mod=$IT_WORK/critest-mod
    rm -rf "$mod"
    mkdir -p "$mod"
    (
        cd "$mod"
        go mod init numa-shim-it/critest >/dev/null 2>&1
        go get -t "sigs.k8s.io/cri-tools/cmd/critest@$CRICTL_VERSION" >/dev/null 2>&1
        go test -c -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" -o "$IT_BIN/critest" sigs.k8s.io/cri-tools/cmd/critest
    )
fi
if [[ -n ${IT_CONTAINERD_VERSION:-} && ! -x $IT_BIN/containerd-$IT_CONTAINERD_VERSION ]]; then
    # containerd 1.7 (implements GetContainerEvents, which crictl events needs). Its go.mod has
    # exclude directives, so `go install` refuses it: it is built from a throwaway module too.
    it_log "building containerd $IT_CONTAINERD_VERSION"
    mod=$IT_WORK/containerd-mod
    rm -rf "$mod"
    mkdir -p "$mod"
    (
        cd "$mod"
        go mod init numa-shim-it/containerd >/dev/null 2>&1
        go get "github.com/containerd/containerd/cmd/containerd@$IT_CONTAINERD_VERSION" >/dev/null 2>&1
        go build -tags no_btrfs,no_devmapper,no_zfs,no_aufs -o "$IT_BIN/containerd-$IT_CONTAINERD_VERSION" \
            github.com/containerd/containerd/cmd/containerd
    )
fi
it_log "tools ready: $("$IT_BIN/crictl" --version 2>&1 | head -1); critest $("$IT_BIN/critest" -version 2>/dev/null | head -1 | awk '{print $3}')"

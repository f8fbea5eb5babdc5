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
it_log "tools ready: $("$IT_BIN/crictl" --version 2>&1 | head -1); critest $("$IT_BIN/critest" -version 2>/dev/null | head -1 | awk '{print $3}')"

#!/usr/bin/env bash
# Installs what the real-runtime harness needs on a clean Debian 12 machine (run as root):
# containerd, runc, CNI plugins, static busybox (test images), shellcheck, qemu and Debian's kernel
# (the multi-NUMA guests of integration/numa-vm), and crictl + critest
# v1.37.0 built from the Go module proxy into integration/.work/bin (skipped when already there);
# CRI-O's conmon, skopeo and build libraries, and CRI-O and containerd 2.x built from the Go
# module proxy into IT_CACHE/bin (build-crio.sh, build-containerd.sh); the kubelets CI tests
# (integration/lib/kubelet.sh, cached in IT_CACHE) and their PodResources client.
set -euo pipefail
# shellcheck source=integration/lib/common.sh
source "$(dirname "$0")/lib/common.sh"

pkgs=(containerd runc containernetworking-plugins busybox-static shellcheck iproute2 util-linux procps curl python3)
pkgs+=(conmon skopeo gcc libc6-dev libseccomp-dev libgpgme-dev libbtrfs-dev)
# The multi-NUMA guests (integration/numa-vm): the emulator, the guest kernel, the initramfs's cpio.
pkgs+=(qemu-system-x86 linux-image-amd64 cpio)
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
# IT_DEPS=demo (integration/demo.sh): only what the demos need, not the other runtimes, the
# kubelet-oracle or the control plane (their builds take most of a fresh machine's first run).
if [[ ${IT_DEPS:-all} != demo ]]; then
    # CRI-O, containerd 2.x and (IT_CONTAINERD_VERSION) 1.7 from the Go module proxy, cached by version.
    it_log "CRI-O $IT_CRIO_VERSION, containerd $IT_CONTAINERD2_VERSION ${IT_CONTAINERD_VERSION:-} (built once into $IT_CACHE/bin)"
    "$(dirname "$0")/build-crio.sh" "$IT_CRIO_VERSION" "$IT_CACHE/bin"
    for v in $IT_CONTAINERD2_VERSION ${IT_CONTAINERD_VERSION:-}; do
        "$(dirname "$0")/build-containerd.sh" "$v" "$IT_CACHE/bin"
    done
    "$(dirname "$0")/kubelet-oracle/build.sh" # kubelet-oracle, the kubelet's managers as a judge
    "$(dirname "$0")/device-plugin/build.sh" # the sample device plugin (example.com/gpu)
    "$(dirname "$0")/dra-driver/build.sh" # the sample DRA driver (gpu.example.com)
    # The loopback control plane: etcd, kube-apiserver, controllers and kubectl (cached in IT_CACHE).
    "$(dirname "$0")/install-controlplane.sh"
fi
it_log "tools ready: $("$IT_BIN/crictl" --version 2>&1 | head -1); critest $("$IT_BIN/critest" -version 2>/dev/null | head -1 | awk '{print $3}')"
# The real kubelets (v1.37.2 and v1.34.4, ~12 CPU-minutes each the first time) and the Go
# PodResources client; IT_KUBELET_BUILD=all builds every served version.
"$(dirname "$0")/kubelet.sh" build "${IT_KUBELET_BUILD:-}"
# Go's build cache only speeds up rebuilds of what is already cached in IT_CACHE/bin; on a disk
# with less than 20 GiB left it goes (the real kubelets, CRI-O and etcd leave ~10 GiB in it).
gocache=$(go env GOCACHE 2>/dev/null || true)
if [[ -d $gocache ]]; then
    free_kib=$(df --output=avail "$gocache" | tail -1)
    if ((free_kib < 20 * 1024 * 1024)); then
        it_log "only $((free_kib / 1024 / 1024)) GiB free: emptying Go's build cache ($gocache)"
        go clean -cache
    fi
fi

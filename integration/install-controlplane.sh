#!/usr/bin/env bash
# Builds what the loopback control plane (lib/apiserver.sh) runs, from the Go module proxy, into
# IT_CACHE/bin (skipped for what is already there): etcd IT_ETCD_VERSION (build-etcd.sh), and
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of IT_K8S_VERSION
# (build-k8s.sh). Its certificates are made at start-up by lib/pki.sh with Debian's openssl.
# Called by install-deps.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/apiserver.sh
source "$here/lib/apiserver.sh"
export PATH=/usr/local/go/bin:$PATH
command -v openssl >/dev/null || { apt-get update -qq && apt-get install -y -qq openssl >/dev/null; }
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
if [[ ! -x $IT_CACHE/bin/etcd-$IT_ETCD_VERSION ]]; then
    it_log "building etcd $IT_ETCD_VERSION"
    "$here/build-etcd.sh" "$IT_ETCD_VERSION" "$IT_CACHE/bin"
fi
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
for cmd in "${cmds[@]}"; do
    if [[ ! -x $IT_CACHE/bin/$cmd-$IT_K8S_VERSION ]]; then
        it_log "building ${cmds[*]} $IT_K8S_VERSION (those missing)"
        "$here/build-k8s.sh" "$IT_K8S_VERSION" "$IT_CACHE/bin" "${cmds[@]}"
        break
    fi
done
it_log "control plane ready: etcd $IT_ETCD_VERSION, kube-apiserver $IT_K8S_VERSION in $IT_CACHE/bin"

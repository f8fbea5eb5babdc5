#!/usr/bin/env bash
# A real kubelet from the harness (integration/lib/kubelet.sh), for tests and other harnesses:
#
#   integration/kubelet.sh start NAME [OPTIONS]   starts (or restarts) kubelet NAME, prints its facts
#   integration/kubelet.sh config NAME [OPTIONS]  writes its files only (to start what it needs first)
#   integration/kubelet.sh stop NAME [--kill]     stops it; its pods keep running
#   integration/kubelet.sh clean NAME             stops it and removes its pods, cgroups, files
#   integration/kubelet.sh env NAME               prints its facts (KEY=VALUE lines)
#   integration/kubelet.sh build [all|none|VERSION...]  builds kubelets into the cache (default:
#                                    the CI versions) and the Go PodResources client
#
# OPTIONS are those of it_kubelet_start: --version V, --runtime EP, --direct EP, --config FILE,
# --drop-in FILE (repeatable), --manifests DIR, --kubeconfig FILE, --apiserver, --node-name N, --arg ARG.
# IT_RUN must be the harness's (the private runtime lib/runtime.sh picks by IT_RUNTIME:
# containerd or CRI-O; or another runtime given with --runtime and --direct).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/runtime.sh
source "$here/lib/runtime.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/lib/kubelet.sh"

action=${1:-}
shift || true
case $action in
start)
    it_kubelet_start "$@" >&2
    it_kubelet_env "$1"
    ;;
config)
    it_kubelet_config "$@" >&2
    it_kubelet_env "$1"
    ;;
stop) it_kubelet_stop "$@" ;;
clean) it_kubelet_clean "$1" ;;
env) it_kubelet_env "$1" ;;
build)
    case ${1:-} in
    "") it_kubelet_build "${IT_KUBELET_CI_VERSIONS[@]}" ;;
    all) it_kubelet_build "${IT_KUBELET_VERSIONS[@]}" ;;
    none) exit 0 ;;
    *) it_kubelet_build "$@" ;;
    esac
    it_podresources_go >/dev/null
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac

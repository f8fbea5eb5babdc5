#!/usr/bin/env bash
# The real-kubelet tests (tests/realkubelet) for every served kubelet version — v1.34.4, v1.35.4,
# v1.36.3, v1.37.2 — or the versions given as arguments, one stage each, in front of a private
# containerd (CI, through test-all.sh, runs v1.37.2 and v1.34.4 only). Builds the kubelets it
# lacks first (about 12 CPU-minutes each, cached in IT_CACHE). Needs root and
# integration/install-deps.sh. The last line is `kubelet-versions: N passed, N failed`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/lib/kubelet.sh"
cd "$IT_REPO"

versions=("$@")
((${#versions[@]})) || versions=("${IT_KUBELET_VERSIONS[@]}")
"$here/install-deps.sh"
it_kubelet_build "${versions[@]}"
cargo build --quiet --bins

trap it_teardown EXIT
trap "exit 143" TERM INT
it_up
export NUMA_SHIM_IT_CONTAINERD NUMA_SHIM_IT_RUN=$IT_RUN NUMA_SHIM_IT_BUSYBOX_IMAGE=$IT_BUSYBOX_IMAGE
passed=0 failed=0 summary=()
for v in "${versions[@]}"; do
    start=$(date +%s) rc=0
    it_log "=== real kubelet $v"
    it_kubelet_tests "$v" || rc=$?
    secs=$(($(date +%s) - start))
    if ((rc == 0)); then
        passed=$((passed + 1)) summary+=("ok     ${secs}s  kubelet $v")
    else
        failed=$((failed + 1)) summary+=("FAILED ${secs}s  kubelet $v (exit $rc)")
    fi
done
it_log "summary:"
printf '  %s\n' "${summary[@]}" >&2
echo "kubelet-versions: $passed passed, $failed failed"
((failed == 0))

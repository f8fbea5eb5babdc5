#!/usr/bin/env bash
# runtime-suite.sh: the real-runtime checks on one private runtime, chosen as lib/runtime.sh
# chooses it (IT_RUNTIME=containerd|crio, IT_CONTAINERD_VERSION, IT_CRIO_VERSION), under its own
# IT_RUN: the real-runtime tests (tests/realruntime: placement, the whole restart matrix,
# numa-shim's state on a full disk, the runtime's errors through numa-shim, the runtime restarted
# under it; about 3 minutes on CRI-O), crictl parity and critest parity through numa-shim, and on
# CRI-O the tutorial's real-kubelet tests (tests/realkubelet tutorial::, kubelet
# IT_KUBELET_VERSION in front of numa-shim in front of CRI-O).
# test-all.sh runs it for CRI-O and containerd 2.x beside its own containerd 1.6 stages, e.g.
#
#   IT_RUNTIME=crio IT_RUN=/run/numa-shim-it-crio integration/runtime-suite.sh
#   IT_CONTAINERD_VERSION=v2.4.2 IT_RUN=/run/numa-shim-it-ctd2 integration/runtime-suite.sh
#
# Needs the tools from install-deps.sh and a built numa-shim. Every check runs even when an
# earlier one fails; the last line is `runtime-suite <runtime>: N passed, N failed`.
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
# shellcheck source=integration/lib/checks.sh
source "$here/lib/checks.sh"
cd "$IT_REPO"

name=$IT_RUNTIME
[[ $IT_RUNTIME == containerd ]] && name="containerd ${IT_CONTAINERD_VERSION:-1.6 (Debian)}"
[[ $IT_RUNTIME == crio ]] && name="CRI-O $IT_CRIO_VERSION"

trap it_teardown EXIT
trap "exit 143" TERM INT
it_up
export NUMA_SHIM_IT_CONTAINERD NUMA_SHIM_IT_CRICTL=$IT_BIN/crictl NUMA_SHIM_IT_RUN=$IT_RUN
export NUMA_SHIM_IT_CGROUP_PARENT=/$IT_CG NUMA_SHIM_IT_BUSYBOX_IMAGE=$IT_BUSYBOX_IMAGE
export NUMA_SHIM_IT_RUNTIME=$IT_RUNTIME
it_timed "real-runtime tests" cargo test --test realruntime -- --ignored --test-threads=1
it_timed "crictl parity" "$here/crictl_parity.sh"
it_timed "critest parity" "$here/critest.sh"
# The tutorial's combination (a standalone kubelet, numa-shim, CRI-O): the tutorial's pods in
# pod and container scope through numa-shim and through the kubelet's own managers. The rest of
# tests/realkubelet (restarts, refusals, the soak) runs on containerd 1.6 in test-all.sh.
if [[ $IT_RUNTIME == crio ]]; then
    it_timed "real kubelet $IT_KUBELET_VERSION (tutorial)" it_kubelet_tests "$IT_KUBELET_VERSION" tutorial::
fi

it_log "$name summary:"
it_checks_done "runtime-suite $IT_RUNTIME"

#!/usr/bin/env bash
# The full test suite (the README's test command; .ci/run calls exactly this):
#   ShellCheck, cargo fmt --check, cargo clippy -D warnings, cargo test (unit, integration and the
#   real-runtime tests, which find the private containerd through NUMA_SHIM_IT_CONTAINERD), the
#   differential suite against the kubelet's own managers (integration/oracle.sh), the
#   real-kubelet tests (kubelets v1.37.2 and v1.34.4), crictl parity and critest parity through
#   numa-shim; then the real-runtime tests and both parity checks again on CRI-O (with the
#   tutorial's real-kubelet tests: kubelet v1.37.2, numa-shim, CRI-O) and on containerd 2.x
#   (runtime-suite.sh); and the crictl flow in a 2-node qemu guest (integration/numa-vm).
# Starts a private containerd and tears everything down on exit. Needs root and the tools from
# integration/install-deps.sh. Every stage runs even when an earlier one fails; the last line is
# `test-all: N passed, N failed` over the stages.
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
cd "$IT_REPO"
# One build of each crate, no incremental caches (they nearly double the target dir: a full
# debug build once filled a CI machine's disk in the middle of `cargo test`).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# disk_free: free space where the build, the caches and the runtimes' state live (logged per stage).
disk_free() { df -h --output=avail "$IT_REPO" "$IT_RUN_PARENT" "$IT_CACHE" 2>/dev/null | tail -n +2 | tr -s ' \n' ' '; }
IT_RUN_PARENT=$(dirname "$IT_RUN")

passed=0
failed=0
summary=()
# Why each failed stage failed (its failing tests and checks, the panics' messages), printed just
# before the last line so that a CI log cut in the middle still shows it.
why=()
stage_logs=$IT_WORK/stage-logs
rm -rf "$stage_logs"
mkdir -p "$stage_logs"
# stage NAME CMD...: runs one stage, times it, records the result without stopping the suite.
stage() {
    local name=$1 start rc=0 log
    shift
    start=$(date +%s)
    log=$stage_logs/$((passed + failed)).log
    it_log "=== $name: $*"
    : >"$log"
    "$@" > >(tee -a "$log") 2> >(tee -a "$log" >&2) || rc=$?
    local secs=$(($(date +%s) - start))
    if ((rc == 0)); then
        passed=$((passed + 1))
        summary+=("ok     ${secs}s  $name")
    else
        failed=$((failed + 1))
        summary+=("FAILED ${secs}s  $name (exit $rc)")
        sleep 1 # the tee processes finish writing
        why+=("--- $name (whole output: $log)")
        mapfile -t -O "${#why[@]}" why < <(stage_failures "$log")
    fi
    it_log "=== $name: exit $rc after ${secs}s (free: $(disk_free))"
}
# stage_failures LOG: the lines of a stage's output that say what failed (at most 40).
stage_failures() {
    grep -E -A2 -e '^test .* FAILED$' -e 'panicked at' -e '^(---- |FAILED|not ok|failures:$)' \
        -e '\b[1-9][0-9]* failed\b' -e '^\s+FAILED ' -e '\[FAIL\]' "$1" | cut -c1-300 | head -40 || true
}

# Everything the suite needs, installed on a fresh machine (skipped when already there).
"$here/install-deps.sh"

shell_files=(integration/*.sh integration/lib/*.sh integration/numa-vm/*.sh integration/numa-vm/init .ci/run)
if command -v shellcheck >/dev/null; then
    stage shellcheck shellcheck -x "${shell_files[@]}"
fi
stage "cargo fmt" cargo fmt --all -- --check
stage "cargo clippy" cargo clippy --all-targets --quiet -- -D warnings
stage "cargo build" cargo build --quiet --bins

trap it_teardown EXIT
trap "exit 143" TERM INT
it_up
export NUMA_SHIM_IT_CONTAINERD NUMA_SHIM_IT_CRICTL=$IT_BIN/crictl NUMA_SHIM_IT_RUN=$IT_RUN
export NUMA_SHIM_IT_CGROUP_PARENT=/$IT_CG NUMA_SHIM_IT_BUSYBOX_IMAGE=$IT_BUSYBOX_IMAGE NUMA_SHIM_IT_RUNTIME=$IT_RUNTIME
stage "cargo test" cargo test --all-targets
# Pods placed through numa-shim on this containerd, read back from cgroupfs and /proc.
stage "real-runtime placement" cargo test --test realruntime -- --ignored --test-threads=1
# numa-shim against the kubelet's own managers (kubelet-oracle, built by install-deps.sh).
stage "kubelet oracle" "$here/oracle.sh" --fixed
# The real kubelet drives numa-shim (tests/realkubelet), for each version CI tests. On kubelets
# before 1.37 (no Pods API) numa-shim infers pod specs from CRI; the device-plugin test runs there
# too (docs/devices.md "Kubelets before 1.37", inference rule C4).
for v in "${IT_KUBELET_CI_VERSIONS[@]}"; do
    stage "real kubelet $v" it_kubelet_tests "$v"
done
# grpcio's and grpc-java's default channels through numa-shim (they install what they need).
stage "grpc clients" cargo test --test relay --test podresources -- --ignored clients:: python::
stage "crictl parity" "$here/crictl_parity.sh"
stage "critest parity" "$here/critest.sh"
# The same real-runtime checks on CRI-O and containerd 2.x, each under an IT_RUN of its own.
stage "CRI-O $IT_CRIO_VERSION" env IT_RUNTIME=crio IT_RUN="$IT_RUN-crio" "$here/runtime-suite.sh"
stage "containerd $IT_CONTAINERD2_VERSION" env IT_RUNTIME=containerd IT_CONTAINERD_VERSION="$IT_CONTAINERD2_VERSION" \
    IT_RUN="$IT_RUN-ctd2" "$here/runtime-suite.sh"
stage "packaging" "$here/packaging.sh"
# etcd + kube-apiserver on loopback: podKnowledge apiserver, refusal reports, manifests dry-run.
stage "control plane" "$here/apiserver-tests.sh"
# A 2-node qemu guest (TCG): pods through numa-shim on containerd, the kernel's cpusets, mems and
# memory.numa_stat against numa-shim's decisions (integration/numa-vm; all-shapes.sh runs 4n, snc).
# ~8-9 min on an idle 2-CPU machine (qemu TCG on one host CPU; 519 s in the run of 2026-12-07).
stage "multi-NUMA guest (2n)" "$here/numa-vm/run.sh" --timeout 1500 2n -- integration/numa-vm/crictl-flow.sh

it_log "summary:"
printf '  %s\n' "${summary[@]}" >&2
if ((${#why[@]})); then
    it_log "what failed:"
    printf '  %s\n' "${why[@]}" >&2
fi
echo "test-all: $passed passed, $failed failed"
((failed == 0))

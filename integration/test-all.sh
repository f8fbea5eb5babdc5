#!/usr/bin/env bash
# The full test suite (the README's test command; .ci/run calls exactly this):
#   ShellCheck, cargo fmt --check, cargo clippy -D warnings, cargo test (unit, integration and the
#   real-runtime tests, which find the private containerd through NUMA_SHIM_IT_CONTAINERD), crictl
#   parity and critest parity through numa-shim.
# Starts a private containerd and tears everything down on exit. Needs root and the tools from
# integration/install-deps.sh. Every stage runs even when an earlier one fails; the last line is
# `test-all: N passed, N failed` over the stages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"
cd "$IT_REPO"

passed=0
failed=0
summary=()
# stage NAME CMD...: runs one stage, times it, records the result without stopping the suite.
stage() {
    local name=$1 start rc=0
    shift
    start=$(date +%s)
    it_log "=== $name: $*"
    "$@" || rc=$?
    local secs=$(($(date +%s) - start))
    if ((rc == 0)); then
        passed=$((passed + 1))
        summary+=("ok     ${secs}s  $name")
    else
        failed=$((failed + 1))
        summary+=("FAILED ${secs}s  $name (exit $rc)")
    fi
    it_log "=== $name: exit $rc after ${secs}s"
}

shell_files=(integration/*.sh integration/lib/*.sh .ci/run)
if command -v shellcheck >/dev/null; then
    stage shellcheck shellcheck -x "${shell_files[@]}"
fi
stage "cargo fmt" cargo fmt --all -- --check
stage "cargo clippy" cargo clippy --all-targets --quiet -- -D warnings
stage "cargo build" cargo build --quiet --bins

trap it_teardown EXIT
it_up
export NUMA_SHIM_IT_CONTAINERD NUMA_SHIM_IT_CRICTL=$IT_BIN/crictl NUMA_SHIM_IT_RUN=$IT_RUN
export NUMA_SHIM_IT_CGROUP_PARENT=/$IT_CG NUMA_SHIM_IT_BUSYBOX_IMAGE=$IT_BUSYBOX_IMAGE
stage "cargo test" cargo test --all-targets
stage "crictl parity" "$here/crictl_parity.sh"
stage "critest parity" "$here/critest.sh"

it_log "summary:"
printf '  %s\n' "${summary[@]}" >&2
echo "test-all: $passed passed, $failed failed"
((failed == 0))

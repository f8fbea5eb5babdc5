#!/usr/bin/env bash
# Runs the crictl flow (integration/numa-vm/crictl-flow.sh) in a guest of every shape of
# integration/numa-vm/run.sh (2n, 4n, snc), one after the other, then the kubelet comparison
# (integration/numa-vm/kubelet-compare.sh: kubelet v1.37.2's own managers against numa-shim, the
# sample device plugin included) in the shapes of NUMAVM_KUBELET_SHAPES (default "2n 4n"; "none"
# skips it), and prints each one's result and wall time. Builds numa-shim, the PodResources
# client and the sample device plugin first. Needs root and the kubelet in the cache
# (integration/install-deps.sh); installs the Debian packages it needs. Costs about 10 minutes
# for the crictl flows; the kubelet comparison costs about 30 minutes per case and shape on a
# loaded 2-CPU machine (README, docs/fidelity.md): NUMAVM_KUBELET_CASES picks cases.
#
#   integration/numa-vm/all-shapes.sh [SHAPE...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/../lib/common.sh"
cd "$IT_REPO"
shapes=("$@")
((${#shapes[@]})) || shapes=(2n 4n snc)
cargo build --quiet --bin numa-shim
kshapes=${NUMAVM_KUBELET_SHAPES:-2n 4n}
[[ $kshapes == none ]] && kshapes=
if [[ -n $kshapes ]]; then
    # shellcheck source=integration/lib/kubelet.sh
    source "$here/../lib/kubelet.sh"
    it_podresources_go >/dev/null
    "$here/../device-plugin/build.sh"
fi
results=()
failed=0
for shape in "${shapes[@]}"; do
    start=$(date +%s)
    rc=0
    "$here/run.sh" "$shape" -- integration/numa-vm/crictl-flow.sh || rc=$?
    secs=$(($(date +%s) - start))
    if ((rc == 0)); then
        results+=("ok      ${secs}s  $shape crictl flow")
    else
        results+=("FAILED  ${secs}s  $shape crictl flow (exit $rc; integration/.work/numa-vm/last-$shape)")
        failed=$((failed + 1))
    fi
done
for shape in $kshapes; do
    start=$(date +%s)
    rc=0
    NUMAVM_TAG=kubelet NUMAVM_TIMEOUT=${NUMAVM_KUBELET_TIMEOUT:-5400} "$here/run.sh" "$shape" -- integration/numa-vm/kubelet-compare.sh || rc=$?
    secs=$(($(date +%s) - start))
    if ((rc == 0)); then
        results+=("ok      ${secs}s  $shape kubelet comparison")
    else
        results+=("FAILED  ${secs}s  $shape kubelet comparison (exit $rc; integration/.work/numa-vm/last-$shape-kubelet)")
        failed=$((failed + 1))
    fi
done
it_log "numa-vm all shapes:"
printf '  %s\n' "${results[@]}" >&2
((failed == 0))

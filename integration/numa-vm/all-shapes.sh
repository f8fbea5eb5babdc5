#!/usr/bin/env bash
# Runs the crictl flow (integration/numa-vm/crictl-flow.sh) in a guest of every shape of
# integration/numa-vm/run.sh (2n, 4n, snc), one after the other, then the kubelet comparison
# (integration/numa-vm/kubelet-compare.sh: kubelet v1.37.2's own managers against numa-shim, the
# sample device plugin included) in the shapes of NUMAVM_KUBELET_SHAPES (default "2n 4n"; "none"
# skips it), each case in a guest of its own (NUMAVM_KUBELET_CASES, space-separated, picks cases;
# default all six of kubelet_compare.py), and prints each one's result and wall time. Builds numa-shim, the
# PodResources client and the sample device plugin first. Needs root and the kubelet in the
# cache (integration/install-deps.sh); installs the Debian packages it needs.
#
# What it costs on the 2-vCPU machine (qemu on one host CPU; docs/fidelity.md, "Results", has
# every run): the crictl flows ~25-45 min together (2n 519 s idle, 794 s under a load of ~7). The kubelet comparison: a guest's boot and
# containerd ~1 min, then per case both halves (two kubelet starts, the pods one after the
# other, the readings, the comparison) 6-12 min on a lightly loaded machine (2n: 349-712 s) and
# 2-5 times that under a load of ~10 from other jobs (2n pod-single-numa-node, 9 steps, 53 min);
# the 4n guest about the same (4n: 417-557 s per case under a load of ~5). The six cases on 2n
# and 4n: about 2-3 hours on an idle machine, more on a loaded one. NUMAVM_KUBELET_TIMEOUT
# (default 3600 s) bounds each case's guest, NUMAVM_CRICTL_TIMEOUT (default 1800 s) each crictl
# flow's (the 4n flow took 532 s on a lightly loaded machine and did not finish in 900 s under a
# load of ~7).
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
    NUMAVM_TIMEOUT=${NUMAVM_CRICTL_TIMEOUT:-1800} "$here/run.sh" "$shape" -- integration/numa-vm/crictl-flow.sh || rc=$?
    secs=$(($(date +%s) - start))
    if ((rc == 0)); then
        results+=("ok      ${secs}s  $shape crictl flow")
    else
        results+=("FAILED  ${secs}s  $shape crictl flow (exit $rc; integration/.work/numa-vm/last-$shape)")
        failed=$((failed + 1))
    fi
done
kcases=()
if [[ -n ${NUMAVM_KUBELET_CASES:-} ]]; then
    read -ra kcases <<<"$NUMAVM_KUBELET_CASES"
elif [[ -n $kshapes ]]; then
    mapfile -t kcases < <(python3 "$here/kubelet_compare.py" cases)
fi
for shape in $kshapes; do
    for case in "${kcases[@]}"; do
        start=$(date +%s)
        rc=0
        NUMAVM_KUBELET_CASES=$case NUMAVM_TAG=kubelet-$case NUMAVM_TIMEOUT=${NUMAVM_KUBELET_TIMEOUT:-3600} \
            "$here/run.sh" "$shape" -- integration/numa-vm/kubelet-compare.sh || rc=$?
        secs=$(($(date +%s) - start))
        if ((rc == 0)); then
            results+=("ok      ${secs}s  $shape kubelet comparison $case")
        else
            results+=("FAILED  ${secs}s  $shape kubelet comparison $case (exit $rc; integration/.work/numa-vm/last-$shape-kubelet-$case)")
            failed=$((failed + 1))
        fi
    done
done
it_log "numa-vm all shapes:"
printf '  %s\n' "${results[@]}" >&2
((failed == 0))

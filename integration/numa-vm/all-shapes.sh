#!/usr/bin/env bash
# Runs the crictl flow (integration/numa-vm/crictl-flow.sh) in a guest of every shape of
# integration/numa-vm/run.sh (2n, 4n, snc), one after the other, and prints each one's result and
# wall time. Builds numa-shim first. Needs root; installs the Debian packages it needs.
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
it_log "numa-vm all shapes:"
printf '  %s\n' "${results[@]}" >&2
((failed == 0))

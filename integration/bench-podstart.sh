#!/usr/bin/env bash
# Where the time numa-shim's placement adds to a pod start goes (a measurement, not a test, not
# in CI). In front of the harness's private containerd it runs two numa-shim instances with
# placement on as in integration/bench-relay.sh (shim-on), both with debug logs:
#
#   disk    the checkpoint on the machine's disk (BENCH_STATE_ROOT), as a user runs it
#   tmpfs   the checkpoint on a tmpfs mounted under IT_RUN, where fsync and rename cost ~nothing
#
# and starts BENCH_PODS pods (RunPodSandbox + CreateContainer + StartContainer, then stop/remove)
# through each and directly, pod by pod in rotated order. From each instance's debug log,
# integration/lib/bench_podstart.py splits every intercepted call into numa-shim's work before
# forwarding, the runtime, and numa-shim's work after the runtime answered; with BENCH_STRACE=1
# (default) the disk instance runs under `strace -f -ttt -T` and the fsync and rename time inside
# each phase is added. Leaves results.jsonl, the logs, the trace and summary.md in BENCH_OUT.
#
# Knobs: BENCH_PODS (20), BENCH_STRACE (1), BENCH_STATE_ROOT (integration/.work/bench-state/),
# BENCH_OUT, IT_RUN (/run/numa-shim-bench), BENCH_BIN
# (prebuilt numa-shim and relay_load). Needs what integration/bench-relay.sh needs, and strace.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IT_RUN=${IT_RUN:-/run/numa-shim-bench}
# shellcheck source=integration/lib/bench.sh
source "$here/lib/bench.sh"

pods=${BENCH_PODS:-20}
trace=${BENCH_STRACE:-1}
out=${BENCH_OUT:-$IT_WORK/bench-podstart/$(date -u +%Y%m%dT%H%M%SZ)}
bench_bin=$IT_WORK/bench-relay/bin
mkdir -p "$out" "$bench_bin"
((trace == 0)) || command -v strace >/dev/null || it_die "no strace (apt-get install strace, or BENCH_STRACE=0)"
bench_build "$bench_bin"

trap bench_teardown EXIT
it_up
bench_state_init
# Teardown unmounts everything under IT_RUN.
BENCH_STATE[tmpfs]=$IT_RUN/tmpfs/state
mkdir -p "${BENCH_STATE[tmpfs]}"
mount -t tmpfs -o size=16m numa-shim-bench "${BENCH_STATE[tmpfs]}"

disk_pid=$(bench_start shim-on disk env "RUST_LOG=numa_shim=debug,info")
bench_start shim-on tmpfs env "RUST_LOG=numa_shim=debug,info" >/dev/null
strace_pid=
if ((trace)); then
    # Attached (not started) by strace, so numa-shim's own pid is the recorded one and the
    # harness teardown ends it; strace ends with it.
    strace -f -ttt -T -e "trace=fsync,fdatasync,rename,renameat,renameat2,openat" \
        -o "$out/disk.strace" -p "$disk_pid" 2>"$out/strace.err" &
    strace_pid=$!
    sleep 1
fi

results=$out/results.jsonl
it_log "pod start: $pods pods per side (direct, disk, tmpfs)"
mkdir -p "$IT_RUN/logs"
timeout 7200 "$bench_bin/cri-load" pods -deadline 7000s -target "direct=$IT_SOCK" \
    -target "disk=$IT_RUN/disk.sock" -target "tmpfs=$IT_RUN/tmpfs.sock" -pods "$pods" \
    -image "$IT_BUSYBOX_IMAGE" -cgroup-parent "/$IT_CG" -log-dir "$IT_RUN/logs" >"$results"
bench_stop disk
bench_stop tmpfs
if [[ -n $strace_pid ]]; then
    kill "$strace_pid" 2>/dev/null || true
    wait "$strace_pid" 2>/dev/null || true
fi
cp "$IT_LOGS/disk.log" "$IT_LOGS/tmpfs.log" "$out/"

{
    echo "- date: $(date -u +%FT%TZ); commit: $(git -C "$IT_REPO" rev-parse --short HEAD); load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- disk checkpoint on $(findmnt -n -o FSTYPE,SOURCE -T "$BENCH_STATE_ROOT" | tr -s ' '); $pods pods per side"
    echo
    python3 "$here/lib/bench_summary.py" "$results" pods
    echo "#### numa-shim's phases per call, checkpoint on disk (median ms; see integration/lib/bench_podstart.py)"
    echo
    if ((trace)); then
        python3 "$here/lib/bench_podstart.py" "$out/disk.log" "$out/disk.strace"
    else
        python3 "$here/lib/bench_podstart.py" "$out/disk.log"
    fi
    echo
    echo "#### numa-shim's phases per call, checkpoint on tmpfs (median ms)"
    echo
    python3 "$here/lib/bench_podstart.py" "$out/tmpfs.log"
} >"$out/summary.md"
cat "$out/summary.md"
it_log "results in $out"

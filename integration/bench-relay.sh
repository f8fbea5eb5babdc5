#!/usr/bin/env bash
# Peer comparison benchmark (not a test, not in CI): numa-shim against the relays a user could
# pick instead and against the floor of any extra hop, in one interleaved session in front of the
# harness's private containerd:
#
#   direct      containerd itself
#   shim-on     numa-shim placing pods as a user runs it (static CPU policy, pod scope, Static memory)
#   shim-off    numa-shim without placement
#   go-proxy    a transparent grpc-go proxy (unknown-service handler, raw codec; koordinator style)
#   go-cri      a typed grpc-go CRI relay (generated servers and clients; CRI-RM / cri-lite style)
#   floor-rust  relay_load byte-relay (tokio, one thread, copies bytes)
#   floor-c     epoll-relay (C, one thread, read/write)
#
# The load generator (integration/bench-peers/cri-load) is a grpc-go client with the kubelet's
# generated CRI client and dial options. Version: BENCH_ROUNDS rounds; in each, for 1, 4 and 16
# closed-loop clients, one batch of BENCH_CALLS calls per target, target order rotated every
# round; per batch: latency percentiles, throughput, CPU time of the relay process per call (the
# kernel's per-process CPU clock). Pod start (RunPodSandbox + CreateContainer + StartContainer of
# a Guaranteed 1-CPU pod, then stop/remove) direct vs through numa-shim with placement on (and off),
# pod by pod in rotated order. Then RSS, and instructions per call of each relay under callgrind
# (run alone afterwards). Leaves results.jsonl, summary.md and machine.txt in $BENCH_OUT.
#
# Needs root and integration/install-deps.sh (containerd, runc, CNI plugins, busybox-static,
# crictl), go, gcc, valgrind. Knobs (environment):
#   BENCH_ROUNDS (40), BENCH_CALLS (2000 per batch), BENCH_CLIENTS (1,4,16), BENCH_PODS (100 per
#   side), BENCH_POD_TARGETS ("shim-on shim-off"), BENCH_CALLGRIND_CLIENTS ("16"; empty skips
#   callgrind), BENCH_CALLGRIND_CALLS ("500 2500"), BENCH_METRICS_PORT (19464: shim-on's
#   /metrics on loopback, shim-off's on the next port), BENCH_STATE_ROOT (where numa-shim's
#   checkpoints go: on the disk, integration/.work/bench-state/), BENCH_OUT, IT_RUN (/run/numa-shim-bench),
#   BENCH_BIN (a directory with prebuilt numa-shim and relay_load to run instead of building),
#   BENCH_BASE_BIN (a numa-shim binary of another build, e.g. the commit before a change: run
#   as one more pod-start target, shim-base, with shim-on's settings, so the change's effect on
#   a placed pod start is measured pod by pod in the same run).
# Everything it starts is torn down on exit (harness teardown: PIDs, mounts, cgroups, IT_RUN;
# then the checkpoints).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Own state folder, so a harness run (/run/numa-shim-it) can go on beside this one.
export IT_RUN=${IT_RUN:-/run/numa-shim-bench}
# shellcheck source=integration/lib/bench.sh
source "$here/lib/bench.sh"

rounds=${BENCH_ROUNDS:-40}
calls=${BENCH_CALLS:-2000}
clients=${BENCH_CLIENTS:-1,4,16}
pods=${BENCH_PODS:-100}
read -r -a pod_targets <<<"${BENCH_POD_TARGETS-shim-on shim-off}"
read -r -a cg_clients <<<"${BENCH_CALLGRIND_CLIENTS-16}"
read -r cg_a cg_b <<<"${BENCH_CALLGRIND_CALLS:-500 2500}"
out=${BENCH_OUT:-$IT_WORK/bench-relay/$(date -u +%Y%m%dT%H%M%SZ)}
bench_bin=$IT_WORK/bench-relay/bin
mkdir -p "$out" "$bench_bin"
command -v valgrind >/dev/null || [[ ${#cg_clients[@]} -eq 0 ]] ||
    it_die "no valgrind (apt-get install valgrind, or BENCH_CALLGRIND_CLIENTS= to skip)"

bench_build "$bench_bin"

trap bench_teardown EXIT
it_up
bench_state_init
ctrd_pid=$(cat "$IT_RUN/pids/containerd")
results=$out/results.jsonl
: >"$results"

declare -A pid
for t in "${BENCH_TARGETS[@]}"; do
    pid[$t]=$(bench_start "$t" "$t")
    it_log "$t: pid ${pid[$t]} on $IT_RUN/$t.sock"
done
if [[ -n ${BENCH_BASE_BIN:-} ]]; then
    [[ -x $BENCH_BASE_BIN ]] || it_die "BENCH_BASE_BIN=$BENCH_BASE_BIN is not an executable"
    it_log "shim-base ($BENCH_BASE_BIN): pid $(bench_start shim-on shim-base) on $IT_RUN/shim-base.sock"
    pod_targets+=(shim-base)
fi
sleep 2
for t in "${BENCH_TARGETS[@]}"; do bench_memory idle "$t" "${pid[$t]}" >>"$results"; done

load=("$bench_bin/cri-load")
version_targets=(-target "direct=$IT_SOCK@$ctrd_pid")
for t in "${BENCH_TARGETS[@]}"; do version_targets+=(-target "$t=$IT_RUN/$t.sock@${pid[$t]}"); done
it_log "Version: $rounds rounds of $calls calls per target at $clients clients"
timeout 7200 "${load[@]}" version -deadline 7000s -runtime-pid "$ctrd_pid" "${version_targets[@]}" \
    -clients "$clients" -rounds "$rounds" -calls "$calls" >>"$results"
for t in "${BENCH_TARGETS[@]}"; do bench_memory after-load "$t" "${pid[$t]}" >>"$results"; done

if ((pods > 0)); then
    pod_args=(-target "direct=$IT_SOCK")
    for t in "${pod_targets[@]}"; do pod_args+=(-target "$t=$IT_RUN/$t.sock"); done
    it_log "pod start: $pods pods per side (direct ${pod_targets[*]}), RunPodSandbox + CreateContainer + StartContainer"
    mkdir -p "$IT_RUN/logs"
    timeout 7200 "${load[@]}" pods -deadline 7000s "${pod_args[@]}" -pods "$pods" \
        -image "$IT_BUSYBOX_IMAGE" -cgroup-parent "/$IT_CG" -log-dir "$IT_RUN/logs" >>"$results"
    for t in shim-on shim-off ${BENCH_BASE_BIN:+shim-base}; do bench_relay_times "$t" >>"$results"; done
fi

it_log "idle for 5 s, then reading memory"
sleep 5
for t in "${BENCH_TARGETS[@]}"; do bench_memory idle-end "$t" "${pid[$t]}" >>"$results"; done
for t in "${BENCH_TARGETS[@]}"; do bench_stop "$t"; done

# Instructions: each relay alone under callgrind (far too slow to share the timed session).
for c in "${cg_clients[@]}"; do
    for t in "${BENCH_TARGETS[@]}"; do
        it_log "callgrind: $t, $c clients, $cg_a and $cg_b calls"
        bench_instructions "$t" "$c" "$cg_a" "$cg_b" "$out/callgrind" >>"$results"
    done
done

{
    echo "- date: $(date -u +%FT%TZ); commit: $(git -C "$IT_REPO" rev-parse --short HEAD)$(git -C "$IT_REPO" diff --quiet HEAD || echo ' (with local changes)')"
    echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cpus; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- kernel: $(uname -r); containerd: $("$IT_CONTAINERD_BIN" --version | awk '{print $3}'); runc: $(runc --version | head -1 | awk '{print $3}'); $(go version | awk '{print $3}'); $(gcc --version | head -1); $(valgrind --version 2>/dev/null || true)"
    echo "- numa-shim checkpoints on: $(findmnt -n -o FSTYPE,SOURCE -T "$BENCH_STATE_ROOT" | tr -s ' ')"
    echo "- settings: $rounds rounds x $calls calls per target and client count ($clients clients); $pods pods per side (direct ${pod_targets[*]}); callgrind at ${cg_clients[*]:-no} clients, $cg_a/$cg_b calls"
} >"$out/machine.txt"
python3 "$here/lib/bench_summary.py" "$results" >"$out/summary.md"
cat "$out/machine.txt" "$out/summary.md"
it_log "results in $out"

#!/usr/bin/env bash
# Memory benchmark (not a test, not part of CI): a private containerd and a RELEASE numa-shim in
# front of it; benches/relay_memory.rs churns pods through numa-shim for the whole run and adds
# cycles of client load (64 new connections for 4 min, then 1 min without), sampling numa-shim's
# VmRSS from /proc every 5 s. Prints a summary and leaves samples.jsonl + summary.md in
# $BENCH_OUT. docs/PERFORMANCE.md ("Memory after load") has the method and a recorded run.
#
# Knobs (environment): BENCH_DURATION (1800 s), BENCH_LOAD (240 s), BENCH_IDLE (60 s),
# BENCH_CLIENTS (64), BENCH_OUT, IT_RUN (/run/numa-shim-bench-memory, private state),
# BENCH_BIN (a directory with prebuilt numa-shim and relay_memory), NUMA_SHIM_ENV (extra
# environment for numa-shim, e.g. "MALLOC_ARENA_MAX=8" to compare allocator settings).
# Needs root and integration/install-deps.sh. Everything it starts is torn down on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IT_RUN=${IT_RUN:-/run/numa-shim-bench-memory}
# shellcheck source=integration/lib/bench.sh
source "$here/lib/bench.sh"

duration=${BENCH_DURATION:-1800}
load=${BENCH_LOAD:-240}
idle=${BENCH_IDLE:-60}
clients=${BENCH_CLIENTS:-64}
out=${BENCH_OUT:-$IT_WORK/bench-memory/$(date -u +%Y%m%dT%H%M%SZ)}
bench_bin=$IT_WORK/bench-memory/bin
mkdir -p "$out" "$bench_bin"

bench_build_shim "$bench_bin" relay_memory

trap it_teardown EXIT
trap "exit 143" TERM INT
it_up
# Placement on, pod specs inferred from CRI (every pod goes through the decoded path).
cat >"$IT_RUN/bench-config.yaml" <<EOT
cpuManagerPolicy: static
reservedSystemCPUs: ""
topologyManagerPolicy: best-effort
topologyManagerScope: pod
memoryManagerPolicy: Static
reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]
EOT
read -r -a shim_env <<<"${NUMA_SHIM_ENV:-}"
it_numa_shim_bin() { printf '%s\n' "$bench_bin/numa-shim-env"; }
printf '#!/bin/sh\nexec env %s "%s" "$@"\n' "${shim_env[*]:-}" "$bench_bin/numa-shim" >"$bench_bin/numa-shim-env"
chmod +x "$bench_bin/numa-shim-env"
shim=$(it_shim_start bench-memory --config "$IT_RUN/bench-config.yaml" --state-dir "$IT_RUN/shim-state")
shim_pid=$(cat "$IT_RUN/pids/bench-memory")
# it_shim_start records the wrapper's pid; the wrapper execs numa-shim, so it is the same.
grep -q numa-shim "/proc/$shim_pid/cmdline" || it_die "pid $shim_pid is not numa-shim"

mkdir -p "$IT_RUN/logs"
it_log "running ${duration}s: pod churn, and $clients clients for ${load}s then ${idle}s idle, per cycle"
timeout $((duration + 300)) "$bench_bin/relay_memory" --via "$shim" --pid "$shim_pid" \
    --duration "$duration" --load "$load" --idle "$idle" --clients "$clients" \
    --image "$IT_BUSYBOX_IMAGE" --cgroup-parent "/$IT_CG" --log-dir "$IT_RUN/logs" |
    tee "$out/samples.jsonl"
[[ -e /proc/$shim_pid ]] || it_die "numa-shim (pid $shim_pid) is gone"

{
    echo "- date: $(date -u +%FT%TZ); commit: $(git -C "$IT_REPO" rev-parse --short HEAD); numa-shim env: ${NUMA_SHIM_ENV:-none}"
    echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cpus; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- run: ${duration}s, cycles of ${clients} clients for ${load}s + ${idle}s idle, pod churn throughout"
} >"$out/machine.txt"
python3 - "$out/samples.jsonl" >"$out/summary.md" <<'EOT'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
samples = [r for r in rows if "rss_kib" in r]
summary = next(r for r in rows if r.get("summary"))
mib = lambda k: k / 1024
after = summary["rss_after_load_kib"]
load_peaks, cur = [], None
for r in samples:
    if r["phase"] == "load":
        cur = max(cur or 0, r["rss_kib"])
    elif cur is not None:
        load_peaks.append(cur)
        cur = None
print("| cycle | peak RSS under load | RSS after load (end of idle) |")
print("| --: | --: | --: |")
for i, a in enumerate(after):
    p = load_peaks[i] if i < len(load_peaks) else float("nan")
    print(f"| {i + 1} | {mib(p):.1f} MiB | {mib(a):.1f} MiB |")
print()
growth = mib(after[-1] - after[0]) if len(after) > 1 else float("nan")
worst = max(after) if after else 0
print(f"- RSS at start {mib(summary['rss_start_kib']):.1f} MiB, peak (VmHWM) {mib(summary['hwm_kib']):.1f} MiB; "
      f"{summary['pods']} pods churned, {summary['calls']} load calls")
print(f"- RSS after load: at most {mib(worst):.1f} MiB (target < 40 MiB: {'met' if mib(worst) < 40 else 'MISSED'}); "
      f"last minus first cycle {growth:+.1f} MiB (target: no growth)")
EOT
cat "$out/machine.txt" "$out/summary.md"
it_log "results in $out"

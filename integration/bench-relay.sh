#!/usr/bin/env bash
# Relay overhead benchmark: a private containerd and a RELEASE numa-shim in front of it on this
# machine; the load generator (benches/relay_load.rs) times the same calls straight to containerd
# and through numa-shim, interleaved, and numa-shim's idle RSS is read from /proc afterwards.
# Prints a summary and leaves results.jsonl + summary.md in $BENCH_OUT. Not part of CI.
#
# Needs root and integration/install-deps.sh (containerd, runc, CNI plugins, busybox-static,
# crictl). Knobs (environment): BENCH_CALLS (10000 Version calls per side), BENCH_CLIENTS (16),
# BENCH_PODS (30 pods per side), BENCH_OUT, IT_RUN (/run/numa-shim-bench, private state), BENCH_BIN
# (a directory with prebuilt numa-shim and relay_load to run instead of building).
# Everything it starts is torn down on exit by the harness teardown (PIDs, mounts, cgroups);
# every step is bounded by a timeout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Own state folder, so a harness run (/run/numa-shim-it) can go on beside this one.
export IT_RUN=${IT_RUN:-/run/numa-shim-bench}
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"

calls=${BENCH_CALLS:-10000}
clients=${BENCH_CLIENTS:-16}
pods=${BENCH_PODS:-30}
out=${BENCH_OUT:-$IT_WORK/bench-relay/$(date -u +%Y%m%dT%H%M%SZ)}
bench_bin=$IT_WORK/bench-relay/bin
mkdir -p "$out" "$bench_bin"
target=${CARGO_TARGET_DIR:-$IT_REPO/target}

# crictl (readiness checks and teardown only): the harness's, or one on PATH.
if [[ ! -x $IT_BIN/crictl ]] && command -v crictl >/dev/null; then
    mkdir -p "$IT_BIN"
    ln -sf "$(command -v crictl)" "$IT_BIN/crictl"
fi

if [[ -n ${BENCH_BIN:-} ]]; then
    # Prebuilt binaries (e.g. a "before" build kept aside to compare with an "after" build).
    [[ -x $BENCH_BIN/numa-shim && -x $BENCH_BIN/relay_load ]] ||
        it_die "BENCH_BIN=$BENCH_BIN must hold numa-shim and relay_load"
    cp "$BENCH_BIN/numa-shim" "$BENCH_BIN/relay_load" "$bench_bin/"
else
    it_log "building numa-shim (release) and the load generator"
    timeout 1800 cargo build --quiet --release --bin numa-shim --manifest-path "$IT_REPO/Cargo.toml"
    load_exe=$(timeout 1800 cargo bench --quiet --no-run --bench relay_load --message-format=json \
        --manifest-path "$IT_REPO/Cargo.toml" |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "relay_load" and m.get("executable"):
        print(m["executable"])')
    [[ -x $load_exe ]] || it_die "no relay_load executable"
    # Private copies: CARGO_TARGET_DIR may be shared and rebuilt by others while this runs.
    cp "$target/release/numa-shim" "$bench_bin/numa-shim"
    cp "$load_exe" "$bench_bin/relay_load"
fi
it_numa_shim_bin() { printf '%s\n' "$bench_bin/numa-shim"; }

trap it_teardown EXIT
it_up
shim=$(it_shim_start bench-shim)
shim_pid=$(cat "$IT_RUN/pids/bench-shim")
rss_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
rss_start=$(rss_kib "$shim_pid" VmRSS)
ctrd_pid=$(cat "$IT_RUN/pids/containerd")

# cpu_ticks PID: user + system clock ticks the process has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# The reference hop: a plain byte relay (relay_load byte-relay) in front of the same containerd,
# timed as a third Version target ("floor"): what any extra user-space hop costs on this machine.
floor=$IT_RUN/byte-relay.sock
"$bench_bin/relay_load" byte-relay --listen "$floor" --upstream "$IT_SOCK" \
    >"$IT_LOGS/byte-relay.log" 2>&1 &
echo $! >"$IT_RUN/pids/byte-relay"
it_wait_socket "$floor" 30 || it_die "the byte relay did not answer on $floor"

load=("$bench_bin/relay_load" --direct "$IT_SOCK" --via "$shim")
: >"$out/results.jsonl"
# 16 clients (the target's load), then 1 client (the hop alone, without queueing for the CPUs).
for c in "$clients" 1; do
    it_log "Version: $calls calls per side, $c clients"
    t0=$(cpu_ticks "$shim_pid")
    timeout 600 "${load[@]}" --floor "$floor" --deadline 540 version --calls "$calls" --clients "$c" |
        tee -a "$out/results.jsonl"
    t1=$(cpu_ticks "$shim_pid")
    # Only the "via" calls (calls + warm-up) pass through numa-shim.
    awk -v c="$c" -v t="$((t1 - t0))" -v hz="$hz" -v n="$((calls + 50 * c))" \
        'BEGIN {printf "{\"test\":\"shim-cpu\",\"clients\":%d,\"cpu_us_per_call\":%.1f}\n", c, t * 1e6 / hz / n}' |
        tee -a "$out/results.jsonl"
done
it_log "pod start: $pods pods per side (RunPodSandbox + CreateContainer + StartContainer)"
mkdir -p "$IT_RUN/logs"
timeout 900 "${load[@]}" --deadline 840 pods --pods "$pods" --image "$IT_BUSYBOX_IMAGE" \
    --cgroup-parent "/$IT_CG" --log-dir "$IT_RUN/logs" | tee -a "$out/results.jsonl"

it_log "idle for 5 s, then reading numa-shim's memory"
sleep 5
[[ -e /proc/$shim_pid ]] || it_die "numa-shim (pid $shim_pid) is gone"
printf '{"test":"memory","rss_start_kib":%s,"rss_idle_kib":%s,"hwm_kib":%s,"threads":%s}\n' \
    "$rss_start" "$(rss_kib "$shim_pid" VmRSS)" "$(rss_kib "$shim_pid" VmHWM)" \
    "$(rss_kib "$shim_pid" Threads)" | tee -a "$out/results.jsonl"

{
    echo "- date: $(date -u +%FT%TZ); commit: $(git -C "$IT_REPO" rev-parse --short HEAD)"
    echo "- cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cpus; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- kernel: $(uname -r); containerd: $("$IT_CONTAINERD_BIN" --version | awk '{print $3}') (pid $ctrd_pid); runc: $(runc --version | head -1 | awk '{print $3}')"
} >"$out/machine.txt"
python3 - "$out/results.jsonl" >"$out/summary.md" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {(r["test"], r.get("target"), r.get("clients")): r for r in rows}
print("| test | clients | side | n | p50 µs | p90 µs | p99 µs | mean µs | max µs |")
print("| --- | --: | --- | --: | --: | --: | --: | --: | --: |")
keys = sorted({(t, c) for (t, s, c) in by if s}, key=lambda k: (k[0] != "version", -k[1]))
for t, c in keys:
    for s in ("direct", "via", "floor"):
        r = by.get((t, s, c))
        if r:
            print(f"| {t} | {c} | {s} | {r['n']} | {r['p50_us']:.0f} | {r['p90_us']:.0f} | {r['p99_us']:.0f} | {r['mean_us']:.0f} | {r['max_us']:.0f} |")
print()
for t, c in keys:
    d, v = by.get((t, "direct", c)), by.get((t, "via", c))
    if not (d and v):
        continue
    if t == "version":
        a50, a99 = v["p50_us"] - d["p50_us"], v["p99_us"] - d["p99_us"]
        cpu = by.get(("shim-cpu", None, c))
        extra = f"; numa-shim CPU {cpu['cpu_us_per_call']:.0f} µs per relayed call" if cpu else ""
        f = by.get((t, "floor", c))
        if f:
            extra += (f"; a plain byte relay adds p50 {f['p50_us'] - d['p50_us']:.0f} µs, "
                      f"p99 {f['p99_us'] - d['p99_us']:.0f} µs")
        print(f"- Version, {c} clients, added latency: p50 {a50:.0f} µs (target ≤ 50: {'met' if a50 <= 50 else 'MISSED'}), "
              f"p99 {a99:.0f} µs (target ≤ 250: {'met' if a99 <= 250 else 'MISSED'}){extra}")
    else:
        r50, rm = v["p50_us"] / d["p50_us"], v["mean_us"] / d["mean_us"]
        pr = by.get(("pods-paired", None, None))
        paired = f", median of pairwise ratios {pr['median_ratio']:.3f}" if pr else ""
        print(f"- pod start via/direct: p50 {r50:.3f}, mean {rm:.3f}{paired} (target ≤ 1.02: {'met' if r50 <= 1.02 else 'MISSED'} on p50)")
m = by.get(("memory", None, None))
if m:
    mib = m["rss_idle_kib"] / 1024
    print(f"- numa-shim RSS: {m['rss_start_kib'] / 1024:.1f} MiB at start, {mib:.1f} MiB idle after the runs, "
          f"peak {m['hwm_kib'] / 1024:.1f} MiB, {m['threads']} threads (target idle < 20 MiB: {'met' if mib < 20 else 'MISSED'})")
EOF
cat "$out/machine.txt" "$out/summary.md"
it_log "results in $out"

# shellcheck shell=bash
# The targets of the peer comparison benchmark (integration/bench-relay.sh): how each relay is
# built and started in front of the harness's private containerd, and the figures read from the
# kernel about it (RSS from /proc, instructions under callgrind).
#
# Targets: shim-on (numa-shim placing pods as a user runs it: static CPU policy, pod scope,
# Static memory), shim-off (numa-shim without placement), go-proxy (transparent grpc-go proxy),
# go-cri (typed grpc-go CRI relay), floor-rust (relay_load byte-relay), floor-c (epoll-relay).
# The benchmark scripts source only this: it brings in the harness they share (common.sh,
# image.sh, containerd.sh).

# shellcheck source=integration/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=integration/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$(dirname "${BASH_SOURCE[0]}")/containerd.sh"

BENCH_PEERS=$IT_REPO/integration/bench-peers
# shellcheck disable=SC2034 # used by integration/bench-relay.sh
BENCH_TARGETS=(shim-on shim-off go-proxy go-cri floor-rust floor-c)
# numa-shim's placement settings in shim-on: the real-runtime tests' POD_SCOPE
# (tests/realruntime/support.rs), the settings every placement test starts from.
BENCH_PLACEMENT='cpuManagerPolicy: static
reservedSystemCPUs: ""
topologyManagerPolicy: best-effort
topologyManagerScope: pod
memoryManagerPolicy: Static
reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]
'

# numa-shim's checkpoints go on the disk, as a user's /var/lib/numa-shim does (IT_RUN is often a
# tmpfs, where fsync costs nothing): BENCH_STATE_ROOT/LABEL, unless BENCH_STATE[LABEL] names
# another folder. The root holds a marker file and is removed only if the marker is there.
BENCH_STATE_ROOT=${BENCH_STATE_ROOT:-$IT_WORK/bench-state/$IT_CG}
declare -A BENCH_STATE=()
_BENCH_MARK=.numa-shim-bench-state

# bench_state_init: an empty BENCH_STATE_ROOT (what a killed earlier run left is removed).
bench_state_init() {
    bench_state_remove
    [[ ! -e $BENCH_STATE_ROOT ]] || it_die "BENCH_STATE_ROOT=$BENCH_STATE_ROOT exists and is not ours"
    mkdir -p "$BENCH_STATE_ROOT"
    : >"$BENCH_STATE_ROOT/$_BENCH_MARK"
}

# bench_state_remove: removes BENCH_STATE_ROOT if it carries the marker.
bench_state_remove() {
    if [[ -f $BENCH_STATE_ROOT/$_BENCH_MARK ]]; then
        rm -rf "$BENCH_STATE_ROOT"
    fi
}

# bench_teardown: the EXIT trap: the harness teardown (keeping the exit status), then the
# checkpoints.
bench_teardown() {
    local rc=$?
    set +e
    (exit "$rc")
    it_teardown
    bench_state_remove
    return "$rc"
}

# bench_build_shim BIN BENCH: puts numa-shim (release) and the executable of cargo bench target
# BENCH (the benchmark's driver) into BIN; with BENCH_BIN set, copies both from there instead.
bench_build_shim() {
    local bin=$1 bench=$2 target=${CARGO_TARGET_DIR:-$IT_REPO/target} exe
    if [[ -n ${BENCH_BIN:-} ]]; then
        [[ -x $BENCH_BIN/numa-shim && -x $BENCH_BIN/$bench ]] ||
            it_die "BENCH_BIN=$BENCH_BIN must hold numa-shim and $bench"
        cp "$BENCH_BIN/numa-shim" "$BENCH_BIN/$bench" "$bin/"
        return
    fi
    it_log "building numa-shim (release) and $bench"
    timeout 3000 cargo build --quiet --release --bin numa-shim --manifest-path "$IT_REPO/Cargo.toml"
    exe=$(timeout 3000 cargo bench --quiet --no-run --bench "$bench" --message-format=json \
        --manifest-path "$IT_REPO/Cargo.toml" |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$bench")
    [[ -x $exe ]] || it_die "no $bench executable"
    # Private copies: CARGO_TARGET_DIR may be shared and rebuilt by others while this runs.
    cp "$target/release/numa-shim" "$bin/numa-shim"
    cp "$exe" "$bin/$bench"
}

# bench_build BIN: puts numa-shim (release), relay_load, the Go peers, the Go load generator and
# the C byte relay into BIN. With BENCH_BIN set, numa-shim and relay_load are copied from there
# instead (e.g. a "before" build kept aside). Also links a crictl from PATH for readiness checks
# when the harness has none.
bench_build() {
    local bin=$1
    if [[ ! -x $IT_BIN/crictl ]] && command -v crictl >/dev/null; then
        mkdir -p "$IT_BIN"
        ln -sf "$(command -v crictl)" "$IT_BIN/crictl"
    fi
    bench_build_shim "$bin" relay_load
    it_log "building the Go peers, the Go load generator and the C byte relay"
    bench_build_peers "$bin"
}

# bench_build_peers BIN: builds the Go peers, the Go load generator and the C byte relay into BIN
# (Go modules from the module proxy or cache, pinned by their committed go.sum).
bench_build_peers() {
    local bin=$1 m
    for m in grpc-proxy cri-relay cri-load; do
        (cd "$BENCH_PEERS/$m" && timeout 900 go build -mod=readonly -trimpath -o "$bin/$m.tmp" . &&
            mv "$bin/$m.tmp" "$bin/$m") || it_die "go build of integration/bench-peers/$m failed"
    done
    gcc -O2 -Wall -Wextra -Werror -o "$bin/epoll-relay" "$BENCH_PEERS/epoll-relay.c" ||
        it_die "gcc of integration/bench-peers/epoll-relay.c failed"
}

# bench_cmd KIND LABEL: sets BENCH_CMD to the command that serves target KIND on
# IT_RUN/LABEL.sock (config under IT_RUN/LABEL/, checkpoint as above). Binaries come from
# $bench_bin.
bench_cmd() {
    local kind=$1 label=$2 sock=$IT_RUN/$2.sock dir=$IT_RUN/$2
    local state=${BENCH_STATE[$label]:-$BENCH_STATE_ROOT/$label}
    mkdir -p "$dir"
    rm -f "$sock"
    case $kind in
    shim-on | shim-off)
        if [[ $kind == shim-on ]]; then
            printf '%s' "$BENCH_PLACEMENT" >"$dir/config.yaml"
        else
            : >"$dir/config.yaml"
        fi
        # shellcheck disable=SC2154 # bench_bin: set by the script that sources this file
        local shim=$bench_bin/numa-shim
        [[ $label == shim-base ]] && shim=$BENCH_BASE_BIN
        BENCH_CMD=("$shim" serve --listen "unix://$sock" --runtime "unix://$IT_SOCK"
            --config "$dir/config.yaml" --state-dir "$state" --pod-knowledge cri
            --pod-resources-socket "$dir/pod-resources.sock" --kubelet-pod-resources-socket none)
        # /metrics on loopback for the timed targets (numa-shim's own time per method).
        if [[ $label == "$kind" || $label == shim-base ]]; then
            BENCH_CMD+=(--metrics-address "127.0.0.1:$(bench_metrics_port "$label")")
        fi
        ;;
    go-proxy) BENCH_CMD=("$bench_bin/grpc-proxy" -listen "$sock" -runtime "$IT_SOCK") ;;
    go-cri) BENCH_CMD=("$bench_bin/cri-relay" -listen "$sock" -runtime "$IT_SOCK") ;;
    floor-rust) BENCH_CMD=("$bench_bin/relay_load" byte-relay --listen "$sock" --upstream "$IT_SOCK") ;;
    floor-c) BENCH_CMD=("$bench_bin/epoll-relay" "$sock" "$IT_SOCK") ;;
    *) it_die "unknown bench target $kind" ;;
    esac
}

# bench_metrics_port LABEL: the loopback port of shim-on's (BENCH_METRICS_PORT, 19464),
# shim-off's (the next one) or shim-base's (the one after) /metrics.
bench_metrics_port() {
    local base=${BENCH_METRICS_PORT:-19464}
    case $1 in
    shim-on) echo "$base" ;;
    shim-off) echo "$((base + 1))" ;;
    *) echo "$((base + 2))" ;;
    esac
}

# bench_relay_times KIND: one JSON line per CRI method numa-shim (shim-on or shim-off) relayed,
# with the mean time spent inside numa-shim and waiting for the runtime (its relay histograms),
# and one with its checkpoint writes so far.
bench_relay_times() {
    python3 - "$1" "$(bench_metrics_port "$1")" <<'PY'
import json, re, sys, urllib.request
target, port = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
series = {}
for m in re.finditer(r'^numa_shim_relay_(shim|runtime)_duration_seconds_(sum|count)\{method="(\w+)"\} (\S+)$', text, re.M):
    series.setdefault(m[3], {})[f"{m[1]}_{m[2]}"] = float(m[4])
for method, v in sorted(series.items()):
    n = v.get("shim_count", 0)
    if n:
        print(json.dumps({"test": "relay-time", "target": target, "method": method, "n": int(n),
                          "shim_ms_mean": v["shim_sum"] / n * 1e3, "runtime_ms_mean": v["runtime_sum"] / n * 1e3}))
w = re.search(r"^numa_shim_checkpoint_writes_total (\S+)$", text, re.M)
print(json.dumps({"test": "checkpoint-writes", "target": target, "n": int(float(w[1])) if w else None}))
PY
}

# bench_start KIND LABEL [PREFIX...]: starts target KIND as LABEL (optionally under PREFIX, e.g.
# valgrind), waits until it answers Version on IT_RUN/LABEL.sock, and prints its pid.
bench_start() {
    local kind=$1 label=$2 pid
    shift 2
    bench_cmd "$kind" "$label"
    "$@" "${BENCH_CMD[@]}" >"$IT_LOGS/$label.log" 2>&1 &
    pid=$!
    echo "$pid" >"$IT_RUN/pids/$label"
    it_wait_socket "$IT_RUN/$label.sock" 120 || it_die "$label did not answer (log $IT_LOGS/$label.log)"
    printf '%s\n' "$pid"
}

# bench_stop LABEL: ends a target bench_start started (TERM, then KILL), by its recorded pid.
bench_stop() {
    local f=$IT_RUN/pids/$1 pid i
    [[ -f $f ]] || return 0
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$f"
}

# bench_kill LABEL: KILLs a target bench_start started, by its recorded pid.
bench_kill() {
    local f=$IT_RUN/pids/$1
    [[ -f $f ]] || return 0
    kill -KILL "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
}

# bench_memory PHASE LABEL PID: one JSON line with the process's VmRSS, VmHWM and threads.
bench_memory() {
    local phase=$1 label=$2 pid=$3
    [[ -r /proc/$pid/status ]] || it_die "$label (pid $pid) is gone"
    awk -v phase="$phase" -v t="$label" '
        $1 == "VmRSS:" {rss = $2} $1 == "VmHWM:" {hwm = $2} $1 == "Threads:" {th = $2}
        END {printf "{\"test\":\"memory\",\"phase\":\"%s\",\"target\":\"%s\",\"rss_kib\":%d,\"hwm_kib\":%d,\"threads\":%d}\n", phase, t, rss, hwm, th}
    ' "/proc/$pid/status"
}

# _bench_ir FILE: total instructions (Ir) in a callgrind output file.
_bench_ir() {
    awk '$1 == "totals:" {print $2; exit}' "$1"
}

# _bench_calls LABEL CLIENTS CALLS: CALLS Version calls to IT_RUN/LABEL.sock, no warm-up.
_bench_calls() {
    timeout 900 "$bench_bin/cri-load" version -target "$1=$IT_RUN/$1.sock" -clients "$2" \
        -rounds 1 -calls "$3" -warmup 0 >/dev/null || it_die "callgrind load on $1 failed"
}

# bench_instructions KIND CLIENTS CALLS_A CALLS_B OUT: runs target KIND under callgrind, warms it
# up, zeroes the counters, then serves CALLS_A and CALLS_B Version calls from CLIENTS new
# connections with a profile dump after each (callgrind_control, through vgdb), and prints one
# JSON line with the instructions per call (Ir_B - Ir_A) / (CALLS_B - CALLS_A): connection
# set-up and everything else per load cancels out. The process is then killed: Go programs
# under callgrind 3.19 can trip an assertion in callgrind's signal handling on SIGTERM (and on
# SIGPIPE, which the Go peers ignore). Profiles stay in OUT.
bench_instructions() {
    local kind=$1 clients=$2 a=$3 b=$4 out=$5 label pid ir_a ir_b
    label=cg-$kind-$clients
    mkdir -p "$out"
    rm -f "$out/$label.out"*
    # GODEBUG: Go programs under callgrind 3.19 need async preemption off; the others ignore it.
    pid=$(bench_start "$kind" "$label" env GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
        --callgrind-out-file="$out/$label.out")
    _bench_calls "$label" "$clients" 200
    timeout 120 callgrind_control -z "$pid" >/dev/null 2>&1 || it_die "callgrind_control -z $label failed"
    _bench_calls "$label" "$clients" "$a"
    timeout 120 callgrind_control -d "$pid" >/dev/null 2>&1 || it_die "callgrind_control -d $label failed"
    _bench_calls "$label" "$clients" "$b"
    timeout 120 callgrind_control -d "$pid" >/dev/null 2>&1 || it_die "callgrind_control -d $label failed"
    bench_kill "$label"
    ir_a=$(_bench_ir "$out/$label.out.1")
    ir_b=$(_bench_ir "$out/$label.out.2")
    [[ -n $ir_a && -n $ir_b ]] || it_die "no callgrind totals for $label in $out"
    awk -v t="$kind" -v c="$clients" -v a="$a" -v b="$b" -v ia="$ir_a" -v ib="$ir_b" 'BEGIN {
        printf "{\"test\":\"instructions\",\"target\":\"%s\",\"clients\":%d,\"calls\":[%d,%d],\"ir\":[%s,%s],\"ir_per_call\":%.0f}\n",
            t, c, a, b, ia, ib, (ib - ia) / (b - a) }'
}

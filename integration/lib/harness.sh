# shellcheck shell=bash
# What the private runtimes of the harness share (lib/containerd.sh, lib/crio.sh): the
# loopback-only CNI config, numa-shim instances in front of the runtime, signalling by PID, and a
# teardown that removes pods, processes, mounts and cgroups and leaves the machine as it was.
# Source after common.sh; the runtime's library sources it and sets:
#   IT_SOCK                  the runtime's CRI socket
#   IT_RUNTIME_NAME          its name (the file under IT_RUN/pids holding its PID)
#   _it_runtime_leftovers    a function that ends the runtime's helper processes (shims, conmon)
#   IT_RUNTIME_CGROUPS       cgroup folders the runtime makes for pods without a cgroup parent
#                            (critest's, on a cgroupfs runtime): removed when empty, never
#                            entered, since another harness's runtime may use them too
# Clients of the runtime that would re-create pods (lib/kubelet.sh's kubelets) add a function to
# IT_TEARDOWN_FIRST that stops them; it_teardown runs those first.
#
# Only processes recorded here (and the helpers and container processes of this runtime) are ever
# signalled, each by PID after checking its command line names IT_RUN.

[[ -n ${_IT_HARNESS_SH:-} ]] && return 0
_IT_HARNESS_SH=1
IT_LOGS=$IT_WORK/logs/$IT_CG
export IT_LOGS
# Functions it_teardown runs first, before it removes pods.
IT_TEARDOWN_FIRST=()

# _it_write_cni DIR: the CNI config of the harness's pods. Pods get a network namespace with
# loopback only: the `static` IPAM plugin run as the main plugin reports 127.0.0.2 for eth0
# without creating any link, and the runtime brings up `lo` itself.
_it_write_cni() {
    mkdir -p "$1"
    cat >"$1/10-loopback-only.conflist" <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "numa-shim-it-loopback",
  "plugins": [
    {"type": "static", "ipam": {"type": "static", "addresses": [{"address": "127.0.0.2/8"}]}}
  ]
}
EOF
}

# _it_wait_network: waits (10 s at most) until the runtime reports NetworkReady.
_it_wait_network() {
    local i
    for ((i = 0; i < 50; i++)); do
        it_crictl "$IT_SOCK" info 2>/dev/null | tr -d ' \n' |
            grep -Eq '\{[^}]*"status":true[^}]*"type":"NetworkReady"' && return 0
        sleep 0.2
    done
    return 1
}

# it_shim_start NAME [ARGS...]: starts `numa-shim serve` in front of the private runtime on
# IT_RUN/NAME.sock and prints that path.
it_shim_start() {
    local name=$1 bin sock
    shift
    bin=$(it_numa_shim_bin)
    sock=$IT_RUN/$name.sock
    [[ -x $bin ]] || it_die "no numa-shim binary at $bin (cargo build)"
    rm -f "$sock"
    "$bin" serve --listen "unix://$sock" --runtime "unix://$IT_SOCK" "$@" \
        >"$IT_LOGS/$name.log" 2>&1 &
    echo $! >"$IT_RUN/pids/$name"
    it_log "numa-shim pid $! on $sock (log $IT_LOGS/$name.log)"
    it_wait_socket "$sock" 30 || it_die "numa-shim did not answer on $sock"
    printf '%s\n' "$sock"
}

# _it_kill PID: TERM then KILL a process, only if its command line mentions IT_RUN.
_it_kill() {
    local pid=$1 i
    [[ -r /proc/$pid/cmdline ]] || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$IT_RUN" || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        [[ -e /proc/$pid ]] || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# _it_cgroup_dirs: every cgroup folder under the harness's cgroup parents, deepest first.
_it_cgroup_dirs() {
    local h p
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/unified/; do
        for p in "${IT_CGROUP_PARENTS[@]}"; do
            [[ -d $h$p ]] && find "$h$p" -depth -type d
        done
    done
}

# _it_runc_leftovers: deletes (killing their processes) the containers runc still knows under
# IT_RUN/runc (both runtimes keep runc's state there: <root>/<id> or <root>/<namespace>/<id>).
_it_runc_leftovers() {
    local state dir
    while read -r state; do
        dir=${state%/state.json}
        runc --root "${dir%/*}" delete --force "${dir##*/}" >/dev/null 2>&1
    done < <(find "$IT_RUN/runc" -maxdepth 3 -name state.json 2>/dev/null)
}

# it_teardown: removes every pod, stops numa-shim and the runtime, unmounts, removes cgroups and
# IT_RUN. Safe to call more than once and after a partial start.
it_teardown() {
    local rc=$? f pid m d errexit=
    [[ $- == *e* ]] && errexit=1
    set +e
    if [[ -d $IT_RUN ]]; then
        for f in "${IT_TEARDOWN_FIRST[@]}"; do "$f"; done
        if [[ -S $IT_SOCK && -x $IT_BIN/crictl ]]; then
            it_crictl "$IT_SOCK" rmp -a -f >/dev/null 2>&1
        fi
        for f in "$IT_RUN"/pids/*; do
            [[ -f $f && ${f##*/} != "$IT_RUNTIME_NAME" ]] || continue
            _it_kill "$(cat "$f")"
        done
        [[ -f $IT_RUN/pids/$IT_RUNTIME_NAME ]] && _it_kill "$(cat "$IT_RUN/pids/$IT_RUNTIME_NAME")"
        _it_runtime_leftovers
        _it_runc_leftovers
        while read -r d; do
            [[ -r $d/cgroup.procs ]] || continue
            while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$d/cgroup.procs"
        done < <(_it_cgroup_dirs)
        sleep 0.2
        while read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
        done < <(findmnt -rn -o TARGET | grep -F "$IT_RUN/" | sort -r)
        while read -r d; do rmdir "$d" 2>/dev/null; done < <(_it_cgroup_dirs)
        for d in "${IT_RUNTIME_CGROUPS[@]}"; do
            rmdir /sys/fs/cgroup/*/"$d" /sys/fs/cgroup/unified/"$d" 2>/dev/null
        done
        if [[ -n $(_it_cgroup_dirs) ]]; then
            it_log "WARNING: cgroup folders left: $(_it_cgroup_dirs | tr '\n' ' ')"
        fi
        rm -rf "$IT_RUN"
    fi
    [[ -n $errexit ]] && set -e
    return "$rc"
}

# shellcheck shell=bash
# A private containerd (own config, root, state, sockets, CNI config) and numa-shim instances in
# front of it, with a teardown that leaves the machine as it found it. Source after common.sh and
# image.sh; call `it_up` and `trap it_teardown EXIT`.
#
# Only processes recorded here (and the shims and container processes of this containerd) are ever
# signalled, each by PID after checking its command line names IT_RUN.

IT_SOCK=$IT_RUN/containerd.sock
IT_LOGS=$IT_WORK/logs/$IT_CG
export IT_SOCK IT_LOGS

# _it_write_config: the containerd config.toml, CNI config and directories under IT_RUN.
_it_write_config() {
    mkdir -p "$IT_RUN"/{root,state,cni,pids,opt} "$IT_LOGS"
    # Pods get a network namespace with loopback only: the `static` IPAM plugin run as the main plugin
    # reports 127.0.0.2 for eth0 without creating any link, and containerd adds `lo` itself.
    cat >"$IT_RUN/cni/10-loopback-only.conflist" <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "numa-shim-it-loopback",
  "plugins": [
    {"type": "static", "ipam": {"type": "static", "addresses": [{"address": "127.0.0.2/8"}]}}
  ]
}
EOF
    cat >"$IT_RUN/config.toml" <<EOF
version = 2
root = "$IT_RUN/root"
state = "$IT_RUN/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$IT_SOCK"
[ttrpc]
  address = "$IT_SOCK.ttrpc"
[debug]
  address = "$IT_RUN/debug.sock"
  level = "info"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$IT_RUN/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$IT_PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$IT_RUN/cni"
    max_conf_num = 1
EOF
}

# it_up: starts the private containerd, waits until its CRI answers, imports the test images.
it_up() {
    command -v containerd >/dev/null || it_die "containerd is not installed (integration/install-deps.sh)"
    [[ -x $IT_BIN/crictl ]] || it_die "no $IT_BIN/crictl (integration/install-deps.sh)"
    if [[ -d $IT_RUN ]]; then
        it_log "leftover $IT_RUN from an earlier run: tearing it down first"
        it_teardown
    fi
    _it_write_config
    containerd --config "$IT_RUN/config.toml" >"$IT_LOGS/containerd.log" 2>&1 &
    echo $! >"$IT_RUN/pids/containerd"
    it_log "containerd pid $! on $IT_SOCK (log $IT_LOGS/containerd.log)"
    it_wait_socket "$IT_SOCK" 30 || it_die "containerd did not answer on $IT_SOCK"
    it_import_images "$IT_SOCK"
    local i
    for ((i = 0; i < 50; i++)); do
        it_crictl "$IT_SOCK" info 2>/dev/null | tr -d ' \n' |
            grep -Eq '\{[^}]*"status":true[^}]*"type":"NetworkReady"' && break
        sleep 0.2
    done
    export NUMA_SHIM_IT_CONTAINERD=$IT_SOCK
}

# it_shim_start NAME [ARGS...]: starts `numa-shim serve` in front of the private containerd on
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

# it_teardown: removes every pod, stops numa-shim and containerd, unmounts, removes cgroups and
# IT_RUN. Safe to call more than once and after a partial start.
it_teardown() {
    local rc=$? f pid m d
    set +e
    [[ -d $IT_RUN ]] || return "$rc"
    if [[ -S $IT_SOCK && -x $IT_BIN/crictl ]]; then
        it_crictl "$IT_SOCK" rmp -a -f >/dev/null 2>&1
    fi
    for f in "$IT_RUN"/pids/*; do
        [[ -f $f && ${f##*/} != containerd ]] || continue
        _it_kill "$(cat "$f")"
    done
    [[ -f $IT_RUN/pids/containerd ]] && _it_kill "$(cat "$IT_RUN/pids/containerd")"
    # Shims this containerd started (they carry its socket address) and their containers.
    for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $IT_SOCK( |\$)"); do
        _it_kill "$pid"
    done
    while read -r d; do
        [[ -r $d/cgroup.procs ]] || continue
        while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$d/cgroup.procs"
    done < <(_it_cgroup_dirs)
    sleep 0.2
    while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done < <(findmnt -rn -o TARGET | grep -F "$IT_RUN/" | sort -r)
    while read -r d; do rmdir "$d" 2>/dev/null; done < <(_it_cgroup_dirs)
    if [[ -n $(_it_cgroup_dirs) ]]; then
        it_log "WARNING: cgroup folders left: $(_it_cgroup_dirs | tr '\n' ' ')"
    fi
    rm -rf "$IT_RUN"
    return "$rc"
}

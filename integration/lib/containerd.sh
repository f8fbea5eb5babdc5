# shellcheck shell=bash
# A private containerd (own config, root, state, sockets, CNI config): Debian's 1.6, or the
# build of IT_CONTAINERD_VERSION (1.7 or 2.x). Source after common.sh and image.sh (or through
# runtime.sh); call `it_up` and `trap it_teardown EXIT`. numa-shim instances, signalling and
# teardown are lib/harness.sh's.

# shellcheck source=integration/lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

IT_SOCK=$IT_RUN/containerd.sock
IT_RUNTIME_NAME=containerd
# shellcheck disable=SC2034 # used by harness.sh
IT_RUNTIME_CGROUPS=(k8s.io)
# The containerd binary and its runc shim: the builds install-deps.sh made of
# IT_CONTAINERD_VERSION (build-containerd.sh, cached in IT_CACHE), or Debian's 1.6 (no
# GetContainerEvents) when that is empty. runc and ctr are Debian's.
if [[ -n ${IT_CONTAINERD_VERSION:-} ]]; then
    IT_CONTAINERD_BIN=${IT_CONTAINERD_BIN:-$IT_CACHE/bin/containerd-$IT_CONTAINERD_VERSION}
    IT_CONTAINERD_SHIM=${IT_CONTAINERD_SHIM:-$IT_CACHE/bin/containerd-shim-runc-v2-$IT_CONTAINERD_VERSION}
fi
IT_CONTAINERD_BIN=${IT_CONTAINERD_BIN:-containerd}
export IT_SOCK IT_RUNTIME_NAME

# _it_write_config: the containerd config.toml, CNI config and directories under IT_RUN.
_it_write_config() {
    mkdir -p "$IT_RUN"/{root,state,pids,opt} "$IT_LOGS"
    _it_write_cni "$IT_RUN/cni"
    local runtime_path=
    [[ -n ${IT_CONTAINERD_SHIM:-} ]] && runtime_path="runtime_path = \"$IT_CONTAINERD_SHIM\""
    # `version` first: a key after a [table] header would belong to that table. 2.x reads
    # version 3 (2.4 migrates it to its version 4 and says so in its log; version 4 no longer
    # reads the [grpc] and [ttrpc] tables, so the daemon would listen on the system socket), and
    # imports /etc/containerd/conf.d/*.toml unless told otherwise.
    local version=2
    [[ ${IT_CONTAINERD_VERSION:-} == v2.* ]] && version=3
    cat >"$IT_RUN/config.toml" <<EOF
version = $version
root = "$IT_RUN/root"
state = "$IT_RUN/state"
imports = []
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
EOF
    if ((version == 2)); then
        _it_config_v2 "$runtime_path" >>"$IT_RUN/config.toml"
    else
        _it_config_v3 "$runtime_path" >>"$IT_RUN/config.toml"
    fi
}

# _it_config_v2 RUNTIME_PATH_LINE: the CRI plugin settings of containerd 1.6 / 1.7 (version 2).
# runc keeps its state under IT_RUN (Root), not in /run/containerd/runc; containerd 1.x still puts
# its shims' sockets in /run/containerd/s (not configurable there).
_it_config_v2() {
    cat <<EOF
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
      $1
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$IT_RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$IT_RUN/cni"
    max_conf_num = 1
EOF
}

# _it_config_v3 RUNTIME_PATH_LINE: the same for containerd 2.x, whose CRI plugin is split into
# runtime, images and server plugins (version 3). NRI, on by default there, would listen on
# /var/run/nri/nri.sock: it is turned off.
_it_config_v3() {
    cat <<EOF
[plugins."io.containerd.internal.v1.opt"]
  path = "$IT_RUN/opt"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$IT_PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      $1
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$IT_RUN/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$IT_RUN/cni"
    max_conf_num = 1
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
}

# it_up: starts the private containerd, waits until its CRI answers, imports the test images.
it_up() {
    command -v "$IT_CONTAINERD_BIN" >/dev/null || it_die "no $IT_CONTAINERD_BIN (integration/install-deps.sh)"
    [[ -x $IT_BIN/crictl ]] || it_die "no $IT_BIN/crictl (integration/install-deps.sh)"
    if [[ -d $IT_RUN ]]; then
        it_log "leftover $IT_RUN from an earlier run: tearing it down first"
        it_teardown
    fi
    _it_write_config
    "$IT_CONTAINERD_BIN" --config "$IT_RUN/config.toml" >"$IT_LOGS/containerd.log" 2>&1 &
    ln -sf "$IT_LOGS/containerd.log" "$IT_RUN/runtime.log"
    echo $! >"$IT_RUN/pids/containerd"
    it_log "containerd pid $! on $IT_SOCK (log $IT_LOGS/containerd.log)"
    it_wait_socket "$IT_SOCK" 30 || it_die "containerd did not answer on $IT_SOCK"
    it_import_images "$IT_SOCK"
    _it_wait_network || it_log "WARNING: containerd does not report NetworkReady"
    export NUMA_SHIM_IT_CONTAINERD=$IT_SOCK
}

# _it_runtime_leftovers: the shims this containerd started (they carry its socket address) and
# their containers.
_it_runtime_leftovers() {
    local pid
    for pid in $(pgrep -f "containerd-shim-runc-v2[^ ]* .*-address $IT_SOCK( |\$)"); do
        _it_kill "$pid"
    done
}

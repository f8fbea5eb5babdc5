# shellcheck shell=bash
# A private CRI-O (the build of IT_CRIO_VERSION, cached in IT_CACHE by build-crio.sh) with
# Debian's conmon and runc: own config file, root, runroot, socket and every other path under
# IT_RUN, so that nothing is created in /etc, /var or /run outside it (but the CNI result cache,
# see _IT_SKOPEO below). Source after common.sh and image.sh (or through runtime.sh); call
# `it_up` and `trap it_teardown EXIT`. numa-shim instances, signalling and teardown are
# lib/harness.sh's.
#
# What this machine needs on top of a plain CRI-O:
# - runc is called through lib/runc-for-crio.sh: CRI-O asks for oom_score_adj -998 (infra
#   containers) and this machine lacks CAP_SYS_RESOURCE (CRI-O has no restrict_oom_score_adj),
#   and a SIGTERM sent before the container's program runs is lost.
# - The test pause image exits on SIGTERM (lib/image.sh), or every StopPodSandbox of a pod with
#   an infra container waits for the request's deadline.
# - enable_pod_events = true, or GetContainerEvents is an empty stream (CRI-O queues events
#   until the first subscriber).

# shellcheck source=integration/lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"

IT_CRIO_VERSION=${IT_CRIO_VERSION:-v1.36.3}
IT_CRIO_BIN=${IT_CRIO_BIN:-$IT_CACHE/bin/crio-$IT_CRIO_VERSION}
IT_PINNS_BIN=${IT_PINNS_BIN:-$IT_CACHE/bin/pinns-$IT_CRIO_VERSION}
IT_SOCK=$IT_RUN/crio.sock
IT_RUNTIME_NAME=crio
# shellcheck disable=SC2034 # used by harness.sh
IT_RUNTIME_CGROUPS=(crio)
export IT_CRIO_VERSION IT_SOCK IT_RUNTIME_NAME

# _it_write_config: crio.conf, the image policy, registries, storage and CNI config, and the
# directories, all under IT_RUN.
_it_write_config() {
    local r=$IT_RUN
    mkdir -p "$r"/{root,runroot,pids,bin,runc,exits,attach,ns,logs,tmp,hooks,cdi,crio.conf.d,keys,policies,auth} "$IT_LOGS"
    _it_write_cni "$r/cni"
    command -v runc >/dev/null || it_die "no runc (integration/install-deps.sh)"
    install -m 755 "$(dirname "${BASH_SOURCE[0]}")/runc-for-crio.sh" "$r/bin/runc"
    printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' >"$r/policy.json"
    printf 'unqualified-search-registries = []\n' >"$r/registries.conf"
    printf '[storage]\ndriver = "overlay"\ngraphroot = "%s/root"\nrunroot = "%s/runroot"\n' "$r" "$r" >"$r/storage.conf"
    cat >"$r/crio.conf" <<EOF
[crio]
root = "$r/root"
runroot = "$r/runroot"
storage_driver = "overlay"
log_dir = "$r/logs"
version_file = "$r/version"
version_file_persist = "$r/version-persist"
clean_shutdown_file = "$r/clean.shutdown"

[crio.api]
listen = "$IT_SOCK"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
selinux = false
apparmor_profile = ""
enable_pod_events = true
namespaces_dir = "$r/ns"
pinns_path = "$IT_PINNS_BIN"
container_exits_dir = "$r/exits"
container_attach_socket_dir = "$r/attach"
hooks_dir = ["$r/hooks"]
cdi_spec_dirs = ["$r/cdi"]
decryption_keys_path = "$r/keys"
default_mounts_file = ""
irqbalance_config_file = "$r/irqbalance"
irqbalance_config_restore_file = "disable"
blockio_config_file = ""
rdt_config_file = ""
enable_criu_support = false
log_to_journald = false
# No pod of the harness maps host ports; the hostport manager would use the host's iptables.
disable_hostport_mapping = true

[crio.runtime.runtimes.runc]
runtime_path = "$r/bin/runc"
runtime_type = "oci"
runtime_root = "$r/runc"
monitor_path = "$(command -v conmon)"
monitor_cgroup = "pod"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]

[crio.image]
pause_image = "$IT_PAUSE_IMAGE"
pause_command = "/bin/pause"
pinned_images = ["$IT_PAUSE_IMAGE"]
signature_policy = "$r/policy.json"
signature_policy_dir = "$r/policies"
namespaced_auth_dir = "$r/auth"
global_auth_file = ""
big_files_temporary_dir = "$r/tmp"

[crio.network]
network_dir = "$r/cni"
plugin_dirs = ["/usr/lib/cni"]
cni_default_network = "numa-shim-it-loopback"

[crio.metrics]
enable_metrics = false

# The metrics ListMetricDescriptors / ListPodSandboxMetrics report (critest checks for them).
[crio.stats]
included_pod_metrics = ["all"]

[crio.tracing]
enable_tracing = false

[crio.nri]
enable_nri = false
EOF
    _it_write_cpu_features "$r/crio.conf.d/50-cpu-features.conf"
}

# _it_write_cpu_features FILE: a drop-in with the CRI-O features that fight numa-shim over
# cpusets, each in a form that changes nothing for the harness's pods, so that numa-shim's start
# warnings can be checked against the settings CRI-O reports (tests/realruntime): a workload
# activated by an annotation no pod carries, shared_cpuset (used only for annotated containers
# of a runtime handler that allows cpu-shared.crio.io), and such a handler, which no pod
# selects. Left out: infra_ctr_cpuset, which would pin every infra container and conmon, and
# cpu-load-balancing.crio.io, which once allowed anywhere makes CRI-O turn load balancing off in
# the cpuset cgroup of every container that stops (cgroup v1).
_it_write_cpu_features() {
    cat >"$1" <<EOF
[crio.runtime]
shared_cpuset = "$(($(nproc) - 1))"

[crio.runtime.workloads.numa-shim-it]
activation_annotation = "numa-shim-it.io/partitioned"
annotation_prefix = "numa-shim-it.io"
[crio.runtime.workloads.numa-shim-it.resources]
cpushares = 2
cpuset = "0"

[crio.runtime.runtimes.numa-shim-it-tuned]
runtime_path = "$IT_RUN/bin/runc"
runtime_type = "oci"
runtime_root = "$IT_RUN/runc"
monitor_path = "$(command -v conmon)"
monitor_cgroup = "pod"
allowed_annotations = ["cpu-shared.crio.io", "cpu-quota.crio.io", "cpu-c-states.crio.io"]
EOF
}

# CRI-O and skopeo run with the environment they need here: private storage and registries
# configuration instead of /etc/containers. env execs the program, so a backgrounded command's
# $! is the program's own PID.
_IT_CRIO_ENV=(env "CONTAINERS_STORAGE_CONF=$IT_RUN/storage.conf"
    "CONTAINERS_REGISTRIES_CONF=$IT_RUN/registries.conf" "TMPDIR=$IT_RUN/tmp")
# skopeo keeps a blob info cache in /var/lib/containers/cache and has no option to move it: it
# runs in a mount namespace of its own with an empty tmpfs over /var/lib (it reads nothing there).
# CRI-O itself runs in the host's mount namespace, as on a node: mount propagation from host paths
# into containers (critest's rshared/rslave specs) needs it there, and a restarted CRI-O must see
# its pods' namespace mounts; its container mounts are under IT_RUN and the teardown unmounts
# them. What it still writes outside IT_RUN is the CNI result cache its CNI library keeps in
# /var/lib/cni (no option to move it; containerd's CNI library does the same).
_IT_SKOPEO=("${_IT_CRIO_ENV[@]}" unshare --mount --propagation private
    sh -c 'mount -t tmpfs -o size=16m,mode=755 numa-shim-it /var/lib && exec skopeo "$@"' skopeo)

# _it_crio_import_images: copies the test images into CRI-O's storage with skopeo, before CRI-O
# starts.
_it_crio_import_images() {
    local dir f name
    command -v skopeo >/dev/null || it_die "no skopeo (integration/install-deps.sh)"
    dir=$(it_build_images)
    for f in pause busybox httpd; do
        case $f in
        pause) name=$IT_PAUSE_IMAGE ;;
        busybox) name=$IT_BUSYBOX_IMAGE ;;
        httpd) name=$IT_WEB_IMAGE ;;
        esac
        "${_IT_SKOPEO[@]}" --policy "$IT_RUN/policy.json" --registries-conf "$IT_RUN/registries.conf" \
            --tmpdir "$IT_RUN/tmp" copy --quiet "oci-archive:$dir/$f.tar" \
            "containers-storage:[overlay@$IT_RUN/root+$IT_RUN/runroot]$name" >/dev/null ||
            it_die "skopeo could not copy $f.tar into CRI-O's storage"
    done
}

# it_up: imports the test images, starts the private CRI-O, waits until its CRI answers.
it_up() {
    [[ -x $IT_CRIO_BIN ]] || it_die "no $IT_CRIO_BIN (integration/install-deps.sh with IT_RUNTIME=crio)"
    [[ -x $IT_PINNS_BIN ]] || it_die "no $IT_PINNS_BIN (integration/install-deps.sh with IT_RUNTIME=crio)"
    command -v conmon >/dev/null || it_die "no conmon (integration/install-deps.sh)"
    [[ -x $IT_BIN/crictl ]] || it_die "no $IT_BIN/crictl (integration/install-deps.sh)"
    if [[ -d $IT_RUN ]]; then
        it_log "leftover $IT_RUN from an earlier run: tearing it down first"
        it_teardown
    fi
    _it_write_config
    _it_crio_import_images
    local argv=("${_IT_CRIO_ENV[@]}" "$IT_CRIO_BIN" --config "$IT_RUN/crio.conf" --config-dir "$IT_RUN/crio.conf.d")
    # The whole command, for tests that restart CRI-O (its own command line lacks the environment).
    printf '%s\0' "${argv[@]}" >"$IT_RUN/runtime.argv"
    "${argv[@]}" >"$IT_LOGS/crio.log" 2>&1 &
    ln -sf "$IT_LOGS/crio.log" "$IT_RUN/runtime.log"
    echo $! >"$IT_RUN/pids/crio"
    it_log "CRI-O $IT_CRIO_VERSION pid $! on $IT_SOCK (log $IT_LOGS/crio.log)"
    it_wait_socket "$IT_SOCK" 60 || it_die "CRI-O did not answer on $IT_SOCK; see $IT_LOGS/crio.log"
    _it_wait_network || it_log "WARNING: CRI-O does not report NetworkReady"
    export NUMA_SHIM_IT_CONTAINERD=$IT_SOCK
}

# _it_runtime_leftovers: conmon processes of this CRI-O (their command lines name IT_RUN).
_it_runtime_leftovers() {
    local pid
    for pid in $(pgrep -f "conmon .*$IT_RUN/"); do
        _it_kill "$pid"
    done
}

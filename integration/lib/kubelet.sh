# shellcheck shell=bash
# Real kubelets (k8s.io/kubernetes built from the Go module proxy by build-k8s.sh) for the
# real-kubelet tests, the demo and the other harnesses (CRI-O behind the kubelet, a control plane
# with the kubelet in API-server mode). Source after common.sh and the runtime's library
# (lib/runtime.sh or lib/containerd.sh): it joins the harness (lib/harness.sh: IT_RUN, pid files,
# IT_LOGS, teardown) instead of copying it.
#
# Each kubelet has a NAME; everything it owns lives under IT_RUN/kubelet-NAME:
#   config.yaml   the main KubeletConfiguration (the caller's --config, e.g. resource managers)
#   config.d/     drop-ins, merged over it by the kubelet's --config-dir in name order:
#                 00-harness.conf (runtime endpoint, loopback ports, cgroups, paths; written
#                 here), then the caller's --drop-in files as 50-<n>-<name>.conf
#   root/ certs/ logs/ manifests/   --root-dir, --cert-dir, podLogsDir, staticPodPath
# Its cgroupRoot is /IT_CG/kubelet-NAME (never the host's /kubepods), its ports are free loopback
# ports picked once and kept across restarts, its log is IT_LOGS/kubelet-NAME.log.
#
# What the kubelet changes outside IT_RUN, and how it is put back (it_kubelet_clean, and
# it_teardown through IT_TEARDOWN_FIRST):
#   - kernel tunables (setupKernelTunables: vm.overcommit_memory, kernel.panic, ...): saved
#     before the first kubelet of any harness starts, restored when the last one is cleaned
#     (shared record under IT_HOST_DIR, one user file per IT_RUN);
#   - the device manager's directory, /var/lib/kubelet/device-plugins (its registration socket
#     and its checkpoint of which pod holds which device: a path compiled into the kubelet, not
#     under --root-dir): what was there moved aside before the first kubelet starts and put back
#     after the last; cleaned whenever a kubelet is, so the next one never reads an earlier
#     kubelet's device assignments (a static pod's UID repeats with its manifest);
#   - /var/log/containers (symlinks to its pod logs): its links removed, the directory too if
#     the harness made it and it is empty.
# makeIPTablesUtilChains: false keeps it off iptables; no kubeconfig keeps it off the network.

# The versions served (and tested by integration/kubelet-versions.sh), and those CI tests.
# shellcheck disable=SC2034 # used by the scripts that source this
IT_KUBELET_VERSIONS=(v1.34.4 v1.35.4 v1.36.3 v1.37.2)
# shellcheck disable=SC2034
IT_KUBELET_CI_VERSIONS=(v1.37.2 v1.34.4)
IT_KUBELET_VERSION=${IT_KUBELET_VERSION:-v1.37.2}
IT_HOST_DIR=${IT_HOST_DIR:-/run/numa-shim-it-host}
# The kubelet's device manager directory (pluginapi.DevicePluginPath).
IT_DEVICE_PLUGINS_DIR=/var/lib/kubelet/device-plugins
# The tunables the kubelet sets at start (pkg/kubelet/cm/container_manager_linux.go).
_IT_KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
export IT_KUBELET_VERSION
IT_TEARDOWN_FIRST+=(it_kubelet_teardown)

# it_kubelet_tests VERSION [FILTER...]: the real-kubelet tests (tests/realkubelet) with kubelet
# VERSION in front of the harness's runtime (IT_RUNTIME's: containerd or CRI-O), all of them or
# those FILTER selects (cargo test's name filters, e.g. `tutorial::`). The newest served
# version gets the full five minutes of periodic calls, older ones one minute
# (IT_KUBELET_SOAK_SECS overrides).
it_kubelet_tests() {
    local soak=60 version=$1
    shift
    [[ $version == "${IT_KUBELET_VERSIONS[-1]}" ]] && soak=300
    it_podresources_go >/dev/null
    "$IT_REPO/integration/device-plugin/build.sh" # the devices test's sample device plugin
    _it_runtime_pods_clear
    NUMA_SHIM_IT_KUBELET_VERSION=$version NUMA_SHIM_IT_SOAK_SECS=${IT_KUBELET_SOAK_SECS:-$soak} \
        cargo test --test realkubelet -- --ignored --test-threads=1 "$@"
}

# _it_runtime_pods_clear: removes the pods an earlier stage left on the shared runtime (said on
# stderr). The kubelet's numa-shim adopts every running pod it finds, so a leftover would hold
# CPUs the tests expect free.
_it_runtime_pods_clear() {
    local ids
    mapfile -t ids < <(it_crictl "$NUMA_SHIM_IT_CONTAINERD" pods -q)
    ((${#ids[@]})) || return 0
    it_log "removing the pods earlier stages left on the runtime: ${ids[*]}"
    it_crictl "$NUMA_SHIM_IT_CONTAINERD" rmp -a -f >/dev/null || it_die "cannot remove the pods left on the runtime"
}

# it_kubelet_bin VERSION: the cached kubelet binary of VERSION.
it_kubelet_bin() { printf '%s/bin/kubelet-%s\n' "$IT_CACHE" "$1"; }

# it_kubelet_build VERSION...: builds the kubelets not in the cache yet (about 12 CPU-minutes
# each, from the Go module proxy).
it_kubelet_build() {
    local v
    for v in "$@"; do
        [[ -x $(it_kubelet_bin "$v") ]] && continue
        it_log "building kubelet $v (k8s.io/kubernetes from the Go module proxy)"
        "$IT_REPO/integration/build-k8s.sh" "$v" "$IT_CACHE/bin" kubelet
    done
}

# it_podresources_go: builds (when its sources changed) and prints the path of the Go PodResources
# client (integration/podresources-go: k8s.io/kubelet's podresources v1 client, as topology
# exporters use it).
it_podresources_go() {
    local src=$IT_REPO/integration/podresources-go out=$IT_BIN/podresources-go
    if [[ ! -x $out || $src/main.go -nt $out || $src/go.mod -nt $out ]]; then
        mkdir -p "$IT_BIN"
        (cd "$src" && go build -o "$out.tmp" . && mv "$out.tmp" "$out") >&2
    fi
    printf '%s\n' "$out"
}

it_kubelet_dir() { printf '%s/kubelet-%s\n' "$IT_RUN" "$1"; }

# _it_cgroup_mounts: the cgroup hierarchies the kubelet uses: the v1 ones (a hybrid machine's
# cgroup2 mount is not the kubelet's), else the unified one.
_it_cgroup_mounts() {
    if findmnt -rn -t cgroup -o TARGET | grep -q '^/sys/fs/cgroup'; then
        findmnt -rn -t cgroup -o TARGET | grep '^/sys/fs/cgroup'
    else
        findmnt -rn -t cgroup2 -o TARGET | grep '^/sys/fs/cgroup'
    fi
}

# _it_make_cgroup PATH: creates PATH (e.g. /nsit-x/kubelet-a) in every hierarchy; cpuset
# folders get their parent's cpus and mems (cgroup v1 starts them empty). On cgroup v2 (the
# multi-NUMA guests of integration/numa-vm) every folder on the way enables for its children
# the controllers it has: the kubelet's cgroupfs manager needs cpuset, cpu, memory and pids in
# its cgroupRoot.
_it_make_cgroup() {
    local path=$1 h d rel part c ctrls
    while read -r h; do
        mkdir -p "$h$path"
        if [[ -f $h/cgroup.controllers ]]; then
            d=$h rel=${path#/}
            for part in ${rel//\// }; do
                d=$d/$part
                read -ra ctrls <"$d/cgroup.controllers"
                for c in "${ctrls[@]}"; do
                    grep -qw "$c" "$d/cgroup.subtree_control" || echo "+$c" >"$d/cgroup.subtree_control"
                done
            done
            continue
        fi
        [[ -f $h/cpuset.cpus && ! -f $h/cgroup.controllers ]] || continue
        d=$h rel=${path#/}
        for part in ${rel//\// }; do
            d=$d/$part
            [[ -s $d/cpuset.cpus ]] || cat "${d%/*}/cpuset.cpus" >"$d/cpuset.cpus"
            [[ -s $d/cpuset.mems ]] || cat "${d%/*}/cpuset.mems" >"$d/cpuset.mems"
        done
    done < <(_it_cgroup_mounts)
}

# _it_remove_cgroup PATH: kills what runs under PATH in every hierarchy and removes it.
_it_remove_cgroup() {
    local path=$1 h d pid
    while read -r h; do
        [[ -d $h$path ]] || continue
        while read -r d; do
            while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$d/cgroup.procs"
        done < <(find "$h$path" -depth -type d)
        sleep 0.1
        find "$h$path" -depth -type d -exec rmdir {} \; 2>/dev/null
    done < <(_it_cgroup_mounts)
}

# _it_host_hold: records what the kubelet changes on the host (first harness only: the kernel
# tunables; the device manager's directory, its files moved aside) and this harness as one of
# their users.
_it_host_hold() {
    mkdir -p "$IT_HOST_DIR/users"
    (
        flock 9
        if [[ ! -f $IT_HOST_DIR/saved ]]; then
            local k d
            for k in "${_IT_KUBELET_SYSCTLS[@]}"; do
                printf '%s=%s\n' "$k" "$(sysctl -n "$k")"
            done >"$IT_HOST_DIR/saved.tmp"
            mkdir -p "$IT_HOST_DIR/device-plugins"
            for d in /var/lib/kubelet "$IT_DEVICE_PLUGINS_DIR"; do
                [[ -d $d ]] || echo "$d"
            done >"$IT_HOST_DIR/made-dirs"
            mkdir -p "$IT_DEVICE_PLUGINS_DIR"
            _it_move_entries "$IT_DEVICE_PLUGINS_DIR" "$IT_HOST_DIR/device-plugins"
            mv "$IT_HOST_DIR/saved.tmp" "$IT_HOST_DIR/saved"
        fi
        : >"$IT_HOST_DIR/users/$IT_CG"
    ) 9>"$IT_HOST_DIR/lock"
}

# _it_move_entries FROM TO: moves what is in FROM into TO. An entry gone between listing and
# moving is skipped: a multi-NUMA guest sees the host's directory through its read-only 9p lower
# layer, whose listing can name a file the host has just removed.
_it_move_entries() {
    local f
    for f in "$1"/* "$1"/.[!.]*; do
        [[ -e $f || -L $f ]] || continue
        mv -t "$2" "$f" 2>/dev/null || [[ ! -e $f ]] || it_log "WARNING: cannot move $f to $2"
    done
    return 0
}

# _it_device_plugins_clear: removes what the harness's kubelets left in the device manager's
# directory (only while the host record holds it: never a foreign kubelet's files).
_it_device_plugins_clear() {
    [[ -f $IT_HOST_DIR/saved ]] || return 0
    rm -rf "${IT_DEVICE_PLUGINS_DIR:?}"/* "$IT_DEVICE_PLUGINS_DIR"/.[!.]* 2>/dev/null
    return 0
}

# _it_host_release: this harness no longer runs a kubelet; the last user puts the saved
# tunables and the device manager's files back and removes the directories the record made.
_it_host_release() {
    [[ -f $IT_HOST_DIR/users/$IT_CG ]] || return 0
    (
        flock 9
        rm -f "$IT_HOST_DIR/users/$IT_CG"
        if [[ -z $(ls -A "$IT_HOST_DIR/users") && -f $IT_HOST_DIR/saved ]]; then
            local kv d
            while read -r kv; do
                [[ $(sysctl -n "${kv%%=*}") == "${kv#*=}" ]] || sysctl -qw "$kv"
            done <"$IT_HOST_DIR/saved"
            _it_device_plugins_clear
            _it_move_entries "$IT_HOST_DIR/device-plugins" "$IT_DEVICE_PLUGINS_DIR"
            while read -r d; do
                rmdir "$d" 2>/dev/null
            done < <(sort -r "$IT_HOST_DIR/made-dirs")
            rm -rf "$IT_HOST_DIR"
        fi
    ) 9>"$IT_HOST_DIR/lock"
}

# it_kubelet_start NAME [OPTIONS]: writes the kubelet's files (it_kubelet_config) and starts it;
# waits for /healthz (IT_KUBELET_START_SECS, default 60: the multi-NUMA guests need minutes).
#   --version V        kubelet version [IT_KUBELET_VERSION]
#   --runtime EP       CRI endpoint the kubelet uses (numa-shim's socket) [unix://IT_SOCK]
#   --direct EP        the runtime itself, where clean-up removes this kubelet's pods [unix://IT_SOCK]
#   --config FILE      the main KubeletConfiguration [apiVersion and kind only]
#   --drop-in FILE     an override merged after the harness's settings (repeatable, in order)
#   --manifests DIR    staticPodPath [IT_RUN/kubelet-NAME/manifests]
#   --kubeconfig FILE  API-server mode; standalone without it
#   --apiserver        API-server mode on the loopback control plane of lib/apiserver.sh (under
#                      IT_RUN/cp): its node kubeconfig (client certificate system:node:IT_NODE_NAME,
#                      under the Node authorizer and NodeRestriction), --node-name IT_NODE_NAME,
#                      --node-ip 127.0.0.1 (the Node's address stays on loopback)
#   --node-name N      --hostname-override
#   --arg ARG          one more kubelet flag (repeatable)
# Starting a NAME again (a restart) keeps its root dir, ports and cgroups.
it_kubelet_start() {
    _it_kubelet "$@" --run yes
}

# it_kubelet_config NAME [OPTIONS]: only writes the kubelet's files (as it_kubelet_start would),
# so that what must exist before the kubelet (numa-shim, reading its configuration) can start.
it_kubelet_config() {
    _it_kubelet "$@" --run no
}

_it_kubelet() {
    local name=$1 version=$IT_KUBELET_VERSION runtime="unix://$IT_SOCK" direct="unix://$IT_SOCK"
    local config="" manifests="" kubeconfig="" node="" dropins=() args=() kdir bin i run=yes
    shift
    while (($#)); do
        case $1 in
        --version) version=$2 ;;
        --runtime) runtime=$2 ;;
        --direct) direct=$2 ;;
        --config) config=$2 ;;
        --drop-in) dropins+=("$2") ;;
        --manifests) manifests=$2 ;;
        --kubeconfig) kubeconfig=$2 ;;
        --apiserver)
            kubeconfig=$IT_RUN/cp/kubelet.kubeconfig
            node=${IT_NODE_NAME:-$(tr '[:upper:]' '[:lower:]' </proc/sys/kernel/hostname)}
            args+=(--node-ip=127.0.0.1)
            [[ -f $kubeconfig ]] || it_die "--apiserver: no $kubeconfig (integration/controlplane.sh up)"
            shift
            continue
            ;;
        --node-name) node=$2 ;;
        --arg) args+=("$2") ;;
        --run) run=$2 ;;
        *) it_die "it_kubelet_start: unknown option $1" ;;
        esac
        shift 2
    done
    kdir=$(it_kubelet_dir "$name")
    bin=$(it_kubelet_bin "$version")
    [[ -x $bin ]] || it_die "no kubelet $version at $bin (integration/install-deps.sh builds it)"
    mkdir -p "$kdir"/{root,certs,logs,manifests,config.d} "$IT_RUN/pids" "$IT_LOGS"
    manifests=${manifests:-$kdir/manifests}
    [[ -f $kdir/ports ]] || printf '%s %s %s\n' "$(it_free_port)" "$(it_free_port)" "$(it_free_port)" >"$kdir/ports"
    local port ro hz
    read -r port ro hz <"$kdir/ports"
    if [[ -n $config ]]; then
        cp "$config" "$kdir/config.yaml"
    else
        printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n' >"$kdir/config.yaml"
    fi
    rm -f "$kdir"/config.d/*.conf
    cat >"$kdir/config.d/00-harness.conf" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: $runtime
address: 127.0.0.1
port: $port
readOnlyPort: $ro
healthzBindAddress: 127.0.0.1
healthzPort: $hz
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /$IT_CG/kubelet-$name
failCgroupV1: false
failSwapOn: false
staticPodPath: $manifests
podLogsDir: $kdir/logs
fileCheckFrequency: 1s
makeIPTablesUtilChains: false
# The disk is shared: no image GC of the local test images, no eviction for disk pressure
# (the kubelet's memory.available default stays; it is part of the memory reservation).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {nodefs.available: null, nodefs.inodesFree: null, imagefs.available: null, imagefs.inodesFree: null}
EOF
    i=0
    local f
    for f in "${dropins[@]}"; do
        i=$((i + 1))
        cp "$f" "$kdir/config.d/50-$i-$(basename "${f%.*}").conf"
    done
    _it_make_cgroup "/$IT_CG/kubelet-$name"
    [[ -e /var/log/containers || -e $IT_RUN/made-var-log-containers ]] ||
        { mkdir -p /var/log/containers && : >"$IT_RUN/made-var-log-containers"; }
    _it_host_hold
    local cmd=("$bin" --config "$kdir/config.yaml" --config-dir "$kdir/config.d"
        --root-dir "$kdir/root" --cert-dir "$kdir/certs" --v=2)
    [[ -n $kubeconfig ]] && cmd+=(--kubeconfig "$kubeconfig")
    [[ -n $node ]] && cmd+=(--hostname-override "$node")
    cmd+=("${args[@]}")
    printf '%s\n' "${direct#unix://}" >"$kdir/direct"
    printf '%s\n' "$version" >"$kdir/version"
    local pid="" from=0
    if [[ $run == yes ]]; then
        it_kubelet_stop "$name"
        printf '\n=== %(%F %T)T start: %s\n' -1 "${cmd[*]}" >>"$IT_LOGS/kubelet-$name.log"
        from=$(stat -c %s "$IT_LOGS/kubelet-$name.log")
        (cd "$kdir" && exec "${cmd[@]}") >>"$IT_LOGS/kubelet-$name.log" 2>&1 &
        pid=$!
        disown "$pid" 2>/dev/null || true
        echo "$pid" >"$IT_RUN/pids/kubelet-$name"
    fi
    cat >"$kdir/env" <<EOF
dir=$kdir
version=$version
pid=$pid
log=$IT_LOGS/kubelet-$name.log
config=$kdir/config.yaml
config_dir=$kdir/config.d
root=$kdir/root
manifests=$manifests
pods_api=$kdir/root/pods-api/pods-api.sock
pod_resources=$kdir/root/pod-resources/kubelet.sock
read_only=127.0.0.1:$ro
healthz=127.0.0.1:$hz
port=$port
cgroup_root=/$IT_CG/kubelet-$name
EOF
    [[ $run == yes ]] || return 0
    # Started means healthy and its plugin manager running: the plugin watcher adds its watch on
    # plugins_registry, then lists it, so a socket made between the two is registered twice, and
    # the kubelet drops and re-registers that plugin a second later (its devices unhealthy
    # meanwhile: a pod admitted then is refused with UnexpectedAdmissionError). Once the line
    # is logged, a plugin socket made is seen once.
    local polls=$((${IT_KUBELET_START_SECS:-60} * 5))
    for ((i = 0; i < polls; i++)); do
        [[ $(curl -fsS "http://127.0.0.1:$hz/healthz" 2>/dev/null) == ok ]] &&
            grep -q "Starting Kubelet Plugin Manager" < <(tail -c +$((from + 1)) "$IT_LOGS/kubelet-$name.log") &&
            break
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -20 "$IT_LOGS/kubelet-$name.log" >&2
            it_die "kubelet $name exited (log $IT_LOGS/kubelet-$name.log)"
        fi
        sleep 0.2
    done
    ((i < polls)) || it_die "kubelet $name not healthy after ${IT_KUBELET_START_SECS:-60}s (log $IT_LOGS/kubelet-$name.log)"
    it_log "kubelet $version '$name' pid $pid on $runtime (log $IT_LOGS/kubelet-$name.log)"
}

# it_kubelet_env NAME: the KEY=VALUE facts of a started kubelet (dir, pid, log, ports, sockets).
it_kubelet_env() { cat "$(it_kubelet_dir "$1")/env"; }

# it_kubelet_fact NAME KEY: one of them.
it_kubelet_fact() { sed -n "s/^$2=//p" "$(it_kubelet_dir "$1")/env"; }

# it_kubelet_stop NAME [--kill]: stops the kubelet (SIGTERM, or SIGKILL), waits for it to exit.
# Its pods keep running, as when a real kubelet restarts.
it_kubelet_stop() {
    local pidf=$IT_RUN/pids/kubelet-$1 pid i sig=TERM
    [[ ${2:-} == --kill ]] && sig=KILL
    [[ -f $pidf ]] || return 0
    pid=$(cat "$pidf")
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$(it_kubelet_dir "$1")/"; then
        kill "-$sig" "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            [[ -e /proc/$pid ]] || break
            if ((i == 50)); then kill -KILL "$pid" 2>/dev/null || true; fi
            sleep 0.1
        done
    fi
    rm -f "$pidf"
}

# it_kubelet_clean NAME: stops the kubelet and removes everything it made: its pods (straight at
# the runtime), its cgroups, mounts, log links and directory. Safe after a failed start.
it_kubelet_clean() {
    local name=$1 opts=$-
    set +e
    _it_kubelet_clean "$name"
    [[ $opts == *e* ]] && set -e
    return 0
}

_it_kubelet_clean() {
    local name=$1 kdir direct uid id m
    kdir=$(it_kubelet_dir "$name")
    it_kubelet_stop "$name" --kill
    [[ -d $kdir ]] || return 0
    direct=$(cat "$kdir/direct" 2>/dev/null)
    if [[ -S $direct && -x $IT_BIN/crictl ]]; then
        for uid in "$kdir"/root/pods/*/; do
            [[ -d $uid ]] || continue
            uid=${uid%/}
            uid=${uid##*/}
            for id in $(it_crictl "$direct" pods -q --label "io.kubernetes.pod.uid=$uid" 2>/dev/null); do
                it_crictl "$direct" stopp "$id" >/dev/null 2>&1
                it_crictl "$direct" rmp -f "$id" >/dev/null 2>&1
            done
        done
    fi
    _it_remove_cgroup "/$IT_CG/kubelet-$name"
    _it_device_plugins_clear
    find /var/log/containers -maxdepth 1 -type l -lname "$kdir/logs/*" -delete 2>/dev/null
    while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done < <(findmnt -rn -o TARGET | grep -F "$kdir/" | sort -r)
    rm -rf "$kdir"
    compgen -G "$IT_RUN/kubelet-*" >/dev/null || _it_kubelet_host_restore
}

# _it_kubelet_host_restore: no kubelet left in this harness: host changes put back.
_it_kubelet_host_restore() {
    _it_host_release
    if [[ -f $IT_RUN/made-var-log-containers ]]; then
        rmdir /var/log/containers 2>/dev/null
        rm -f "$IT_RUN/made-var-log-containers"
    fi
}

# it_kubelet_teardown: cleans every kubelet of this harness (it_teardown runs it first).
it_kubelet_teardown() {
    local d opts=$-
    set +e
    for d in "$IT_RUN"/kubelet-*/; do
        [[ -d $d ]] || continue
        d=${d%/}
        it_kubelet_clean "${d##*/kubelet-}"
    done
    _it_kubelet_host_restore
    [[ $opts == *e* ]] && set -e
    return 0
}

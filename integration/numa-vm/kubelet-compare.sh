#!/usr/bin/env bash
# The kubelet's own managers as the judge on a multi-NUMA kernel: runs INSIDE a guest of
# integration/numa-vm/run.sh
#
#   integration/numa-vm/run.sh --timeout 3600 4n -- integration/numa-vm/kubelet-compare.sh
#
# For every case of kubelet_compare.py (the tutorial's pods scaled to the guest under pod scope
# single-numa-node with a refused pod and pod-level pods with sidecars, restricted, best-effort
# with a pod spanning two nodes, container scope, and the sample device plugin's example.com/gpu
# devices with NUMA nodes from its config), on the guest's containerd 1.6:
#   1. kubelet v1.37.2 standalone, its CPU, Memory and Topology Managers on with the case's
#      settings (static, Static, the case's policy and scope, PodLevelResourceManagers), the
#      case's static pods added one after the other (each running or refused before the next),
#      some taken away again (read just before, gone before the next step);
#      every container's cpuset.cpus, cpuset.mems, CFS quota, Cpus_allowed_list and
#      Mems_allowed_list read from the kernel, every pod's admission (refusal reason and
#      message), the kubelet's PodResources List and Get; then everything torn down;
#   2. the same kubelet settings behind numa-shim (this worktree's build, reading the kubelet's
#      file; the kubelet's managers off by the packaged drop-in's settings), the same pods, the
#      same readings, numa-shim's PodResources and refusals;
#   3. kubelet_compare.py compare: every item equal, or the case's difference is one
#      docs/fidelity.md documents.
# Then the comparison is shown failing on a tampered input (a wrong cpuset.mems on the
# kubelet's side). Each run's readings go to NUMAVM_OUT/kubelet-compare/CASE-MODE.json.
# NUMAVM_KUBELET_CASES (space-separated) picks cases; IT_KUBELET_START_SECS (default 600) and
# NUMAVM_KUBELET_SETTLE_SECS (default 30: the kubelet's 10 s CPU reconcile, slowed by TCG) are
# the budgets. Exit 1 when a case differs without a documented reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IT_RUN=${IT_RUN:-/run/nsit-numavm}
# shellcheck source=integration/lib/numavm.sh
source "$here/../lib/numavm.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/../lib/kubelet.sh"
export IT_KUBELET_START_SECS=${IT_KUBELET_START_SECS:-600}
settle_secs=${NUMAVM_KUBELET_SETTLE_SECS:-30}
version=${IT_KUBELET_VERSION:-v1.37.2}
out=${NUMAVM_OUT:-$IT_WORK}/kubelet-compare
mkdir -p "$out"
cmp() { python3 "$here/kubelet_compare.py" "$@"; }

bin=$(it_numa_shim_bin)
[[ -x $bin ]] || it_die "no numa-shim at $bin (cargo build on the host first)"
[[ -x $(it_kubelet_bin "$version") ]] || it_die "no kubelet $version at $(it_kubelet_bin "$version") (integration/install-deps.sh)"
for b in podresources-go device-plugin crictl; do
    [[ -x $IT_BIN/$b ]] || it_die "no $IT_BIN/$b (integration/install-deps.sh on the host builds it)"
done
nodes=$(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' | wc -l)
numavm_step "Guest: $(nproc --all) CPUs, $nodes NUMA nodes ($(numavm_nodes)); kubelet $version"

finish() {
    local rc=$?
    set +e
    mkdir -p "$out/logs"
    cp "$IT_LOGS"/*.log "$out/logs/" 2>/dev/null
    (exit "$rc")
    it_teardown
}
trap finish EXIT
trap "exit 143" TERM INT
it_up
crictl_direct=$(numavm_crictl "$IT_SOCK" 120s)

# wait_devices SOCKET N: waits until the PodResources server on SOCKET lists N allocatable
# example.com/gpu devices (the kubelet admits a device pod only against devices it has).
wait_devices() {
    local i n=0
    for ((i = 0; i < 300; i++)); do
        n=$("$IT_BIN/podresources-go" -socket "$1" allocatable 2>/dev/null | python3 -c '
import json, sys
a = json.load(sys.stdin)
print(sum(len(d.get("device_ids") or []) for d in a.get("devices") or [] if d.get("resource_name") == "example.com/gpu"))' 2>/dev/null) || n=0
        ((n == $2)) && return 0
        sleep 1
    done
    it_die "the kubelet lists $n example.com/gpu devices, not $2 (plugin log $IT_LOGS/$3.log)"
}

# run_case CASE MODE: runs the case's pods with the kubelet's managers (MODE kubelet) or behind
# numa-shim (MODE numa-shim), writes the readings to $out/CASE-MODE.json, tears down.
run_case() {
    local case=$1 mode=$2 cdir=$IT_RUN/cases/$1 d name metrics="" pr kroot manifests pod t0=$SECONDS
    d=$IT_RUN/runs/$case-$mode
    name=${mode/numa-shim/shim}-$case
    mkdir -p "$d"
    if [[ $mode == numa-shim ]]; then
        local sock=$d/cri.sock port
        port=$(it_free_port)
        metrics=http://127.0.0.1:$port
        printf '%s\n' 'apiVersion: kubelet.config.k8s.io/v1beta1' 'kind: KubeletConfiguration' \
            "containerRuntimeEndpoint: unix://$sock" 'cpuManagerPolicy: none' 'memoryManagerPolicy: None' \
            'topologyManagerPolicy: none' >"$d/10-numa-shim.conf"
        local kargs=(--version "$version" --config "$cdir/kubelet.yaml" --drop-in "$d/10-numa-shim.conf" --runtime "unix://$sock")
        it_kubelet_config "$name" "${kargs[@]}"
        # A case with a device plugin: the plugin registers with numa-shim's device plugin front,
        # which registers the resource with the kubelet through its plugin watcher and chooses
        # the devices the kubelet gives (docs/devices.md, "The device plugin front").
        local front=()
        if [[ -f $cdir/plugin.json ]]; then
            front=(--device-plugin-front "$d/device-plugins"
                --device-plugin-registry "$(it_kubelet_fact "$name" root)/plugins_registry")
        fi
        "$bin" serve --listen "unix://$sock" --runtime "unix://$IT_SOCK" --state-dir "$d/state" "${front[@]}" \
            --kubelet-config "$(it_kubelet_fact "$name" config)" --kubelet-config-dir "$(it_kubelet_fact "$name" config_dir)" \
            --pods-api-socket "$(it_kubelet_fact "$name" pods_api)" \
            --kubelet-pod-resources-socket "$(it_kubelet_fact "$name" pod_resources)" \
            --metrics-address "127.0.0.1:$port" >"$IT_LOGS/numa-shim-$case.log" 2>&1 &
        echo $! >"$IT_RUN/pids/numa-shim-$case"
        it_wait_socket "$sock" 120 || it_die "numa-shim did not answer (log $IT_LOGS/numa-shim-$case.log)"
        it_kubelet_start "$name" "${kargs[@]}"
        pr=$d/state/pod-resources/kubelet.sock
    else
        it_kubelet_start "$name" --version "$version" --config "$cdir/kubelet.yaml" --runtime "unix://$IT_SOCK"
        pr=$(it_kubelet_fact "$name" pod_resources)
    fi
    kroot=$(it_kubelet_fact "$name" root)
    manifests=$(it_kubelet_fact "$name" manifests)
    echo "kubelet ($mode) healthy after $((SECONDS - t0))s"
    if [[ -f $cdir/plugin.json ]]; then
        local registration=(-plugins-registry "$kroot/plugins_registry")
        [[ $mode == numa-shim ]] && registration=(-device-plugin-dir "$d/device-plugins")
        "$IT_BIN/device-plugin" -config "$cdir/plugin.json" "${registration[@]}" \
            >"$IT_LOGS/device-plugin-$name.log" 2>&1 &
        echo $! >"$IT_RUN/pids/device-plugin-$name"
        wait_devices "$(it_kubelet_fact "$name" pod_resources)" \
            "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["devices"]))' "$cdir/plugin.json")" \
            "device-plugin-$name"
        echo "device plugin registered: $(tr -d '\n' <"$cdir/plugin.json")"
    fi
    local pods_url removed=$d/removed.json
    rm -f "$removed"
    pods_url="http://$(it_kubelet_fact "$name" read_only)/pods"
    collect() {
        cmp collect --mode "$mode" --pods "$pods_url" --crictl "$crictl_direct" \
            --podresources "$IT_BIN/podresources-go -socket $pr -timeout 60s" ${metrics:+--placement "$metrics"} \
            --merge "$removed" "$@" >/dev/null
    }
    while read -r pod; do
        if [[ $pod == -* ]]; then
            # A remove step: the pod's readings as they are now, then the pod taken away and
            # gone from the kubelet before the next step.
            pod=${pod#-}
            collect --only "$pod" --out "$removed.new" && mv "$removed.new" "$removed"
            rm -f "$manifests/$pod.yaml"
            cmp gone "$pod" --pods "$pods_url" --timeout 600 || echo "FAIL: $pod did not go"
            continue
        fi
        cp "$cdir/pod-$pod.yaml" "$manifests/.$pod.tmp"
        mv "$manifests/.$pod.tmp" "$manifests/$pod.yaml"
        cmp settle "$pod" --pods "$pods_url" ${metrics:+--placement "$metrics"} --timeout 600 ||
            echo "FAIL: $pod did not settle"
    done <"$cdir/steps"
    sleep "$settle_secs"
    collect --out "$out/$case-$mode.json"
    cmp summary "$out/$case-$mode.json"
    if [[ -n $metrics ]]; then "$bin" inspect --endpoint "$metrics" || true; fi
    # Tear down: the plugin, the kubelet and its pods, numa-shim.
    if [[ -f $IT_RUN/pids/device-plugin-$name ]]; then
        kill "$(cat "$IT_RUN/pids/device-plugin-$name")" 2>/dev/null || true
        rm -f "$IT_RUN/pids/device-plugin-$name"
    fi
    it_kubelet_clean "$name"
    if [[ -f $IT_RUN/pids/numa-shim-$case ]]; then
        kill "$(cat "$IT_RUN/pids/numa-shim-$case")" 2>/dev/null || true
        wait "$(cat "$IT_RUN/pids/numa-shim-$case")" 2>/dev/null || true
        rm -f "$IT_RUN/pids/numa-shim-$case"
    fi
    it_crictl "$IT_SOCK" rmp -a -f >/dev/null 2>&1 || true
    echo "$case with $mode: $((SECONDS - t0))s"
}

mapfile -t cases < <(cmp cases)
results=()
differ=0
for case in "${cases[@]}"; do
    cmp prepare "$case" "$IT_RUN/cases/$case" --image "$IT_BUSYBOX_IMAGE"
    numavm_step "$case: $(sed -n 's/^topologyManager\(Policy\|Scope\): //p' "$IT_RUN/cases/$case/kubelet.yaml" | paste -sd' '), pods $(paste -sd' ' "$IT_RUN/cases/$case/steps")"
    for mode in kubelet numa-shim; do
        if [[ $mode == kubelet ]]; then numavm_step "$case through the kubelet's own managers"; else numavm_step "$case through numa-shim"; fi
        run_case "$case" "$mode"
    done
    numavm_step "$case: the kubelet's managers against numa-shim"
    rc=0
    cmp compare "$case" "$out/$case-kubelet.json" "$out/$case-numa-shim.json" | tee "$out/$case-compare.txt" || rc=$?
    results+=("$(tail -1 "$out/$case-compare.txt")")
    ((rc == 0)) || differ=$((differ + 1))
done

numavm_step "The comparison fails on a deliberately wrong value"
probe=
for first in "${cases[@]}"; do
    probe=$(cmp probe "$out/$first-kubelet.json") && break
done
[[ -n $probe ]] || it_die "no running container in any case to tamper with"
if out_text=$(cmp compare "$first" "$out/$first-kubelet.json" "$out/$first-numa-shim.json" --tamper "$probe"); then
    echo "FAIL: the comparison passed with the tampered $probe"
    differ=$((differ + 1))
else
    grep 'tampered\|DIFFERENT' <<<"$out_text"
fi

numavm_step "kubelet comparison on $nodes nodes:"
printf '  %s\n' "${results[@]}"
((differ == 0))

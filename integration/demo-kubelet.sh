#!/usr/bin/env bash
# The tutorial's flow with the real kubelet (integration/demo.sh --kubelet): a private containerd,
# numa-shim in front of it taking the tutorial's resource-manager settings from the kubelet's own
# file, and a standalone kubelet v1.37.2 whose drop-in turns its managers off and points it at
# numa-shim. The tutorial's static pods (integration/kubelet-pods, scaled to this machine) run one
# after another; for each, every container's kernel cpuset, mems, CFS quota and Cpus_allowed_list
# is printed next to numa-shim's decision and the kubelet's view of the pod. Installs what it needs
# (the first run builds the kubelet, ~12 CPU-minutes); tears everything down when it exits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/lib/kubelet.sh"

say() { printf '\n### %s\n' "$*"; }
version=${IT_KUBELET_VERSION:-v1.37.2}

IT_DEPS=demo IT_KUBELET_BUILD=$version "$here/install-deps.sh"
cargo build --quiet --bin numa-shim --manifest-path "$IT_REPO/Cargo.toml"
bin=$(it_numa_shim_bin)
trap it_teardown EXIT
trap "exit 143" TERM INT
say "Starting a private containerd (state under $IT_RUN)"
it_up
dir=$IT_RUN/demo
mkdir -p "$dir"
metrics=127.0.0.1:${NUMA_SHIM_DEMO_METRICS_PORT:-19465}
shim=$IT_RUN/demo-shim.sock

say "The kubelet's main file: the tutorial's settings (kubelet-pod-scope.yaml), with what this 2-CPU machine needs"
cat >"$dir/kubelet.yaml" <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: "static"
memoryManagerPolicy: "Static"
topologyManagerScope: "pod"
topologyManagerPolicy: "single-numa-node"
# The static CPU policy needs a reservation; Static memory needs reservedMemory equal to
# kubeReserved + systemReserved + evictionHard (100Mi by default).
reservedSystemCPUs: "0"
reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]
EOF
cat "$dir/kubelet.yaml"
say "Its drop-in (as packaging/kubelet/kubelet.conf.d/10-numa-shim.conf): numa-shim's socket, its own managers off"
cat >"$dir/10-numa-shim.conf" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$shim
cpuManagerPolicy: none
memoryManagerPolicy: None
topologyManagerPolicy: none
EOF
cat "$dir/10-numa-shim.conf"
it_kubelet_config demo --version "$version" --config "$dir/kubelet.yaml" --drop-in "$dir/10-numa-shim.conf" \
    --runtime "unix://$shim" >/dev/null
k_config=$(it_kubelet_fact demo config)
k_config_dir=$(it_kubelet_fact demo config_dir)
k_pods_api=$(it_kubelet_fact demo pods_api)
k_pod_resources=$(it_kubelet_fact demo pod_resources)
k_manifests=$(it_kubelet_fact demo manifests)
k_read_only=$(it_kubelet_fact demo read_only)

say "numa-shim, before the kubelet, reading the kubelet's file and drop-ins"
echo "\$ numa-shim check-config --kubelet-config $k_config --kubelet-config-dir $k_config_dir"
"$bin" check-config --kubelet-config "$k_config" --kubelet-config-dir "$k_config_dir"
"$bin" serve --listen "unix://$shim" --runtime "unix://$IT_SOCK" --state-dir "$dir/state" \
    --kubelet-config "$k_config" --kubelet-config-dir "$k_config_dir" --metrics-address "$metrics" \
    --pods-api-socket "$k_pods_api" --kubelet-pod-resources-socket "$k_pod_resources" \
    >"$IT_LOGS/demo-shim.log" 2>&1 &
echo $! >"$IT_RUN/pids/demo-shim"
it_wait_socket "$shim" 30 || it_die "numa-shim did not answer (log $IT_LOGS/demo-shim.log)"
echo "numa-shim on unix://$shim -> containerd unix://$IT_SOCK (log $IT_LOGS/demo-shim.log)"

say "The kubelet $version, standalone: static pods from $k_manifests"
it_kubelet_start demo --version "$version" --config "$dir/kubelet.yaml" --drop-in "$dir/10-numa-shim.conf" \
    --runtime "unix://$shim"

# show POD...: waits for the pods, then prints per container the kernel's view, numa-shim's and
# the kubelet's (integration/lib/demo_view.py).
show() {
    python3 "$here/lib/demo_view.py" "$IT_BIN/crictl" "$IT_SOCK" "http://$k_read_only/pods" \
        "http://$metrics/placement" "$@"
}

step() {
    local title=$1
    shift
    say "$title"
    local f
    for f in "$@"; do
        [[ $f == -* ]] || continue
        rm -f "$k_manifests/${f#-}.yaml"
        python3 "$here/lib/demo_view.py" --gone "http://$k_read_only/pods" "http://$metrics/placement" "${f#-}"
    done
    for f in "$@"; do
        [[ $f == -* ]] && continue
        sed "s|IMAGE|$IT_BUSYBOX_IMAGE|" "$here/kubelet-pods/$f.yaml" >"$k_manifests/.$f.tmp"
        mv "$k_manifests/.$f.tmp" "$k_manifests/$f.yaml"
    done
}

step "pod-level-resource-demo beside a BestEffort pod: the workers share the pod's 1-CPU budget" \
    best-effort pod-level-resource-demo
show best-effort pod-level-resource-demo
step "pod-scope-mixed instead: main-app's own memory out of the budget, the CPU shared" \
    -pod-level-resource-demo pod-scope-mixed
show best-effort pod-scope-mixed
step "empty-shared-pool instead: refused as the kubelet refuses it; the kubelet keeps retrying" \
    -pod-scope-mixed empty-shared-pool
show best-effort empty-shared-pool

say "The live NUMA map"
echo "\$ numa-shim inspect --endpoint http://$metrics"
"$bin" inspect --endpoint "http://$metrics"
say "Demo done; tearing down the kubelet, numa-shim and containerd"

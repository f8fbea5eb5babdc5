#!/usr/bin/env bash
# A DRA claim's NUMA node on a multi-NUMA kernel: runs INSIDE a guest of
# integration/numa-vm/run.sh (the 4n shape: CPUs 0-1 | 2-3 | 4-5 | 6-7, 1 GiB per node)
#
#   integration/numa-vm/run.sh --timeout 5400 4n -- integration/numa-vm/dra-guest.sh
#
# The loopback control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
# runs in the guest beside containerd 1.6, numa-shim (this worktree's build) and the real kubelet
# v1.37.2 in API-server mode behind it; the sample DRA driver (integration/dra-driver) publishes
# gpu0 on NUMA node 0 and gpu1 on node 1 (`gpu.example.com/numaNode`) and registers with the
# kubelet. numa-shim reads the kubelet's file: static CPU Manager (CPU 0 reserved), Static
# Memory Manager (100Mi reserved on node 0), `single-numa-node`, container scope; the kubelet's
# own managers are off (the packaged drop-in's settings). Then:
#   1. pod `on-node1` (1 CPU, 64Mi) with a claim from ResourceClaimTemplate `gpu-node1`: the
#      scheduler allocates gpu1, the kubelet has the driver prepare it, numa-shim reads pod ->
#      claim -> slice through the API server and places the container on node 1: its CPU is 2
#      or 3 and its `cpuset.mems` 1 in the kernel (numa_check.py: cgroup files and /proc equal
#      numa-shim's /placement). Without the claim numa-shim would give it CPU 1 on node 0.
#   2. pod `on-node0` with a claim from `gpu-node0`: CPU 1, `cpuset.mems` 0.
#   3. its memory: `on-node1`'s container writes 32 MiB, which `memory.numa_stat` shows on node 1.
# Everything in the guest is about 20 times slower than on the host: the waits are long
# (NUMAVM_DRA_WAIT_SECS, default 1800 per step; numa-shim reads a pod's claims for up to
# NUMAVM_DRA_CLAIMS_TIMEOUT, default 120s, its draClaimsTimeout). Exit 1 on a failed check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IT_RUN=${IT_RUN:-/run/nsit-numavm-dra}
export IT_CP_WAIT_FACTOR=${IT_CP_WAIT_FACTOR:-20} IT_KUBELET_START_SECS=${IT_KUBELET_START_SECS:-1200}
# shellcheck source=integration/lib/numavm.sh
source "$here/../lib/numavm.sh"
# shellcheck source=integration/lib/apiserver.sh
source "$here/../lib/apiserver.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/../lib/kubelet.sh"
wait_secs=${NUMAVM_DRA_WAIT_SECS:-1800}

bin=$(it_numa_shim_bin)
[[ -x $bin ]] || it_die "no numa-shim at $bin (cargo build on the host first)"
for b in dra-driver crictl; do
    [[ -x $IT_BIN/$b ]] || it_die "no $IT_BIN/$b (integration/install-deps.sh on the host builds it)"
done
numavm_step "Guest: $(nproc --all) CPUs ($(numavm_nodes))"

finish() {
    local rc=$?
    set +e
    [[ -n ${NUMAVM_OUT:-} ]] && mkdir -p "$NUMAVM_OUT/dra-guest" && cp "$IT_LOGS"/*.log "$NUMAVM_OUT/dra-guest/" 2>/dev/null
    [[ -f $IT_RUN/pids/dra-driver ]] && kill "$(cat "$IT_RUN/pids/dra-driver")" 2>/dev/null
    it_kubelet_teardown
    [[ -f $IT_RUN/pids/numa-shim-dra ]] && kill "$(cat "$IT_RUN/pids/numa-shim-dra")" 2>/dev/null
    it_cp_down
    (exit "$rc")
    it_teardown
}
trap finish EXIT
trap "exit 143" TERM INT
it_up
numavm_step "containerd up"
it_cp_up
numavm_step "control plane up (etcd, kube-apiserver, controller-manager, scheduler)"

d=$IT_RUN/dra
mkdir -p "$d"
# numa-shim's log straight into the share, readable from the host while the guest runs.
shim_log=${NUMAVM_OUT:-$IT_LOGS}/numa-shim-dra.log
sock=$d/cri.sock
port=$(it_free_port)
metrics=127.0.0.1:$port
name=dra
printf '%s\n' 'apiVersion: kubelet.config.k8s.io/v1beta1' 'kind: KubeletConfiguration' \
    'cpuManagerPolicy: static' 'reservedSystemCPUs: "0"' \
    'memoryManagerPolicy: Static' 'reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]' \
    'topologyManagerPolicy: single-numa-node' 'topologyManagerScope: container' >"$d/kubelet.yaml"
printf '%s\n' 'apiVersion: kubelet.config.k8s.io/v1beta1' 'kind: KubeletConfiguration' \
    "containerRuntimeEndpoint: unix://$sock" 'cpuManagerPolicy: none' 'memoryManagerPolicy: None' \
    'topologyManagerPolicy: none' >"$d/10-numa-shim.conf"
kargs=(--config "$d/kubelet.yaml" --drop-in "$d/10-numa-shim.conf" --runtime "unix://$sock" --apiserver)
it_kubelet_config "$name" "${kargs[@]}"
"$bin" serve --listen "unix://$sock" --runtime "unix://$IT_SOCK" --state-dir "$d/state" \
    --kubelet-config "$(it_kubelet_fact "$name" config)" --kubelet-config-dir "$(it_kubelet_fact "$name" config_dir)" \
    --pod-knowledge apiserver --kubeconfig "$IT_CP/numa-shim.kubeconfig" --node-name "$IT_NODE_NAME" \
    --kubelet-pod-resources-socket "$(it_kubelet_fact "$name" pod_resources)" --dra-claims true \
    --dra-claims-timeout "${NUMAVM_DRA_CLAIMS_TIMEOUT:-120s}" \
    --metrics-address "$metrics" >"$shim_log" 2>&1 &
echo $! >"$IT_RUN/pids/numa-shim-dra"
it_wait_socket "$sock" 300 || it_die "numa-shim did not answer (log $shim_log)"
it_kubelet_start "$name" "${kargs[@]}"
numavm_step "numa-shim and kubelet $(it_kubelet_fact "$name" version) up"
it_kubectl wait --for=condition=Ready "node/$IT_NODE_NAME" --timeout="${wait_secs}s"
numavm_step "node $IT_NODE_NAME Ready"

root=$(it_kubelet_fact "$name" root)
cat >"$d/driver.json" <<'EOF'
{"driver": "gpu.example.com", "devices": [
  {"name": "gpu0", "numa": 0, "pcieRoot": "pci0000:00"},
  {"name": "gpu1", "numa": 1, "pcieRoot": "pci0000:40"}]}
EOF
"$IT_BIN/dra-driver" -kubeconfig "$IT_CP/admin.kubeconfig" -node "$IT_NODE_NAME" -config "$d/driver.json" \
    -registrar-dir "$root/plugins_registry" -plugin-dir "$root/plugins/gpu.example.com" \
    >"$IT_LOGS/dra-driver.log" 2>&1 &
echo $! >"$IT_RUN/pids/dra-driver"
for ((i = 0; i < wait_secs; i += 5)); do
    n=$(it_kubectl get resourceslices --field-selector "spec.driver=gpu.example.com,spec.nodeName=$IT_NODE_NAME" \
        -o 'jsonpath={.items[*].spec.devices[*].name}' 2>/dev/null | wc -w) || n=0
    ((n == 2)) && break
    sleep 5
done
((n == 2)) || it_die "the driver's ResourceSlice has $n devices, not 2 (log $IT_LOGS/dra-driver.log)"
numavm_step "the driver's ResourceSlice: gpu0 (node 0), gpu1 (node 1)"

{
    printf '%s\n' 'apiVersion: resource.k8s.io/v1' 'kind: DeviceClass' 'metadata: {name: gpu.example.com}' \
        'spec:' '  selectors:' '  - cel: {expression: device.driver == "gpu.example.com"}'
    for numa in 0 1; do
        printf '%s\n' '---' 'apiVersion: resource.k8s.io/v1' 'kind: ResourceClaimTemplate' \
            "metadata: {name: gpu-node$numa, namespace: default}" 'spec:' '  spec:' '    devices:' '      requests:' \
            '      - name: gpu' '        exactly:' '          deviceClassName: gpu.example.com' '          selectors:' \
            "          - cel: {expression: 'device.attributes[\"gpu.example.com\"].numaNode == $numa'}"
    done
} | it_kubectl apply -f -
# pod NAME TEMPLATE: a Guaranteed pod of one exclusive CPU and 64Mi whose container (named NAME)
# uses a claim and writes 32 MiB to a file. No nodeName: the scheduler allocates the claim.
pod() {
    printf '%s\n' 'apiVersion: v1' 'kind: Pod' "metadata: {name: $1, namespace: default}" 'spec:' \
        '  hostNetwork: true' '  automountServiceAccountToken: false' \
        '  terminationGracePeriodSeconds: 2' '  resourceClaims:' "  - {name: gpu, resourceClaimTemplateName: $2}" \
        '  containers:' "  - name: $1" "    image: $IT_BUSYBOX_IMAGE" '    imagePullPolicy: Never' \
        "    command: [sh, -c, \"dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>/dev/null; trap 'exit 0' TERM; while true; do sleep 1; done\"]" \
        '    resources:' '      limits: {cpu: "1", memory: 64Mi}' '      claims: [{name: gpu}]'
}
numavm_shim "$metrics" "$sock" 300s
# run_pod NAME TEMPLATE WANT_CPUS WANT_MEMS: the pod runs, its claim's device is on the node its
# CPU and memory are on.
run_pod() {
    pod "$1" "$2" | it_kubectl apply -f -
    if ! it_kubectl wait --for=condition=Ready "pod/$1" --timeout="${wait_secs}s"; then
        it_kubectl describe pod "$1" | tail -20
        numavm_fail "pod $1 not Ready"
        return
    fi
    local claim device got
    claim=$(it_kubectl get pod "$1" -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}')
    device=$(it_kubectl get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[0].device}')
    got=$(numavm_placed "$1")
    echo "pod $1: claim $claim device $device; numa-shim: cpus ${got% *} memory node(s) ${got#* }"
    grep -i "claim" "$shim_log" | grep -F "$1" | tail -3 || true
    [[ ${got% *} == "$3" ]] || numavm_fail "pod $1 on CPU ${got% *}, not $3"
    [[ ${got#* } == "$4" ]] || numavm_fail "pod $1's memory on node(s) ${got#* }, not $4"
}

numavm_step "1. pod on-node1: a claim from gpu-node1"
run_pod on-node1 gpu-node1 2 1
numavm_step "2. pod on-node0: a claim from gpu-node0"
run_pod on-node0 gpu-node0 1 0
numavm_step "the kernel against numa-shim's /placement"
numavm_check check || numavm_fail "numa_check: the kernel differs from /placement"
numavm_step "3. on-node1's memory (the 32 MiB its container wrote) lands on node 1"
numavm_check numastat on-node1 32 --wait 600 || numavm_fail "on-node1's 32 MiB are not on node 1"
numavm_step "done: $numavm_failures failure(s)"
((numavm_failures == 0))

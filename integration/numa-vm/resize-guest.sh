#!/usr/bin/env bash
# In-place resize of a pod-level pod on a multi-NUMA kernel with the real kubelet: runs INSIDE a
# guest of integration/numa-vm/run.sh (the 2s shape: CPUs 0-3 | 4-7, 2 GiB per node)
#
#   integration/numa-vm/run.sh --timeout 5400 2s -- integration/numa-vm/resize-guest.sh
#
# The loopback control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
# runs in the guest beside containerd 1.6, numa-shim (this worktree's build) and the real kubelet
# v1.37.2 in API-server mode behind it. numa-shim's own file: static CPU Manager (CPU 0
# reserved), Static Memory Manager (100Mi reserved on node 0), `single-numa-node`, pod scope,
# gates PodLevelResources and PodLevelResourceManagers; the kubelet's main file holds the same
# settings and its drop-ins turn its own managers off (the packaged drop-in) and name the gates a
# pod-level resize needs (InPlacePodLevelResourcesVerticalScaling and PodLevelResources, both on
# by default in v1.37.2; InPlacePodVerticalScaling is GA there). Then, on pod `plrm` (spec.resources
# cpu 2 / 128Mi; container `app` cpu 1 / 64Mi, an exclusive slice; restartable-init `sidecar`
# without resources, on the pod pool), with `kubectl patch pod plrm --subresource resize`:
#   a. admitted: a 2-CPU budget on one NUMA node, app's slice one CPU of it, sidecar the other;
#   b. budget cpu 2 -> 3: it grows on the same node, app keeps its CPU, the pool is 2 CPUs;
#   c. budget cpu 3 -> 5 (more than the node holds): numa-shim refuses UpdatePodSandboxResources,
#      the kubelet shows numa-shim's message in the PodResizeInProgress condition and events,
#      nothing changes in the kernel or /placement; patched back to 3, the condition goes;
#   d. budget memory 128Mi -> 192Mi (Static Memory Manager): the memory bubble grows on the same
#      node; app then writes 32 MiB and sidecar 64 MiB, which memory.numa_stat shows on that node;
#   e. budget cpu 3 -> 2: the pool shrinks to the budget it was admitted with, app keeps its CPU.
# After each step: numa_check.py (every container's cpuset.cpus, cpuset.mems, Cpus_allowed_list,
# Mems_allowed_list against /placement, no CPU held twice) and resize_check.py (/placement,
# numa-shim's PodResources Get, `kubectl get pod -o json` and the pod's and containers' cgroup
# cpu.max/memory.max against the step's expectation). At the end both checkers are shown to fail
# on a wrong expectation and a deliberately wrong cpuset.mems. Everything in the guest is about
# 20 times slower than on the host: waits are long (NUMAVM_RESIZE_WAIT_SECS, default 1800 for
# the node and the pod, 900 per resize). Exit 1 on a failed check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IT_RUN=${IT_RUN:-/run/nsit-numavm-resize}
export IT_CP_WAIT_FACTOR=${IT_CP_WAIT_FACTOR:-20} IT_KUBELET_START_SECS=${IT_KUBELET_START_SECS:-1200}
# shellcheck source=integration/lib/numavm.sh
source "$here/../lib/numavm.sh"
# shellcheck source=integration/lib/apiserver.sh
source "$here/../lib/apiserver.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/../lib/kubelet.sh"
wait_secs=${NUMAVM_RESIZE_WAIT_SECS:-1800}
resize_secs=$((wait_secs / 2))

bin=$(it_numa_shim_bin)
[[ -x $bin ]] || it_die "no numa-shim at $bin (cargo build on the host first)"
for b in podresources-go crictl; do
    [[ -x $IT_BIN/$b ]] || it_die "no $IT_BIN/$b (integration/install-deps.sh on the host builds it)"
done
numavm_step "Guest: $(nproc --all) CPUs ($(numavm_nodes))"
# The pod's budget grows to 3 CPUs beside reserved CPU 0: every node needs 4 CPUs.
for n in /sys/devices/system/node/node[0-9]*; do
    c=$(python3 -B -c 'import sys; sys.path.insert(0, sys.argv[1]); import numa_check; print(len(numa_check.parse_list(open(sys.argv[2]).read())))' "$here" "$n/cpulist")
    ((c >= 4)) || it_die "${n##*/} has $c CPUs; this flow needs 4 per node (run.sh's 2s shape)"
done

finish() {
    local rc=$?
    set +e
    [[ -n ${NUMAVM_OUT:-} ]] && mkdir -p "$NUMAVM_OUT/resize-guest" && cp "$IT_LOGS"/*.log "$NUMAVM_OUT/resize-guest/" 2>/dev/null
    it_kubelet_teardown
    [[ -f $IT_RUN/pids/numa-shim-resize ]] && kill "$(cat "$IT_RUN/pids/numa-shim-resize")" 2>/dev/null
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

d=$IT_RUN/resize
mkdir -p "$d"
# numa-shim's log straight into the share, readable from the host while the guest runs.
shim_log=${NUMAVM_OUT:-$IT_LOGS}/numa-shim-resize.log
sock=$d/cri.sock
prsock=$d/pod-resources/kubelet.sock
port=$(it_free_port)
metrics=127.0.0.1:$port
name=resize
settings=('cpuManagerPolicy: static' 'reservedSystemCPUs: "0"' 'memoryManagerPolicy: Static'
    'reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]' 'topologyManagerPolicy: single-numa-node'
    'topologyManagerScope: pod')
header=('apiVersion: kubelet.config.k8s.io/v1beta1' 'kind: KubeletConfiguration')
printf '%s\n' "${header[@]}" "${settings[@]}" >"$d/kubelet.yaml"
printf '%s\n' "${header[@]}" "containerRuntimeEndpoint: unix://$sock" 'cpuManagerPolicy: none' \
    'memoryManagerPolicy: None' 'topologyManagerPolicy: none' >"$d/10-numa-shim.conf"
printf '%s\n' "${header[@]}" \
    'featureGates: {InPlacePodLevelResourcesVerticalScaling: true, PodLevelResources: true}' >"$d/20-resize-gates.conf"
printf '%s\n' "${settings[@]}" 'featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}' >"$d/numa-shim.yaml"
kargs=(--config "$d/kubelet.yaml" --drop-in "$d/10-numa-shim.conf" --drop-in "$d/20-resize-gates.conf"
    --runtime "unix://$sock" --apiserver)
it_kubelet_config "$name" "${kargs[@]}"
kconfig=(--kubelet-config "$(it_kubelet_fact "$name" config)" --kubelet-config-dir "$(it_kubelet_fact "$name" config_dir)")
echo "numa-shim settings ($d/numa-shim.yaml):" && sed 's/^/  /' "$d/numa-shim.yaml"
echo "\$ numa-shim check-config --config $d/numa-shim.yaml ${kconfig[*]}"
"$bin" check-config --config "$d/numa-shim.yaml" "${kconfig[@]}" || numavm_fail "numa-shim check-config"
"$bin" serve --config "$d/numa-shim.yaml" --listen "unix://$sock" --runtime "unix://$IT_SOCK" \
    --state-dir "$d/state" "${kconfig[@]}" --pod-knowledge apiserver \
    --kubeconfig "$IT_CP/numa-shim.kubeconfig" --node-name "$IT_NODE_NAME" \
    --kubelet-pod-resources-socket "$(it_kubelet_fact "$name" pod_resources)" \
    --pod-resources-socket "$prsock" --metrics-address "$metrics" >"$shim_log" 2>&1 &
echo $! >"$IT_RUN/pids/numa-shim-resize"
it_wait_socket "$sock" 300 || it_die "numa-shim did not answer (log $shim_log)"
echo "numa-shim topology:" && "$bin" topology | sed 's/^/  /'
it_kubelet_start "$name" "${kargs[@]}"
numavm_step "numa-shim and kubelet $(it_kubelet_fact "$name" version) up"
it_kubectl wait --for=condition=Ready "node/$IT_NODE_NAME" --timeout="${wait_secs}s"
echo "node $IT_NODE_NAME declares: $(it_kubectl get node "$IT_NODE_NAME" -o 'jsonpath={.status.declaredFeatures}')"
numavm_step "node $IT_NODE_NAME Ready"

numavm_shim "$metrics" "$sock" 300s
rcheck() {
    python3 "$here/resize_check.py" --placement "http://$metrics" --crictl "$(numavm_crictl "$sock" 300s)" \
        --podresources "$IT_BIN/podresources-go -socket $prsock -timeout 60s" \
        --kubectl "$IT_KUBECTL --kubeconfig $IT_CP/admin.kubeconfig" "$@"
}
# settle SECS CMD...: runs CMD until it succeeds or SECS have passed (numa-shim pushes a pool to
# running containers right after the resize; the guest is slow); prints the last try's output
# and returns its status.
settle() {
    local start=$SECONDS deadline=$((SECONDS + $1)) out rc tries=0
    shift
    while :; do
        rc=0
        tries=$((tries + 1))
        out=$("$@" 2>&1) || rc=$?
        if ((rc == 0 || SECONDS >= deadline)); then
            printf '%s\n' "$out"
            ((tries == 1)) || echo "(settled after $tries tries, $((SECONDS - start))s: exit $rc)"
            return "$rc"
        fi
        sleep 5
    done
}
# expect ARGS...: resize_check.py expect plrm ARGS, settled; sets node, app, budget and pool from
# its facts line.
node='' app='' budget='' pool=''
expect() {
    local out rc=0
    out=$(settle 120 rcheck expect plrm "$@") || rc=$?
    printf '%s\n' "$out"
    read -r _ _ node _ app _ budget _ pool <<<"$(grep "^facts: " <<<"$out" | tail -1)"
    ((rc == 0)) || numavm_fail "resize_check expect plrm $* (exit $rc)"
}
kernel() { settle 120 numavm_check check || numavm_fail "numa_check: the kernel differs from /placement"; }
# resize CPU MEMORY: kubectl patch of the pod's spec.resources (requests = limits).
resize() {
    local patch
    patch=$(printf '{"spec":{"resources":{"requests":{"cpu":"%s","memory":"%s"},"limits":{"cpu":"%s","memory":"%s"}}}}' "$1" "$2" "$1" "$2")
    echo "\$ kubectl patch pod plrm --subresource resize -p '$patch'"
    it_kubectl patch pod plrm --subresource resize -p "$patch"
}
resizes() { curl -fsS "http://$metrics/metrics" | grep '^numa_shim_resizes_total' || true; }
# writer NAME MIB: a container command that sleeps and, once the file NAME appears in its
# /trigger (a hostPath of $d/trigger: step d makes it after the memory resize), writes MIB MiB
# into its /tmp, once. (crictl exec of a dd failed in this guest: runc 1.1.5's exec said "error
# closing exec fds: open /proc/self/fd: no such file or directory".)
writer() {
    printf '%s' "command: [sh, -c, \"trap 'exit 0' TERM; while true; do if [ -e /trigger/$1 ] && [ ! -e /tmp/fill ]; then dd if=/dev/zero of=/tmp/fill bs=1M count=$2 2>/dev/null; fi; sleep 1; done\"]"
}
mount='volumeMounts: [{name: trigger, mountPath: /trigger, readOnly: true}]'
mkdir -p "$d/trigger"

numavm_step "a. pod plrm: budget cpu 2 / 128Mi, app cpu 1 / 64Mi (exclusive), sidecar without resources (pod pool)"
printf '%s\n' 'apiVersion: v1' 'kind: Pod' 'metadata: {name: plrm, namespace: default}' 'spec:' \
    '  hostNetwork: true' '  automountServiceAccountToken: false' '  terminationGracePeriodSeconds: 2' \
    '  resources:' '    requests: {cpu: "2", memory: 128Mi}' '    limits: {cpu: "2", memory: 128Mi}' \
    "  volumes: [{name: trigger, hostPath: {path: $d/trigger, type: Directory}}]" \
    '  initContainers:' '  - name: sidecar' "    image: $IT_BUSYBOX_IMAGE" '    imagePullPolicy: Never' \
    '    restartPolicy: Always' "    $(writer sidecar 64)" "    $mount" \
    '  containers:' '  - name: app' "    image: $IT_BUSYBOX_IMAGE" '    imagePullPolicy: Never' \
    "    $(writer app 32)" "    $mount" \
    '    resources:' '      requests: {cpu: "1", memory: 64Mi}' '      limits: {cpu: "1", memory: 64Mi}' |
    tee "$d/plrm.yaml" | it_kubectl apply -f -
if ! it_kubectl wait --for=condition=Ready pod/plrm --timeout="${wait_secs}s"; then
    it_kubectl describe pod plrm | tail -30
    tail -30 "$shim_log"
    it_die "pod plrm not Ready"
fi
kernel
expect --cpus 2 --memory 128Mi
admitted=$budget app0=$app node0=$node
[[ -n $admitted && -n $app0 && $node0 =~ ^[0-9]+$ ]] || it_die "no facts of plrm from resize_check"
echo "plrm admitted on node $node0: budget $admitted, app $app0, pool $pool"
"$bin" inspect --endpoint "http://$metrics"

numavm_step "b. budget cpu 2 -> 3: grows on node $node0, app keeps CPU $app0, the pool grows to 2 CPUs"
resize 3 128Mi
rcheck wait plrm --cpus 3 --memory 128Mi --timeout "$resize_secs" || numavm_fail "the resize to cpu 3 was not actuated"
kernel
expect --cpus 3 --memory 128Mi --node "$node0" --app "$app0" --keeps "$admitted"
grown=$budget
echo "plrm grown: budget $grown, app $app, pool $pool"
"$bin" inspect --endpoint "http://$metrics"
resizes

numavm_step "c. budget cpu 3 -> 5: more than node $node0 holds; numa-shim refuses, the kubelet shows it, nothing changes"
numavm_check snapshot >"$d/before-refusal.json"
resize 5 128Mi
if out=$(rcheck wait plrm --condition "numa-shim cannot resize" --timeout "$resize_secs"); then
    printf '%s\n' "$out"
    grep -q 'free cpus' <<<"$out" || numavm_fail "the refusal does not name the free CPUs: $out"
    grep -q "NUMA node(s) $node0" <<<"$out" || numavm_fail "the refusal does not name node $node0: $out"
else
    printf '%s\n' "$out"
    numavm_fail "no PodResizeInProgress condition with numa-shim's refusal"
fi
events=$(rcheck events plrm) || numavm_fail "kubectl get events"
printf '%s\n' "$events"
grep -q 'ResizeRefused .*numa-shim' <<<"$events" || numavm_fail "no ResizeRefused event from numa-shim"
grep -q 'ResizeError .*kubelet' <<<"$events" || numavm_fail "no ResizeError event from the kubelet"
settle 60 numavm_check same "$d/before-refusal.json" || numavm_fail "the refused resize changed numa-shim's decision"
kernel
expect --cpus 3 --memory 128Mi --node "$node0" --app "$app0" --spec-cpus 5 --condition "numa-shim cannot resize"
[[ $budget == "$grown" ]] || numavm_fail "the refused resize moved the budget: $grown -> $budget"
resizes | tee "$d/resizes"
grep -Eq 'outcome="refused"} [1-9]' "$d/resizes" || numavm_fail "numa_shim_resizes_total{outcome=\"refused\"} is 0"
numavm_step "c. patched back to cpu 3: the condition goes"
resize 3 128Mi
rcheck wait plrm --cpus 3 --memory 128Mi --timeout "$resize_secs" || numavm_fail "the condition stayed after patching back"
expect --cpus 3 --memory 128Mi --node "$node0" --app "$app0" --keeps "$admitted"

numavm_step "d. budget memory 128Mi -> 192Mi (Static Memory Manager): the bubble grows on node $node0"
resize 3 192Mi
rcheck wait plrm --cpus 3 --memory 192Mi --timeout "$resize_secs" || numavm_fail "the resize to 192Mi was not actuated"
kernel
expect --cpus 3 --memory 192Mi --node "$node0" --app "$app0" --keeps "$admitted"
[[ $budget == "$grown" ]] || numavm_fail "the memory resize moved the CPU budget: $grown -> $budget"
numavm_step "d. app writes 32 MiB, sidecar 64 MiB: memory.numa_stat shows them on node $node0"
touch "$d/trigger/app" "$d/trigger/sidecar"
numavm_check numastat app 32 --wait 600 || numavm_fail "app's 32 MiB are not on node $node0"
numavm_check numastat sidecar 64 --wait 600 || numavm_fail "sidecar's 64 MiB are not on node $node0"

numavm_step "e. budget cpu 3 -> 2: the pool shrinks back to the admitted budget $admitted, app keeps CPU $app0"
resize 2 192Mi
rcheck wait plrm --cpus 2 --memory 192Mi --timeout "$resize_secs" || numavm_fail "the resize to cpu 2 was not actuated"
kernel
expect --cpus 2 --memory 192Mi --node "$node0" --app "$app0" --keeps "$admitted"
[[ $budget == "$admitted" ]] || numavm_fail "the shrunk budget is $budget, not the admitted $admitted"
"$bin" inspect --endpoint "http://$metrics"
resizes

numavm_step "The checkers fail on a wrong expectation and on a wrong cpuset.mems"
other=$(((node0 + 1) % 2))
out=$(rcheck expect plrm --cpus 4 --memory 256Mi --node "$other" --app 7 2>&1) && numavm_fail "resize_check passed a wrong expectation: $out"
for v in placement podresources kubectl kernel; do
    grep -q "^FAIL \[$v\]" <<<"$out" || numavm_fail "resize_check found nothing wrong in the $v view with a wrong expectation"
done
grep '^FAIL' <<<"$out" || true
if out=$(numavm_check check --break-mems sidecar 2>&1); then
    numavm_fail "numa_check passed with a wrong cpuset.mems: $out"
else
    grep '^FAIL\|wrote a wrong' <<<"$out"
fi
echo "numa-shim's resize log:"
grep -E 'resize' "$shim_log" | cut -c1-400 | tail -40 || true
numavm_step "done: $numavm_failures failure(s)"
((numavm_failures == 0))

#!/usr/bin/env bash
# The crictl flow on a multi-NUMA kernel: runs INSIDE a guest of integration/numa-vm/run.sh
#
#   integration/numa-vm/run.sh 2n -- integration/numa-vm/crictl-flow.sh
#
# Starts containerd 1.6 (private root and state on the guest's tmpfs, cgroup v2, a loopback-only
# CNI config, the local busybox images) and numa-shim (this worktree's build, the guest's sysfs
# topology; static CPU Manager with CPU 0 reserved, Static Memory Manager, single-numa-node, pod
# scope, specs inferred from CRI) in front of it, drives pods through numa-shim with crictl as the
# kubelet would, and checks with numa_check.py what the kernel applied against numa-shim's
# /placement:
#   - a pod in the node shared pool (500m), then the tutorial's mixed pod (one node's CPUs:
#     main with an exclusive slice, two sidecars in the pod shared pool), a 1-CPU pod writing
#     64 MiB: for every container cpuset.cpus, cpuset.mems, Cpus_allowed_list and
#     Mems_allowed_list equal the decision and lie on the decided node; the node shared pool
#     shrinks (the shared pod's cpuset with it);
#   - >= 95 % of the 64 MiB on the decided node in memory.numa_stat (with more than 2 nodes, also
#     for a pod of one node's CPUs that lands on a third node);
#   - a pod bigger than one node refused with TopologyAffinityError;
#   - numa-shim killed (-9) and restarted on its checkpoint: the same decisions, the kernel still
#     matching, a new pod admitted only onto free CPUs (refused when none is free);
#   - the pods removed: the node shared pool (and the shared pod's cpuset) grows back;
#   - in-place resize (UpdateContainerResources as the kubelet's CPU pass sends it, through
#     crictl update): a classic 1-CPU pod grown to 2 keeps its CPU and gets one on its node
#     (kernel cpuset.cpus/mems equal /placement), grown past its node refused with
#     RESOURCE_EXHAUSTED and unchanged, shrunk back to its CPU;
#   - the check itself fails on a deliberately wrong cpuset.mems.
# NUMAVM_BREAK_MEMS=1 writes a wrong cpuset.mems into the mixed pod's main container before the
# first check, so the run fails (to see what a failure looks like). Exit 1 when a check failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export IT_RUN=${IT_RUN:-/run/nsit-numavm}
# shellcheck source=integration/lib/numavm.sh
source "$here/../lib/numavm.sh"

# checked CMD...: runs a check, counting its failure without stopping the flow.
checked() { "$@" || numavm_fail "$* (exit $?)"; }

[[ -f /sys/fs/cgroup/cgroup.controllers ]] || it_die "cgroup v2 is not mounted at /sys/fs/cgroup"
nodes=$(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' | wc -l)
cpus=$(nproc --all)
per_node=$((cpus / nodes))
numavm_step "Guest: $cpus CPUs, $nodes NUMA nodes ($(numavm_nodes))"

# finish: keeps the logs of containerd and numa-shim in the share (the guest's disk goes at
# poweroff), then tears down, keeping the exit status.
finish() {
    local rc=$?
    cp "$IT_LOGS"/*.log "${NUMAVM_OUT:-$IT_WORK}/" 2>/dev/null
    (exit "$rc")
    it_teardown
}
trap finish EXIT
trap "exit 143" TERM INT
it_up
bin=$(it_numa_shim_bin)
[[ -x $bin ]] || it_die "no numa-shim at $bin (cargo build on the host first)"
dir=$IT_RUN/flow
mkdir -p "$dir"
metrics=127.0.0.1:19464
printf '%s\n' 'cpuManagerPolicy: static' 'reservedSystemCPUs: "0"' 'topologyManagerPolicy: single-numa-node' \
    'topologyManagerScope: pod' 'memoryManagerPolicy: Static' \
    'reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]' "metricsAddress: $metrics" >"$dir/numa-shim.yaml"
shim_args=(--config "$dir/numa-shim.yaml" --state-dir "$IT_RUN/shim-state" --pod-knowledge cri)
shim=$(it_shim_start shim "${shim_args[@]}")
echo "numa-shim settings:" && sed 's/^/  /' "$dir/numa-shim.yaml"
echo "numa-shim topology:" && "$bin" topology | sed 's/^/  /'
numavm_shim "$metrics" "$shim"
shared_cpus() { python3 -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["sharedCPUs"])' "http://$metrics/placement"; }
# wait_shared CPUS: waits (60 s at most) until the node shared pool is CPUS.
wait_shared() {
    local i
    for ((i = 0; i < 120; i++)); do
        [[ $(shared_cpus) == "$1" ]] && return 0
        sleep 0.5
    done
    numavm_fail "the node shared pool is $(shared_cpus), expected $1"
}
# wait_cpuset ID CPUS: waits (60 s at most) until container ID's kernel cpuset.cpus is CPUS.
wait_cpuset() {
    local i pid cg now=
    pid=$(it_crictl "$shim" inspect -o go-template --template '{{.info.pid}}' "$1")
    cg=/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
    for ((i = 0; i < 120; i++)); do
        now=$(cat "$cg/cpuset.cpus")
        [[ $now == "$2" ]] && return 0
        sleep 0.5
    done
    numavm_fail "container $1: cpuset.cpus is $now, expected $2 ($cg)"
}

# res SHARES QUOTA MEMORY: CRI LinuxContainerResources as the kubelet fills them.
res() { printf '{"cpu_period": 100000, "cpu_quota": %s, "cpu_shares": %s, "memory_limit_in_bytes": %s}' "$2" "$1" "$3"; }
# pod_json NAME RESOURCES: a pod sandbox config (host network: the guest has loopback only).
pod_json() {
    printf '{"metadata": {"name": "%s", "namespace": "default", "uid": "numavm-%s-uid", "attempt": 0}, "log_directory": "%s", "linux": {"cgroup_parent": "/%s/pod-%s", "security_context": {"namespace_options": {"network": 2}}, "resources": %s}}\n' \
        "$1" "$1" "$IT_RUN/logs/$1" "$IT_CG" "$1" "$2" >"$dir/pod-$1.json"
}
# container_json NAME RESOURCES [SHELL_CMD]: a container running SHELL_CMD, then sleeping.
container_json() {
    printf '{"metadata": {"name": "%s"}, "image": {"image": "%s"}, "command": ["sh", "-c", "%s sleep 3600"], "log_path": "%s.log", "linux": {"resources": %s}}\n' \
        "$1" "$IT_BUSYBOX_IMAGE" "${3:-}" "$1" "$2" >"$dir/ctr-$1.json"
}
declare -A pods ids
# run_pod POD CONTAINER...: runs the pod and its containers (in order) through numa-shim.
run_pod() {
    local pod=$1 c
    shift
    pods[$pod]=$(it_crictl "$shim" runp "$dir/pod-$pod.json")
    for c in "$@"; do
        ids[$c]=$(it_crictl "$shim" create "${pods[$pod]}" "$dir/ctr-$c.json" "$dir/pod-$pod.json")
        it_crictl "$shim" start "${ids[$c]}" >/dev/null
    done
}
remove_pod() {
    it_crictl "$shim" stopp "${pods[$1]}" >/dev/null
    it_crictl "$shim" rmp "${pods[$1]}" >/dev/null
}
# refused POD: RunPodSandbox of POD must fail with the kubelet's TopologyAffinityError.
refused() {
    local out
    if out=$(it_crictl "$shim" runp "$dir/pod-$1.json" 2>&1); then
        numavm_fail "pod $1 was admitted (sandbox $out); expected TopologyAffinityError"
        return
    fi
    out=$(tail -1 <<<"$out")
    echo "refused: ${out#*desc = }"
    grep -q 'code = FailedPrecondition desc = TopologyAffinityError: ' <<<"$out" ||
        numavm_fail "pod $1: refusal without the kubelet's reason: $out"
}

all=$(cat /sys/devices/system/cpu/online)
numavm_step "A pod in the node shared pool (500m): it runs on every CPU ($all)"
pod_json burst "$(res 512 50000 67108864)"
container_json burst "$(res 512 50000 67108864)"
run_pod burst burst
wait_shared "$all"

numavm_step "The tutorial's mixed pod, one node's CPUs ($per_node): main exclusive, sidecars proxy and logs in the pod pool"
m=$((per_node - 1))
pod_json mixed "$(res $((per_node * 1024)) $((per_node * 100000)) 268435456)"
container_json proxy "$(res $((per_node * 1024)) $((per_node * 100000)) 268435456)"
container_json logs "$(res $((per_node * 1024)) $((per_node * 100000)) 268435456)"
container_json main "$(res $((m * 1024)) $((m * 100000)) 134217728)"
run_pod mixed proxy logs main

numavm_step "A 1-CPU pod writing 64 MiB into its /tmp"
pod_json mem "$(res 1024 100000 201326592)"
container_json mem "$(res 1024 100000 201326592)" 'dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>/dev/null;'
run_pod mem mem

if ((nodes > 2)); then
    numavm_step "More than 2 nodes: a pod of one node's CPUs ($per_node) writing 64 MiB lands on a third node"
    pod_json far "$(res $((per_node * 1024)) $((per_node * 100000)) 201326592)"
    container_json far "$(res $((per_node * 1024)) $((per_node * 100000)) 201326592)" 'dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>/dev/null;'
    run_pod far far
fi

mixed_cpus=$(python3 -c 'import json,sys,urllib.request; print([p["cpus"] for p in json.load(urllib.request.urlopen(sys.argv[1]))["pods"] if p["name"] == "mixed"][0])' "http://$metrics/placement")
shrunk=$(shared_cpus)
numavm_step "The node shared pool shrank to $shrunk (mixed holds $mixed_cpus); the shared pod follows it"
[[ $shrunk != "$all" ]] || numavm_fail "the node shared pool did not shrink: $shrunk"
wait_cpuset "${ids[burst]}" "$shrunk"

if [[ -n ${NUMAVM_BREAK_MEMS:-} ]]; then
    numavm_step "NUMAVM_BREAK_MEMS: a wrong cpuset.mems for main (this run must fail)"
    checked numavm_check check --break-mems main
else
    numavm_step "Kernel against numa-shim's decision, every container"
    checked numavm_check check
fi
numavm_step "Memory lands on the decided node"
checked numavm_check numastat mem 64
if ((nodes > 2)); then checked numavm_check numastat far 64; fi

numavm_step "A pod bigger than one node ($((per_node + 1)) CPUs) under single-numa-node is refused"
pod_json toobig "$(res $(((per_node + 1) * 1024)) $(((per_node + 1) * 100000)) 67108864)"
refused toobig

numavm_step "numa-shim killed (-9) and restarted on its checkpoint"
numavm_check snapshot >"$dir/before.json"
kill -KILL "$(cat "$IT_RUN/pids/shim")"
sleep 1
shim=$(it_shim_start shim "${shim_args[@]}")
checked numavm_check same "$dir/before.json"
checked numavm_check check
free=$(python3 -c '
import json, sys, urllib.request
v = json.load(urllib.request.urlopen(sys.argv[1]))
print(sum(1 for n in v["numaNodes"] for c in n["cpus"] if c["owner"]["kind"] == "shared"))' "http://$metrics/placement")
pod_json after "$(res 1024 100000 67108864)"
container_json after "$(res 1024 100000 67108864)"
if ((free == 0)); then
    numavm_step "No CPU is free for an exclusive 1-CPU pod after the restart: it is refused"
    refused after
    numavm_step "mem removed: its CPU is free again, and the 1-CPU pod gets it"
    remove_pod mem
    run_pod after after
else
    numavm_step "$free CPUs free after the restart: a 1-CPU pod gets one of them"
    run_pod after after
fi
checked numavm_check check

numavm_step "The check fails on a deliberately wrong cpuset.mems"
if out=$(numavm_check check --break-mems main 2>&1); then
    numavm_fail "numa_check passed with a wrong cpuset.mems: $out"
else
    grep '^FAIL\|wrote a wrong' <<<"$out"
fi

numavm_step "Pods removed: the node shared pool grows back to $all, the shared pod's cpuset with it"
remove_pod mixed
remove_pod after
if ((nodes > 2)); then remove_pod far; fi
((free == 0)) || remove_pod mem
wait_shared "$all"
wait_cpuset "${ids[burst]}" "$all"
checked numavm_check check
echo "\$ numa-shim inspect"
"$bin" inspect --endpoint "http://$metrics"

# node_of CPUS: the NUMA nodes of CPUS (sysfs), as a list.
node_of() {
    python3 -c '
import glob, sys
def parse(s):
    out = set()
    for part in s.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out
want = parse(sys.argv[1])
print(",".join(str(n) for n in sorted(int(d.rsplit("node", 1)[1]) for d in glob.glob("/sys/devices/system/node/node[0-9]*") if parse(open(d + "/cpulist").read()) & want)))' "$1"
}
subset() { python3 -c '
import sys
def parse(s):
    out = set()
    for part in s.split(","):
        if part:
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out
sys.exit(0 if parse(sys.argv[1]) <= parse(sys.argv[2]) else 1)' "$1" "$2"; }
# resize ID CPUS: UpdateContainerResources as the kubelet's CPU pass sends it for CPUS whole CPUs
# (shares, quota and period of the new CPUs, the current 64 MiB memory limit).
resize() {
    it_crictl "$shim" update --cpu-share $(($2 * 1024)) --cpu-quota $(($2 * 100000)) --cpu-period 100000 \
        --memory 67108864 "$1"
}

numavm_step "In-place resize: two classic Guaranteed 1-CPU pods (no pod-level budget), near first"
for p in near grow; do
    pod_json "$p" '{}'
    container_json "$p" "$(res 1024 100000 67108864)"
    run_pod "$p" "$p"
done
read -r near_cpus _ <<<"$(numavm_placed near)"
read -r grow_cpus grow_mems <<<"$(numavm_placed grow)"
grow_node=$(node_of "$grow_cpus")
echo "near: CPU $near_cpus (node $(node_of "$near_cpus")); grow: CPU $grow_cpus (node $grow_node, mems $grow_mems)"
checked numavm_check check

numavm_step "grow resized to 2 CPUs (crictl update, as the kubelet's CPU pass): it keeps CPU $grow_cpus, the new one on node $grow_node"
if out=$(resize "${ids[grow]}" 2 2>&1); then
    read -r grown grown_mems <<<"$(numavm_placed grow)"
    echo "grow: CPUs $grown, mems $grown_mems (was $grow_cpus, mems $grow_mems)"
    wait_cpuset "${ids[grow]}" "$grown"
    subset "$grow_cpus" "$grown" || numavm_fail "grow lost CPU $grow_cpus: now $grown"
    [[ $(node_of "$grown") == "$grow_node" ]] || numavm_fail "grow's CPUs $grown are not all on node $grow_node"
    [[ $grown_mems == "$grow_mems" ]] || numavm_fail "grow's memory moved: $grow_mems -> $grown_mems"
    [[ $grown != "$grow_cpus" ]] || numavm_fail "grow did not grow: $grown"
    checked numavm_check check
else
    numavm_fail "the resize of grow to 2 CPUs was refused: $out"
fi

numavm_step "grow resized to $((per_node + 1)) CPUs: more than node $grow_node holds, refused; it keeps its CPUs"
before=$(numavm_placed grow)
if out=$(resize "${ids[grow]}" $((per_node + 1)) 2>&1); then
    numavm_fail "the resize of grow to $((per_node + 1)) CPUs was not refused: $(numavm_placed grow)"
else
    out=$(tail -1 <<<"$out")
    echo "refused: ${out#*desc = }"
    # crictl's log line escapes the quotes of the message: match around them.
    grep -Eq 'code = ResourceExhausted desc = numa-shim cannot resize container .?.?grow.?.? of pod default/grow' <<<"$out" ||
        numavm_fail "refusal without numa-shim's reason: $out"
    [[ $(numavm_placed grow) == "$before" ]] || numavm_fail "the refused resize changed grow: $before -> $(numavm_placed grow)"
    wait_cpuset "${ids[grow]}" "${before%% *}"
fi

numavm_step "grow resized back to 1 CPU: it returns to CPU $grow_cpus"
checked resize "${ids[grow]}" 1
read -r back _ <<<"$(numavm_placed grow)"
[[ $back == "$grow_cpus" ]] || numavm_fail "grow is on $back after the shrink, expected $grow_cpus"
wait_cpuset "${ids[grow]}" "$grow_cpus"
checked numavm_check check
remove_pod near
remove_pod grow
wait_shared "$all"

numavm_step "crictl flow on $nodes nodes: $numavm_failures failures"
((numavm_failures == 0))

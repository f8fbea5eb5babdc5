#!/usr/bin/env bash
# Demo: starts a private containerd and numa-shim in front of it (pod-level resource managers,
# pod scope), runs the tutorial's mixed pod through numa-shim with crictl (as the kubelet would),
# prints each container's real cgroup cpuset next to what numa-shim decided, draws the live NUMA
# map with `numa-shim inspect`, and tears everything down. Needs root; installs what it needs.
#
#   integration/demo.sh            the crictl flow above
#   integration/demo.sh --kubelet  the tutorial's flow with a real standalone kubelet
#                                  (integration/demo-kubelet.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ ${1:-} == --kubelet ]]; then
    exec "$here/demo-kubelet.sh" "${@:2}"
fi
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"

say() { printf '\n### %s\n' "$*"; }
# show ARGS...: prints a crictl command line (to stderr), then runs it against numa-shim.
show() {
    printf '$ crictl --runtime-endpoint unix://%s %s\n' "$shim" "$*" >&2
    it_crictl "$shim" "$@" 2> >(grep -v 'does not exist, trying next' >&2)
}
# res SHARES QUOTA MEMORY: CRI LinuxContainerResources as the kubelet fills them.
res() {
    printf '{"cpu_period": 100000, "cpu_quota": %s, "cpu_shares": %s, "memory_limit_in_bytes": %s}' "$2" "$1" "$3"
}
# container_json NAME RESOURCES: a container config running `sleep`.
container_json() {
    printf '{"metadata": {"name": "%s"}, "image": {"image": "%s"}, "command": ["sleep", "3600"], "log_path": "%s.log", "linux": {"resources": %s}}\n' \
        "$1" "$IT_BUSYBOX_IMAGE" "$1" "$2" >"$dir/$1.json"
}
# applied ID: "cpuset.cpus cpuset.mems cfs_quota_us Cpus_allowed_list" read from the kernel.
applied() {
    local pid cs cpu quota
    pid=$(it_crictl "$shim" inspect -o go-template --template '{{.info.pid}}' "$1")
    cs=$(awk -F: '$2 ~ /(^|,)cpuset(,|$)/ {print $3}' "/proc/$pid/cgroup")
    cpu=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' "/proc/$pid/cgroup")
    quota=/sys/fs/cgroup/cpu,cpuacct$cpu/cpu.cfs_quota_us
    [[ -r $quota ]] || quota=/sys/fs/cgroup/cpu$cpu/cpu.cfs_quota_us
    printf '%s %s %s %s\n' "$(cat "/sys/fs/cgroup/cpuset$cs/cpuset.cpus")" "$(cat "/sys/fs/cgroup/cpuset$cs/cpuset.mems")" \
        "$(cat "$quota")" "$(awk '/Cpus_allowed_list/ {print $2}' "/proc/$pid/status")"
}
# decided NAME: the cpuset and pool numa-shim holds for container NAME now (its /placement view).
decided() {
    "$bin" inspect --endpoint "http://$metrics" --output json | python3 -c '
import json, sys
view = json.load(sys.stdin)
for pod in view["pods"]:
    for c in pod["containers"]:
        if c["name"] == sys.argv[1]:
            print(c["cpus"], c["pool"])
' "$1"
}

# What a fresh machine lacks (containerd, runc, crictl, ...); no kubelet for this flow.
IT_DEPS=demo IT_KUBELET_BUILD=none "$here/install-deps.sh"
trap it_teardown EXIT
trap "exit 143" TERM INT
say "Starting a private containerd (state under $IT_RUN)"
it_up
cargo build --quiet --bin numa-shim --manifest-path "$IT_REPO/Cargo.toml"
bin=$(it_numa_shim_bin)
dir=$(mktemp -d)
metrics=127.0.0.1:${NUMA_SHIM_DEMO_METRICS_PORT:-19464}

say "numa-shim settings: the kubelet's resource-manager fields, pod scope"
# This machine has 2 CPUs, so the demo reserves none (numa-shim accepts that with a warning).
printf '%s\n' 'cpuManagerPolicy: static' 'reservedSystemCPUs: ""' 'topologyManagerPolicy: best-effort' \
    'topologyManagerScope: pod' 'memoryManagerPolicy: Static' \
    'reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]' "metricsAddress: $metrics" >"$dir/numa-shim.yaml"
cat "$dir/numa-shim.yaml"

say "Starting numa-shim in front of it"
# shellcheck disable=SC2086 # NUMA_SHIM_IT_SHIM_ARGS is a list of words
shim=$(it_shim_start demo-shim --config "$dir/numa-shim.yaml" --state-dir "$IT_RUN/demo-state" \
    --pod-knowledge cri ${NUMA_SHIM_IT_SHIM_ARGS:-})
echo "kubelet/crictl endpoint: unix://$shim  ->  runtime: unix://$IT_SOCK"

# The tutorial's mixed pod scaled to 2 CPUs: a 2-CPU / 256 MiB budget, a main container with
# 1 CPU / 128 MiB of its own, two sidecars without resources (the kubelet gives them the pod's
# limits over CRI).
printf '{"metadata": {"name": "mixed", "namespace": "default", "uid": "demo-mixed-uid", "attempt": 0}, "log_directory": "%s", "linux": {"cgroup_parent": "/%s/pod-demo-mixed", "security_context": {"namespace_options": {"network": 2}}, "resources": %s}}\n' \
    "$IT_RUN/logs/demo" "$IT_CG" "$(res 2048 200000 268435456)" >"$dir/pod.json"
container_json proxy "$(res 2048 200000 268435456)"
container_json logs "$(res 2048 200000 268435456)"
container_json main "$(res 1024 100000 134217728)"
say "The pod: 2 CPUs / 256 MiB budget; main 1 CPU / 128 MiB; sidecars proxy and logs without resources"
cat "$dir/pod.json" "$dir/main.json"

say "Running it through numa-shim (sidecars first, as the kubelet does)"
pod=$(show runp "$dir/pod.json" | tail -1)
declare -A ids
for c in proxy logs main; do
    ids[$c]=$(show create "$pod" "$dir/$c.json" "$dir/pod.json" | tail -1)
    show start "${ids[$c]}" >/dev/null
done
sleep 2 # the sidecars' cpusets follow the pod pool once main has taken its slice

say "What numa-shim decided next to what the kernel applied (cgroupfs, /proc)"
printf '%-9s | %-8s %-10s | %-11s %-11s %-12s %s\n' container decided pool cpuset.cpus cpuset.mems cfs_quota_us Cpus_allowed_list
for c in proxy logs main; do
    read -r cpus mems quota allowed < <(applied "${ids[$c]}")
    read -r want pool < <(decided "$c")
    printf '%-9s | %-8s %-10s | %-11s %-11s %-12s %s\n' "$c" "$want" "$pool" "$cpus" "$mems" "$quota" "$allowed"
done

say "The live NUMA map"
echo "\$ numa-shim inspect --endpoint http://$metrics"
"$bin" inspect --endpoint "http://$metrics"

say "Cleaning up"
show stopp "$pod"
show rmp "$pod"
rm -rf "$dir"
say "Demo done; tearing down containerd and numa-shim"

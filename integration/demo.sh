#!/usr/bin/env bash
# Demo: starts a private containerd and numa-shim in front of it, runs a pod with one container
# through numa-shim with crictl (as the kubelet would), shows what the kernel applied, and tears
# everything down. Needs root and integration/install-deps.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"

say() { printf '\n### %s\n' "$*"; }
# show CMD...: prints a command, then runs it.
show() {
    printf '$ %s\n' "$*"
    "$@" 2> >(grep -v 'does not exist, trying next' >&2)
}

trap it_teardown EXIT
say "Starting a private containerd (state under $IT_RUN)"
it_up
cargo build --quiet --bin numa-shim --manifest-path "$IT_REPO/Cargo.toml"
say "Starting numa-shim in front of it"
# shellcheck disable=SC2086 # NUMA_SHIM_IT_SHIM_ARGS is a list of words
shim=$(it_shim_start demo-shim ${NUMA_SHIM_IT_SHIM_ARGS:-})
echo "kubelet/crictl endpoint: unix://$shim  ->  runtime: unix://$IT_SOCK"
c=(it_crictl "$shim")
dir=$(mktemp -d)
cat >"$dir/pod.json" <<EOF
{"metadata": {"name": "demo", "namespace": "default", "uid": "demo-uid", "attempt": 0},
 "log_directory": "$IT_RUN/logs/demo",
 "linux": {"cgroup_parent": "/$IT_CG/pod-demo",
           "resources": {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024,
                         "memory_limit_in_bytes": 134217728}}}
EOF
cat >"$dir/ctr.json" <<EOF
{"metadata": {"name": "app"}, "image": {"image": "$IT_BUSYBOX_IMAGE"},
 "command": ["sleep", "3600"], "log_path": "app.log",
 "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024,
                         "memory_limit_in_bytes": 134217728}}}
EOF
say "The pod: 1 CPU, 128 MiB (Guaranteed)"
cat "$dir/pod.json"
say "Running it through numa-shim"
show "${c[@]}" version
pod=$(show "${c[@]}" runp "$dir/pod.json" | tail -1)
echo "pod $pod"
ctr=$(show "${c[@]}" create "$pod" "$dir/ctr.json" "$dir/pod.json" | tail -1)
echo "container $ctr"
show "${c[@]}" start "$ctr"
show "${c[@]}" ps
say "What the runtime was asked for (OCI spec resources)"
show "${c[@]}" inspect -o go-template --template '{{json .info.runtimeSpec.linux.resources.cpu}}' "$ctr"
echo
say "What the kernel applied (read inside the container)"
# shellcheck disable=SC2016 # expanded inside the container
show "${c[@]}" exec -s "$ctr" sh -c 'grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status; echo "cfs_quota_us $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)"'
say "Cleaning up"
show "${c[@]}" stopp "$pod"
show "${c[@]}" rmp "$pod"
rm -rf "$dir"
say "Demo done; tearing down containerd and numa-shim"

# shellcheck shell=bash
# Helpers of the scripts that run inside a multi-NUMA guest of integration/numa-vm/run.sh
# (crictl-flow.sh, dra-guest.sh, kubelet-compare.sh, resize-guest.sh): step headings, counted
# failures, the guest's NUMA nodes, and the judge of numa-shim's placement against the kernel
# (integration/numa-vm/numa_check.py). The guest scripts source only this for the harness they
# share (common.sh, image.sh, containerd.sh: the private containerd); set IT_RUN first. It
# defines no traps.

# shellcheck source=integration/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=integration/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$(dirname "${BASH_SOURCE[0]}")/containerd.sh"

numavm_failures=0
# A crictl call in the guest: a start took more than 60 s on a host under a load of ~9 (the
# guest's vCPUs starved: soft lockups), so the guest's calls may take 5 minutes.
export IT_CRICTL_TIMEOUT=${IT_CRICTL_TIMEOUT:-300s}

# numavm_step TEXT: a step's heading, with the seconds since the script started.
numavm_step() { printf '\n### [+%ss] %s\n' "$SECONDS" "$*"; }

# numavm_fail TEXT: reports a failed check and counts it in numavm_failures; the flow goes on.
numavm_fail() {
    echo "FAIL: $*"
    numavm_failures=$((numavm_failures + 1))
}

# numavm_nodes: the guest's NUMA nodes with their CPUs ("node0=0-1 node1=2-3 ").
numavm_nodes() {
    local n
    for n in /sys/devices/system/node/node[0-9]*; do printf '%s=%s ' "${n##*/}" "$(cat "$n/cpulist")"; done
}

# numavm_crictl SOCKET TIMEOUT: the harness's crictl command line for the CRI server on SOCKET,
# TIMEOUT per call (one word list, for the Python checkers' --crictl).
numavm_crictl() { printf '%s\n' "$IT_BIN/crictl --config $IT_WORK/crictl.yaml --runtime-endpoint unix://$1 --timeout $2"; }

# numavm_shim HOST:PORT SOCKET [TIMEOUT]: the numa-shim numavm_check and numavm_placed look at:
# its metrics endpoint (with /placement), its CRI socket and the crictl timeout (default 120s).
numavm_shim() {
    numavm_metrics=$1
    numavm_socket=$2
    numavm_timeout=${3:-120s}
}

# numavm_check ARGS...: numa_check.py ARGS (check, same, snapshot, numastat ...) against the
# numa-shim of numavm_shim: the kernel's cgroup files and /proc against its /placement.
numavm_check() {
    python3 "$IT_REPO/integration/numa-vm/numa_check.py" --placement "http://$numavm_metrics" \
        --crictl "$(numavm_crictl "$numavm_socket" "$numavm_timeout")" "$@"
}

# numavm_placed CONTAINER: "CPUS NODES" of the container named CONTAINER as the /placement of
# numavm_shim's numa-shim has it (NODES "-" when it sets no memory nodes).
numavm_placed() {
    python3 -c '
import json, sys, urllib.request
v = json.load(urllib.request.urlopen(sys.argv[1]))
c = [c for p in v["pods"] for c in p["containers"] if c["name"] == sys.argv[2]][0]
print(c["cpus"], c.get("memoryNodes") or "-")' "http://$numavm_metrics/placement" "$1"
}

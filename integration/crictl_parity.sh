#!/usr/bin/env bash
# crictl parity: runs the same crictl sequence against the private runtime directly and through
# `numa-shim serve`, normalises ids/times (lib/normalize.py) and diffs every step. Any difference
# fails. Prints `N passed, N failed` (one per step).
#
#   integration/crictl_parity.sh            direct vs numa-shim
#   integration/crictl_parity.sh --self     direct vs direct (checks the normalisation is stable)
#
# Uses the runtime named by NUMA_SHIM_IT_CONTAINERD (test-all.sh) or starts its own (lib/parity.sh;
# IT_RUNTIME, IT_CONTAINERD_VERSION: lib/runtime.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/parity.sh
source "$here/lib/parity.sh"

mode=${1:-shim}
out=$IT_WORK/parity/$IT_CG
parity_up "$out"

# The sequence. Pod and container configs are written once and used for both runs.
cat >"$out/pod.json" <<EOF
{"metadata": {"name": "parity", "namespace": "numa-shim-it", "uid": "parity-uid", "attempt": 0},
 "log_directory": "$IT_RUN/logs/parity", "labels": {"app": "parity"},
 "annotations": {"numa-shim.io/test": "parity"},
 "linux": {"cgroup_parent": "/$IT_CG/pod-parity", "security_context": {"namespace_options": {"network": 0}}}}
EOF
cat >"$out/ctr.json" <<EOF
{"metadata": {"name": "work"}, "image": {"image": "$IT_BUSYBOX_IMAGE"},
 "command": ["sleep", "3600"], "log_path": "work.log", "labels": {"role": "work"},
 "linux": {"resources": {"cpu_shares": 256, "memory_limit_in_bytes": 67108864}}}
EOF

# An image no runtime has: CreateContainer fails, and the runtime's error must reach crictl (a
# grpc-go client, strict about how a status arrives) as the runtime sent it.
sed -e "s|$IT_BUSYBOX_IMAGE|localhost/numa-shim-it/missing:1.0|" -e "s|\"name\": \"work\"|\"name\": \"missing\"|" "$out/ctr.json" \
    >"$out/ctr-missing.json"

cat >"$out/flush.json" <<EOF
{"metadata": {"name": "flush", "namespace": "numa-shim-it", "uid": "flush-uid", "attempt": 0},
 "linux": {"cgroup_parent": "/$IT_CG/pod-flush"}}
EOF

# step DIR NAME [--numbers] -- CMD...: runs CMD, keeps stdout+stderr and exit code, normalised.
step() {
    local dir=$1 name=$2 flag=
    shift 2
    [[ $1 == --numbers ]] && flag=--numbers && shift
    [[ $1 == -- ]] && shift
    local rc=0
    "$@" >"$dir/raw-$name" 2>&1 || rc=$?
    # crictl's complaint about the missing /etc/crictl.yaml is not an answer from the runtime.
    grep -v 'does not exist, trying next' "$dir/raw-$name" |
        python3 "$here/lib/normalize.py" "$dir/ids.json" $flag >"$dir/$name"
    echo "exit $rc" >>"$dir/$name"
    printf '%s\n' "$name" >>"$dir/steps"
}

# run_sequence SOCKET DIR: the crictl sequence against one endpoint.
run_sequence() {
    local ep=$1 dir=$2 c pod ctr evpid
    mkdir -p "$dir"
    c=(it_crictl "$ep")
    step "$dir" 01-version -- "${c[@]}" version
    step "$dir" 02-info -- "${c[@]}" info
    step "$dir" 03-images -- "${c[@]}" images
    timeout 60 "$IT_BIN/crictl" --config "$IT_WORK/crictl.yaml" -r "unix://$ep" events -o json \
        >"$dir/raw-events" 2>&1 &
    evpid=$!
    # Give the stream time to be established before the first event.
    sleep 2
    pod=$("${c[@]}" runp "$out/pod.json" 2>/dev/null | tail -1)
    echo "$pod" >"$dir/raw-runp"
    step "$dir" 04-runp -- cat "$dir/raw-runp"
    ctr=$("${c[@]}" create "$pod" "$out/ctr.json" "$out/pod.json" 2>/dev/null | tail -1)
    echo "$ctr" >"$dir/raw-create"
    step "$dir" 05-create -- cat "$dir/raw-create"
    step "$dir" 05b-create-missing-image -- "${c[@]}" create --no-pull "$pod" "$out/ctr-missing.json" "$out/pod.json"
    step "$dir" 06-start -- "${c[@]}" start "$ctr"
    step "$dir" 07-ps -- "${c[@]}" ps -a -o json
    step "$dir" 08-pods -- "${c[@]}" pods -o json
    step "$dir" 09-inspect -- "${c[@]}" inspect "$ctr"
    step "$dir" 10-inspectp -- "${c[@]}" inspectp "$pod"
    step "$dir" 11-exec -- "${c[@]}" exec -s "$ctr" sh -c \
        'echo hello; grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status; cat /sys/fs/cgroup/memory/memory.limit_in_bytes'
    step "$dir" 12-update -- "${c[@]}" update --cpuset-cpus 0 --cpu-quota 50000 --cpu-period 100000 "$ctr"
    # What the kernel applied, read from inside the container (cgroup v1 mounts its own cgroup).
    step "$dir" 13-exec-after-update -- "${c[@]}" exec -s "$ctr" sh -c \
        'cat /sys/fs/cgroup/cpuset/cpuset.cpus /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us'
    step "$dir" 14-inspect-after-update -- "${c[@]}" inspect -o go-template \
        --template '{{json .info.runtimeSpec.linux.resources}}' "$ctr"
    # usageNanoCores is a rate the runtime computes from two CPU samples of the container:
    # containerd 2.x takes them in a background collector every second, or else from the
    # previous stats call (containerd 1.x always the latter). Whether the first call already has
    # two samples depends on timing, so one unrecorded call a second before makes the recorded
    # one have its rate on both sides (seen: present directly, absent through numa-shim).
    "${c[@]}" stats -o json --id "$ctr" >/dev/null 2>&1 || true
    sleep 1
    step "$dir" 15-stats --numbers -- "${c[@]}" stats -o json --id "$ctr"
    step "$dir" 16-stop -- "${c[@]}" stop --timeout 2 "$ctr"
    step "$dir" 17-rm -- "${c[@]}" rm "$ctr"
    step "$dir" 18-stopp -- "${c[@]}" stopp "$pod"
    step "$dir" 19-rmp -- "${c[@]}" rmp "$pod"
    sleep 1
    kill "$evpid" 2>/dev/null || true
    wait "$evpid" 2>/dev/null || true
    # containerd 1.7 feeds all event subscribers from one queue, and the handler of a subscriber
    # that went away still takes one more event (seen: the next run then misses its first event).
    # A throwaway pod's first event goes to it; the rest stay queued and are filtered out above.
    local flush
    flush=$("${c[@]}" runp "$out/flush.json" 2>/dev/null | tail -1)
    "${c[@]}" rmp -f "$flush" >/dev/null 2>&1 || true
    # Keep this run's pod's events and real errors; how crictl reports its own shutdown (ctrl-C)
    # races inside crictl, and other pods' events may be queued from before (see below).
    python3 "$here/lib/events_of.py" parity "$pod" "$ctr" <"$dir/raw-events" | grep -v 'context canceled' \
        >"$dir/raw-events-kept" || true
    step "$dir" 20-events -- cat "$dir/raw-events-kept"
    step "$dir" 21-pods-after -- "${c[@]}" pods -o json
}

it_log "crictl sequence against $IT_RUNTIME directly"
run_sequence "$IT_SOCK" "$out/direct"
if [[ $mode == --self ]]; then
    it_log "crictl sequence against $IT_RUNTIME directly, again (--self)"
    run_sequence "$IT_SOCK" "$out/other"
else
    parity_shim parity-shim
    it_log "crictl sequence through numa-shim ($PARITY_SHIM)"
    run_sequence "$PARITY_SHIM" "$out/other"
    parity_shim_stop parity-shim
fi

passed=0
failed=0
while read -r name; do
    if diff -u "$out/direct/$name" "$out/other/$name" >"$out/$name.diff"; then
        passed=$((passed + 1))
        rm -f "$out/$name.diff"
    else
        failed=$((failed + 1))
        it_log "DIFF in $name:"
        cat "$out/$name.diff" >&2
    fi
done <"$out/direct/steps"
# Events: containerd 1.6 does not implement GetContainerEvents; a runtime that does must show some.
if grep -q 'Unimplemented' "$out/direct/20-events"; then
    it_log "events: the runtime does not implement GetContainerEvents (containerd < 1.7); compared the error only"
elif ! grep -q CONTAINER_CREATED_EVENT "$out/direct/20-events"; then
    it_log "events: no CONTAINER_CREATED_EVENT seen directly"
    failed=$((failed + 1))
fi
it_log "normalised answers in $out/{direct,other}"
echo "crictl-parity: $passed passed, $failed failed"
((failed == 0))

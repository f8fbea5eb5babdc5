#!/bin/bash
# runc as the harness's CRI-O calls it (lib/crio.sh copies this to IT_RUN/bin/runc and names it
# as the runtime handler's runtime_path). Four adjustments to what CRI-O asks, then the real runc:
#
# - oom_score_adj: CRI-O asks for -998 on infra containers and passes on the kubelet's values
#   (-997 for Guaranteed pods); without CAP_SYS_RESOURCE runc cannot lower it below this
#   process's own value and every RunPodSandbox fails. As containerd's restrict_oom_score_adj
#   does, a lower value in the bundle's config.json (create, run) or an exec's process.json is
#   raised to this process's own.
# - capabilities: CRI-O gives a privileged container every capability it knows, and runc cannot
#   grant one outside its own bounding set (this machine lacks CAP_SYS_RESOURCE: "unable to apply
#   caps"). Those are removed from the bundle's config.json, which leaves a privileged container
#   with what this process has, as containerd gives one.
# - kill right after start: CRI-O returns from RunPodSandbox once `runc start` has released the
#   container's init, which may still be runc's own init code (comm `runc:[2:INIT]`), or the
#   container's program before it installed its signal handlers. A SIGTERM that arrives then is
#   lost: taken by runc's init, or dropped because the init of a PID namespace only receives
#   signals it has a handler for. CRI-O then waits for the request's deadline before SIGKILL
#   (seen on this 2-CPU machine under load, with critest specs that stop a pod well under a
#   second after starting it: 5-minute stops). `kill` waits (up to 5 s) until the init is the
#   container's program and, if it is the init of its PID namespace, catches the signal.
# - hugepage limits: the kubelet asks for a limit (0) for every hugepage size the machine has,
#   and CRI-O passes them on when /proc/cgroups lists hugetlb. On this hybrid machine hugetlb is
#   bound to the cgroup2 mount, not to a v1 hierarchy, so runc's v1 manager has no hugetlb
#   cgroup to write them to ("cannot set hugetlb limit: container could not join or create
#   cgroup") and every container of a real kubelet fails to start. With cgroup v1 mounts and no
#   v1 hugetlb hierarchy they are removed from the bundle's config.json (containerd leaves them
#   out there too).
set -euo pipefail

self=$(dirname "$(readlink -f "$0")")
real=
IFS=: read -r -a path <<<"${PATH:-}:/usr/sbin:/usr/bin:/sbin:/bin"
for d in "${path[@]}"; do
    if [[ -n $d && $d != "$self" && -x $d/runc ]]; then
        real=$d/runc
        break
    fi
done
[[ -n $real ]] || {
    echo "runc-for-crio: no runc in PATH" >&2
    exit 127
}

own=$(</proc/self/oom_score_adj)
files=() root='' next='' verb='' id=''
for arg in "$@"; do
    case $next in
    bundle) files+=("$arg/config.json") ;;
    process) files+=("$arg") ;;
    root) root=$arg ;;
    skip) ;;
    esac
    if [[ -n $next ]]; then
        next=
        continue
    fi
    case $arg in
    -b | --bundle) next=bundle ;;
    --bundle=*) files+=("${arg#*=}/config.json") ;;
    -p | --process) next=process ;;
    --process=*) files+=("${arg#*=}") ;;
    --root) next=root ;;
    --root=*) root=${arg#*=} ;;
    # Global flags with a value, so that the value is not taken for the command.
    --log | --log-format | --criu | --rootless) next=skip ;;
    -*) ;;
    *)
        if [[ -z $verb ]]; then
            verb=$arg
        elif [[ -z $id ]]; then
            id=$arg
        fi
        ;;
    esac
done

# The capabilities (by number) missing from this process's bounding set.
caps=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
    NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO
    SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME
    SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG
    WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE)
bounding=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
missing=()
for i in "${!caps[@]}"; do
    (((bounding >> i) & 1)) || missing+=("CAP_${caps[i]}")
done

# hugetlb_v1_missing: cgroup v1 hierarchies are mounted, none of them with hugetlb.
hugetlb_v1_missing() {
    local opts
    opts=$(awk '$3 == "cgroup" {print $4}' /proc/mounts)
    [[ -n $opts ]] && ! grep -qE '(^|,)hugetlb(,|$)' <<<"$opts"
}
drop_hugepages=no
hugetlb_v1_missing && drop_hugepages=yes

for f in "${files[@]}"; do
    [[ -f $f ]] || continue
    if [[ $drop_hugepages == yes ]] && grep -q '"hugepageLimits"' "$f"; then
        sed -z -i -E -e 's/"hugepageLimits": ?\[[^]]*\][[:space:]]*,[[:space:]]*//' \
            -e 's/,[[:space:]]*"hugepageLimits": ?\[[^]]*\]//' "$f"
    fi
    if v=$(grep -oE '"oomScoreAdj": ?-?[0-9]+' "$f" | grep -oE -- '-?[0-9]+$') && ((v < own)); then
        sed -i -E "s/(\"oomScoreAdj\": ?)-?[0-9]+/\\1$own/" "$f"
    fi
    for cap in "${missing[@]}"; do
        sed -i -e "s/\"$cap\",//g" -e "s/,\"$cap\"//g" -e "s/\"$cap\"//g" "$f"
    done
done

# ready PID SIGNAL: whether PID can take SIGNAL now: it is no longer runc's init, and if it is
# the init of its PID namespace (which only receives signals it has a handler for) it has one.
ready() {
    local pid=$1 sig=$2 status nspid caught
    status=$(cat "/proc/$pid/status" 2>/dev/null) || return 0
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "runc:[2:INIT]" ]] && return 1
    nspid=$(awk '/^NSpid:/ {print $NF}' <<<"$status")
    [[ $nspid == 1 && $sig =~ ^[0-9]+$ && $sig != 9 ]] || return 0
    caught=$((16#$(awk '/^SigCgt:/ {print $2}' <<<"$status")))
    (((caught >> (sig - 1)) & 1))
}

if [[ $verb == kill && -n $id ]]; then
    roots=()
    [[ -n $root ]] && roots=(--root "$root")
    state=$("$real" "${roots[@]}" state "$id" 2>/dev/null) || state=
    pid=$(grep -oE '"pid": ?[0-9]+' <<<"$state" | grep -oE '[0-9]+$') || pid=
    sig=${*: -1}
    case ${sig#SIG} in
    TERM) sig=15 ;;
    INT) sig=2 ;;
    HUP) sig=1 ;;
    QUIT) sig=3 ;;
    KILL) sig=9 ;;
    esac
    # Only a started container: one created and never started stays runc's init for good.
    if [[ -n $pid ]] && grep -qE '"status": ?"running"' <<<"$state"; then
        for ((i = 0; i < 50; i++)); do
            ready "$pid" "$sig" && break
            sleep 0.1
        done
    fi
fi
exec "$real" "$@"

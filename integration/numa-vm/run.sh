#!/usr/bin/env bash
# Boots a multi-NUMA guest under qemu's TCG emulator (this machine kind has no usable KVM), runs
# one command inside it and powers it off, whatever happens:
#
#   integration/numa-vm/run.sh [--timeout SECS] SHAPE -- CMD [ARGS...]
#
# SHAPE (vCPUs numbered socket, core, thread; 1 GiB of memory per NUMA node, 2 GiB in 2s):
#   2n   2 sockets x 1 core x 2 threads, 2 NUMA nodes (one per socket)       CPUs 0-1 | 2-3
#   4n   4 sockets x 1 core x 2 threads, 4 NUMA nodes                        CPUs 0-1 | 2-3 | 4-5 | 6-7
#   snc  2 sockets x 2 cores x 2 threads, 2 NUMA nodes per socket (sub-NUMA clustering), as 4n
#   2s   2 sockets x 2 cores x 2 threads, 2 NUMA nodes (one per socket)      CPUs 0-3 | 4-7
#        (4 vCPUs per node: a pod-level budget with an exclusive container and a sidecar that
#        grows on its node with CPU 0 reserved; 2 GiB per node for the control plane in the guest)
#
# The guest runs Debian's kernel (linux-image-amd64, from /boot) with a small busybox initramfs
# (built here, cached in integration/.work/numa-vm), sees the host's root file system read-only
# over virtio-9p under a tmpfs overlay (so the host's containerd, runc, crictl, python3 and this
# worktree's numa-shim build run unchanged), and has loopback only (no network interface). CMD runs
# as root in the repository's top folder with cgroup v2 mounted; a read-write share is mounted at
# /mnt/numa-vm (exported there as NUMAVM_OUT) for results. Variables named NUMAVM_*, IT_*,
# NUMA_SHIM_* and CARGO_TARGET_DIR are passed in.
#
# Prints the guest's console (CMD's output among it) and exits with CMD's exit status; 124 when
# the guest did not report one within the timeout (default 900 s, NUMAVM_TIMEOUT), after which
# qemu is killed. The share (CMD's output, its exit status, anything CMD left in NUMAVM_OUT) is
# kept in integration/.work/numa-vm/last-SHAPE (last-SHAPE-TAG with NUMAVM_TAG). Needs root;
# installs the Debian packages it needs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/../lib/common.sh"

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
    exit 2
}
timeout=${NUMAVM_TIMEOUT:-900}
while (($#)); do
    case $1 in
    --timeout) timeout=$2 && shift 2 ;;
    -h | --help) usage ;;
    *) break ;;
    esac
done
if (($# < 3)) || [[ $2 != -- ]]; then usage; fi
shape=$1
shift 2

# The qemu machine of each shape: -smp and -numa arguments.
qemu_shape=()
# shape_args SOCKETS CORES THREADS NODES [GIB_PER_NODE]: GIB_PER_NODE (default 1) GiB per node,
# vCPUs split evenly over the nodes in order.
shape_args() {
    local sockets=$1 cores=$2 threads=$3 nodes=$4 gib=${5:-1} cpus per n
    cpus=$((sockets * cores * threads))
    per=$((cpus / nodes))
    qemu_shape=(-smp "$cpus,sockets=$sockets,cores=$cores,threads=$threads" -m "$((nodes * gib))G")
    for ((n = 0; n < nodes; n++)); do
        qemu_shape+=(-object "memory-backend-ram,id=m$n,size=${gib}G"
            -numa "node,nodeid=$n,cpus=$((n * per))-$((n * per + per - 1)),memdev=m$n")
    done
}
case $shape in
2n) shape_args 2 1 2 2 ;;
4n) shape_args 4 1 2 4 ;;
snc) shape_args 2 2 2 4 ;;
2s) shape_args 2 2 2 2 2 ;;
*) it_die "unknown shape '$shape' (2n, 4n, snc or 2s)" ;;
esac

# Debian packages: the emulator, the guest kernel, the initramfs's busybox and cpio.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
compgen -G '/boot/vmlinuz-*' >/dev/null || need+=(linux-image-amd64)
[[ -x /bin/busybox ]] && /bin/busybox --list | grep -qx insmod || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
if ((${#need[@]})); then
    it_log "numa-vm: installing Debian packages ${need[*]}"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }; then
        it_die "numa-vm needs the Debian packages ${need[*]} and could not install them: run apt-get install ${need[*]}"
    fi
fi

# The guest kernel: the newest /boot/vmlinuz-* with its modules (NUMAVM_KERNEL=VERSION picks one).
kver=${NUMAVM_KERNEL:-}
if [[ -z $kver ]]; then
    for k in $(find /boot -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V); do
        [[ -d /lib/modules/$k/kernel ]] && kver=$k
    done
fi
[[ -n $kver && -r /boot/vmlinuz-$kver && -d /lib/modules/$kver ]] ||
    it_die "no guest kernel with its modules in /boot and /lib/modules: apt-get install linux-image-amd64"

# The initramfs: busybox, /init and the modules that reach the host's root, rebuilt when /init
# or the kernel changes.
vmwork=$IT_WORK/numa-vm
mkdir -p "$vmwork"
initrd=$vmwork/initramfs-$kver.cpio.gz
modules=(virtio_pci_legacy_dev virtio_pci_modern_dev virtio_ring virtio virtio_pci 9pnet 9pnet_virtio netfs fscache 9p overlay)
if [[ ! -s $initrd || $initrd -ot $here/init || $initrd -ot /boot/vmlinuz-$kver ]]; then
    it_log "numa-vm: building the initramfs for kernel $kver"
    tree=$(mktemp -d)
    mkdir -p "$tree"/{bin,proc,sys,dev,modules}
    cp /bin/busybox "$tree/bin/busybox"
    cp "$here/init" "$tree/init"
    for m in "${modules[@]}"; do
        f=$(modinfo -k "$kver" -n "$m" 2>/dev/null) || it_die "kernel $kver has no module $m"
        case $f in
        *.ko) cp "$f" "$tree/modules/$m.ko" ;;
        *.ko.xz) xz -dc "$f" >"$tree/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$f" >"$tree/modules/$m.ko" ;;
        *) it_die "module $m of kernel $kver is $f: not a loadable file" ;;
        esac
    done
    printf '%s\n' "${modules[@]}" >"$tree/modules.order"
    (cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -9) >"$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$tree"
fi

# The test images (integration/lib/image.sh) are built here, where it is fast; the guest sees them.
# shellcheck source=integration/lib/image.sh
source "$here/../lib/image.sh"
it_build_images >/dev/null

# The share: the guest's second stage, the command, its environment and folder in; output out.
share=$vmwork/last-$shape${NUMAVM_TAG:+-$NUMAVM_TAG}
rm -rf "$share"
mkdir -p "$share"
cp "$here/guest.sh" "$share/guest.sh"
printf '%q ' "$@" >"$share/cmd"
echo >>"$share/cmd"
pwd >"$share/cwd"
{
    echo "export PATH=$(printf '%q' "$PATH") NUMAVM_OUT=/mnt/numa-vm NUMAVM_SHAPE=$shape"
    while IFS='=' read -r name _; do
        [[ $name =~ ^(NUMAVM_[A-Z0-9_]+|IT_[A-Z0-9_]+|NUMA_SHIM_[A-Z0-9_]+|CARGO_TARGET_DIR)$ ]] || continue
        [[ $name == NUMAVM_OUT || $name == NUMAVM_SHAPE ]] && continue
        printf 'export %s=%q\n' "$name" "${!name}"
    done < <(env)
} >"$share/env"

qemu_pid=
watchdog=
# Powers the guest off if it is still running: only the qemu this script started, by its PID.
# shellcheck disable=SC2317 # called by the EXIT trap
stop_guest() {
    if [[ -n $watchdog ]]; then kill "$watchdog" 2>/dev/null || true; fi
    if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
        it_log "numa-vm: stopping qemu (pid $qemu_pid)"
        kill -TERM "$qemu_pid" 2>/dev/null || true
        sleep 1
        kill -KILL "$qemu_pid" 2>/dev/null || true
    fi
    return 0
}
trap stop_guest EXIT
trap "exit 143" TERM INT

it_log "numa-vm: booting a $shape guest (kernel $kver, ${qemu_shape[*]:0:4}; timeout ${timeout}s)"
start=$(date +%s)
qemu-system-x86_64 -name "numa-vm-$shape" -accel tcg,thread=single -cpu max,vendor=GenuineIntel \
    "${qemu_shape[@]}" -kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3" \
    -display none -monitor none -serial stdio -no-reboot -nic none \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$share,mount_tag=share,security_model=none,multidevs=remap" </dev/null &
qemu_pid=$!
(
    # Its sleep holds none of this script's output open and ends with the watchdog.
    sleep "$timeout" >/dev/null 2>&1 &
    trap 'kill $! 2>/dev/null; exit 0' TERM
    wait $!
    it_log "numa-vm: timeout after ${timeout}s"
    kill -TERM "$qemu_pid" 2>/dev/null
) &
watchdog=$!
wait "$qemu_pid" || true
qemu_pid=
secs=$(($(date +%s) - start))
if [[ ! -s $share/rc ]]; then
    it_log "numa-vm: the $shape guest ended after ${secs}s without reporting an exit status (timeout or crash; console above)"
    exit 124
fi
rc=$(cat "$share/rc")
it_log "numa-vm: $shape guest: '$*' exited $rc after ${secs}s wall (qemu start to poweroff); output in $share"
exit "$rc"

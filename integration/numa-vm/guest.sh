#!/usr/bin/env bash
# The guest's second stage, run by the initramfs /init in a chroot of the host's root (read-only
# 9p under a tmpfs overlay), from the share mounted at /mnt/numa-vm: mounts what a node has (tmpfs
# /run, /tmp and /var/lib/kubelet, cgroup v2 with its controllers, /dev/pts, /dev/shm), brings up loopback (the
# guest has no other interface), then runs the share's `cmd` in the share's `cwd` with the
# share's `env`, its output to the console and to the share's `output`, its exit status to the
# share's `rc`.
share=/mnt/numa-vm
mount -t tmpfs -o mode=0755 run /run
mount -t tmpfs -o mode=1777 tmp /tmp
# The kubelet's compiled-in directories (its device manager's /var/lib/kubelet/device-plugins):
# the guest's own, not the host's live ones seen through 9p, which the host's test harness
# moves aside and back while a guest runs (a kubelet in the guest then failed to read the
# directory and exited).
mkdir -p /var/lib/kubelet
mount -t tmpfs -o mode=0755 kubelet /var/lib/kubelet
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
ln -sfn /proc/self/fd /dev/fd
# Every controller cgroup v2 offers, for the runtime's cgroups below the root.
read -ra controllers </sys/fs/cgroup/cgroup.controllers
for c in "${controllers[@]}"; do
    echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
ip link set lo up
hostname numa-vm
# shellcheck source=/dev/null
source "$share/env"
cd "$(cat "$share/cwd")" || exit 1
rc=0
bash "$share/cmd" > >(tee "$share/output") 2>&1 || rc=$?
sleep 0.2 # tee finishes writing
echo "$rc" >"$share/rc"
sync

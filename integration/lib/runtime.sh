# shellcheck shell=bash
# Picks the private runtime the harness runs: IT_RUNTIME=containerd (default; Debian's 1.6, or
# IT_CONTAINERD_VERSION=v1.7.29 / v2.4.2 built by install-deps.sh) or IT_RUNTIME=crio (CRI-O
# IT_CRIO_VERSION, default v1.36.3). Source after common.sh and image.sh; it sources the
# runtime's library, which defines it_up, it_teardown, it_shim_start and IT_SOCK.
IT_RUNTIME=${IT_RUNTIME:-containerd}
export IT_RUNTIME
case $IT_RUNTIME in
containerd)
    # shellcheck source=integration/lib/containerd.sh
    source "$(dirname "${BASH_SOURCE[0]}")/containerd.sh"
    ;;
crio)
    # shellcheck source=integration/lib/crio.sh
    source "$(dirname "${BASH_SOURCE[0]}")/crio.sh"
    ;;
*) it_die "IT_RUNTIME=$IT_RUNTIME: expected containerd or crio" ;;
esac

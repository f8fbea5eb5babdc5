#!/usr/bin/env bash
# The control-plane stage of the suite: starts the loopback control plane (lib/apiserver.sh),
# runs numa-shim's API server tests against it (`cargo test --test apiserver -- --ignored`) and
# the cluster tests (`cargo test --test cluster -- --ignored`: a real kubelet registered in
# API-server mode with numa-shim as its runtime endpoint, pods from `kubectl apply`; dra::
# has the scheduler allocate claims from the sample DRA driver and the kubelet prepare them),
# validates packaging/kubernetes against the real API server (kubectl apply --dry-run=server,
# numa-shim's RBAC with kubectl auth can-i), runs the sample DRA driver against it
# (dra-driver/check.sh), stops it, and starts and stops it once more (the
# harness must run twice in a row). Prints one line per check and "N passed, N failed".
# Starts the private containerd of lib/containerd.sh too when NUMA_SHIM_IT_CONTAINERD is not set.
# Needs root and integration/install-deps.sh; export your own IT_RUN.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/apiserver.sh
source "$here/lib/apiserver.sh"
# shellcheck source=integration/lib/image.sh
source "$here/lib/image.sh"
# shellcheck source=integration/lib/containerd.sh
source "$here/lib/containerd.sh"
# shellcheck source=integration/lib/kubelet.sh
source "$here/lib/kubelet.sh"
# shellcheck source=integration/lib/checks.sh
source "$here/lib/checks.sh"
cd "$IT_REPO" || exit 1

WORK=$(mktemp -d)
# Run alone, it brings up the private containerd too (test-all.sh has it up already).
own_containerd=0
cleanup() {
    it_kubelet_teardown
    it_cp_down
    ((own_containerd)) && it_teardown
    rm -rf "$WORK"
}
trap cleanup EXIT
trap "exit 143" TERM INT

dry_run() {
    it_kubectl apply --dry-run=server -f "$1"
}

# A DaemonSet with a field the API does not know: the server's field validation refuses it.
broken_daemonset() {
    sed 's/^      hostNetwork: true$/      hostNetwork: true\n      hostNetworkk: true/' \
        packaging/kubernetes/daemonset-containerd.yaml >"$WORK/broken.yaml"
    ! cmp -s "$WORK/broken.yaml" packaging/kubernetes/daemonset-containerd.yaml &&
        it_fails_as_expected it_kubectl apply --dry-run=server --validate=strict -f "$WORK/broken.yaml"
}

# can_i YES|NO VERB RESOURCE: what kube-system/numa-shim may do, as the RBAC of the manifest grants.
can_i() {
    local want=$1 got
    shift
    got=$(it_kubectl auth can-i --as system:serviceaccount:kube-system:numa-shim "$@" 2>/dev/null)
    echo "can-i $*: $got"
    [[ $got == "$want" ]]
}

rbac() {
    can_i yes list pods --all-namespaces &&
        can_i yes watch pods --all-namespaces &&
        can_i yes get pods -n default &&
        can_i yes patch pods --subresource=status -n default &&
        can_i yes create events -n default &&
        can_i yes patch events -n default &&
        can_i yes get resourceclaims.resource.k8s.io -n default &&
        can_i yes list resourceclaims.resource.k8s.io --all-namespaces &&
        can_i yes list resourceslices.resource.k8s.io &&
        can_i yes get resourceslices.resource.k8s.io &&
        can_i no update resourceclaims.resource.k8s.io -n default &&
        can_i no update resourceclaims.resource.k8s.io --subresource=status -n default &&
        can_i no create resourceslices.resource.k8s.io &&
        can_i no delete pods -n default &&
        can_i no update pods -n default &&
        can_i no get secrets -n kube-system &&
        can_i no create pods -n default
}

# The RBAC objects of both DaemonSet manifests are the same objects.
same_rbac() {
    local f
    for f in containerd crio; do
        it_kubectl apply --dry-run=client -o yaml -l app.kubernetes.io/component=rbac \
            -f "packaging/kubernetes/daemonset-$f.yaml" >"$WORK/rbac-$f.yaml" || return 1
    done
    grep -c '^  kind:' "$WORK/rbac-containerd.yaml"
    diff "$WORK/rbac-containerd.yaml" "$WORK/rbac-crio.yaml"
}

# After a 20 s API server outage the control plane serves a new namespace within 30 s (it needed
# 80-95 s while the controller-manager lived through the outage; see it_cp_start_apiserver).
after_outage() {
    local ns=it-after-outage i
    it_cp_stop_apiserver && sleep 20 && it_cp_start_apiserver && it_kubectl create namespace "$ns" ||
        return 1
    for ((i = 0; i < 150; i++)); do
        if it_kubectl -n "$ns" get serviceaccount default; then
            echo "default ServiceAccount after $((i / 5)).$((i % 5 * 2)) s"
            it_kubectl delete namespace "$ns" --wait=false
            return 0
        fi
        sleep 0.2
    done
    return 1
}

again() {
    it_cp_down && it_cp_up && it_kubectl get --raw /readyz && echo && it_cp_down && [[ ! -e $IT_CP ]] &&
        ! ls "$IT_RUN"/pids/cp-* 2>/dev/null
}

if [[ -z ${NUMA_SHIM_IT_CONTAINERD:-} ]]; then
    own_containerd=1
    it_up || exit 1
    export NUMA_SHIM_IT_CONTAINERD=$IT_SOCK
fi
it_cp_up || exit 1
export NUMA_SHIM_IT_CP=$IT_CP NUMA_SHIM_IT_CONTROLPLANE=$here/controlplane.sh
export NUMA_SHIM_IT_CRICTL=$IT_BIN/crictl NUMA_SHIM_IT_RUN=$IT_RUN NUMA_SHIM_IT_NODE_NAME=$IT_NODE_NAME
export NUMA_SHIM_IT_BUSYBOX_IMAGE=$IT_BUSYBOX_IMAGE
cargo build --quiet --bins || exit 1
it_check "cargo test --test apiserver (real kube-apiserver $IT_K8S_VERSION, etcd $IT_ETCD_VERSION)" \
    cargo test --test apiserver -- --ignored --test-threads=1
it_check "cargo test --test cluster (kubelet $IT_KUBELET_VERSION in API-server mode behind numa-shim)" \
    cargo test --test cluster -- --ignored --test-threads=1
for f in packaging/kubernetes/*.yaml; do
    it_check "kubectl apply --dry-run=server $f" dry_run "$f"
done
it_check "a DaemonSet with an unknown field is refused (negative control)" broken_daemonset
it_check "the sample DRA driver publishes its ResourceSlice with the standard NUMA node, its own NUMA node and PCIe root attributes" \
    "$here/dra-driver/check.sh"
it_check "numa-shim's RBAC: exactly list/watch/get pods, patch pods/status, create/patch events, get/list DRA claims and slices" rbac
it_check "both DaemonSet manifests carry the same RBAC" same_rbac
it_check "a new namespace gets its ServiceAccount within 30 s of an API server outage" after_outage
it_check "the control plane stops by PID and starts again" again
it_checks_done apiserver-tests

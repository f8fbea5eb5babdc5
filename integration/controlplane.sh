#!/usr/bin/env bash
# controlplane.sh COMMAND: the loopback control plane of lib/apiserver.sh, for tests and by hand.
# Always export your own IT_RUN first (e.g. IT_RUN=/run/nsit-me).
#
#   up                 PKI, etcd, kube-apiserver (+ controller-manager, scheduler when built),
#                      kubeconfigs in $IT_RUN/cp, numa-shim's RBAC; prints the admin kubeconfig
#   down               stops all of it by PID and removes $IT_RUN/cp
#   stop-apiserver     stops kube-apiserver only (etcd keeps its data)
#   start-apiserver    starts it again on the same port and waits for /readyz
#   token [ARGS...]    prints a new token of kube-system/numa-shim (kubectl create token ARGS)
#   etcd PATH JSON     one call of etcd's JSON gateway, e.g. etcd /v3/kv/put '{"key":"..."}'
#   kubectl ARGS...    kubectl as the admin
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=integration/lib/apiserver.sh
source "$here/lib/apiserver.sh"

cmd=${1:-}
shift || true
case $cmd in
up)
    # A start that fails half-way leaves nothing running.
    down_on_failure() {
        local rc=$?
        ((rc == 0)) || it_cp_down
        return "$rc"
    }
    trap down_on_failure EXIT
    it_cp_up
    echo "$IT_CP/admin.kubeconfig"
    ;;
down) it_cp_down ;;
stop-apiserver) it_cp_stop_apiserver ;;
start-apiserver) it_cp_start_apiserver ;;
token) it_cp_numa_shim_token "$@" ;;
etcd) it_etcd_request "$@" ;;
kubectl) it_kubectl "$@" ;;
*)
    sed -n '2,13p' "$0" >&2
    exit 2
    ;;
esac

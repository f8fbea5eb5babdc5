# shellcheck shell=bash
# The smallest real control plane, on 127.0.0.1 only: etcd, kube-apiserver and (when built)
# kube-controller-manager and kube-scheduler, with a throwaway PKI (lib/pki.sh) and kubeconfigs
# for an admin, the kubelet and numa-shim. Source after common.sh; call `it_cp_up`, and
# `it_cp_down` (or the containerd harness's it_teardown, which also stops what is recorded in
# IT_RUN/pids) when done.
#
# Everything lives under IT_CP (data dirs, certificates, kubeconfigs); PIDs are recorded in
# IT_RUN/pids/cp-*, and only those processes are ever signalled, each by PID after checking that
# its command line names IT_RUN.
#
# Authorization is the production one: Node,RBAC with the NodeRestriction admission plugin, so
# the kubelet's client certificate (system:node:<node> in system:nodes) registers its Node and
# writes only its own pods' status. numa-shim runs as the ServiceAccount kube-system/numa-shim
# with the RBAC of packaging/kubernetes/daemonset-containerd.yaml (objects labelled
# app.kubernetes.io/component=rbac), through a token from the TokenRequest API.

# shellcheck source=integration/lib/pki.sh
source "$(dirname "${BASH_SOURCE[0]}")/pki.sh"

IT_ETCD_VERSION=${IT_ETCD_VERSION:-v3.6.16}
IT_K8S_VERSION=${IT_K8S_VERSION:-v1.37.2}
IT_CP=$IT_RUN/cp
IT_CP_LOGS=$IT_WORK/logs/${IT_CG:?source common.sh first}
# The Node name the kubelet registers (its default: the hostname, lowercased).
IT_NODE_NAME=${IT_NODE_NAME:-$(tr '[:upper:]' '[:lower:]' </proc/sys/kernel/hostname)}
IT_KUBECTL=$IT_CACHE/bin/kubectl-$IT_K8S_VERSION
export IT_ETCD_VERSION IT_K8S_VERSION IT_CP IT_CP_LOGS IT_NODE_NAME IT_KUBECTL

# it_kubectl ARGS...: kubectl as the cluster admin.
it_kubectl() {
    "$IT_KUBECTL" --kubeconfig "$IT_CP/admin.kubeconfig" "$@"
}

# _it_cp_kubeconfig FILE USER-LINES...: a kubeconfig for the loopback API server.
_it_cp_kubeconfig() {
    local file=$1 line
    shift
    {
        cat <<EOF
apiVersion: v1
kind: Config
current-context: it
clusters:
- name: it
  cluster:
    server: https://127.0.0.1:$(cat "$IT_CP/apiserver.port")
    certificate-authority: $IT_CP/pki/ca.crt
contexts:
- name: it
  context: {cluster: it, user: it}
users:
- name: it
  user:
EOF
        for line in "$@"; do
            echo "    $line"
        done
    } >"$file"
}

# _it_cp_cert_kubeconfig FILE NAME: a kubeconfig authenticating with pki/NAME.{crt,key}.
_it_cp_cert_kubeconfig() {
    _it_cp_kubeconfig "$1" "client-certificate: $IT_CP/pki/$2.crt" "client-key: $IT_CP/pki/$2.key"
}

# _it_cp_wait WHAT SECONDS CMD...: retries CMD until it succeeds; SECONDS times IT_CP_WAIT_FACTOR
# (default 1; an emulated guest is about 20 times slower).
_it_cp_wait() {
    local what=$1 secs=$(($2 * ${IT_CP_WAIT_FACTOR:-1})) i
    shift 2
    for ((i = 0; i < secs * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    it_die "$what not ready after ${secs}s (logs in $IT_CP_LOGS)"
}

_it_cp_etcd_healthy() {
    curl -sf --cacert "$IT_CP/pki/ca.crt" --cert "$IT_CP/pki/apiserver-etcd-client.crt" \
        --key "$IT_CP/pki/apiserver-etcd-client.key" \
        "https://127.0.0.1:$(cat "$IT_CP/etcd.port")/health" | grep -q '"health":"true"'
}

_it_cp_apiserver_ready() {
    curl -sf --cacert "$IT_CP/pki/ca.crt" --cert "$IT_CP/pki/admin.crt" --key "$IT_CP/pki/admin.key" \
        "https://127.0.0.1:$(cat "$IT_CP/apiserver.port")/readyz" | grep -qx ok
}

# it_etcd_request PATH JSON: one call of etcd's JSON gateway (e.g. /v3/kv/compaction).
it_etcd_request() {
    curl -sf --cacert "$IT_CP/pki/ca.crt" --cert "$IT_CP/pki/apiserver-etcd-client.crt" \
        --key "$IT_CP/pki/apiserver-etcd-client.key" -X POST -d "$2" \
        "https://127.0.0.1:$(cat "$IT_CP/etcd.port")$1"
}

# _it_cp_spawn NAME CMD...: starts CMD in the background, logging to IT_CP_LOGS/NAME.log.
_it_cp_spawn() {
    local name=$1
    shift
    "$@" >>"$IT_CP_LOGS/$name.log" 2>&1 &
    echo $! >"$IT_RUN/pids/cp-$name"
    it_log "$name pid $! (log $IT_CP_LOGS/$name.log)"
}

_it_cp_start_etcd() {
    local port peer
    port=$(cat "$IT_CP/etcd.port")
    peer=$(cat "$IT_CP/etcd-peer.port")
    # --unsafe-no-fsync: a throwaway single-member test store on a shared machine.
    _it_cp_spawn etcd "$IT_CACHE/bin/etcd-$IT_ETCD_VERSION" --name it --data-dir "$IT_CP/etcd" \
        --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://127.0.0.1:$port" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "it=http://127.0.0.1:$peer" --initial-cluster-state new \
        --cert-file "$IT_CP/pki/etcd-server.crt" --key-file "$IT_CP/pki/etcd-server.key" \
        --trusted-ca-file "$IT_CP/pki/ca.crt" --client-cert-auth \
        --listen-metrics-urls "" --log-level warn --unsafe-no-fsync
    _it_cp_wait etcd 30 _it_cp_etcd_healthy
}

# it_cp_start_apiserver: starts kube-apiserver again on its port after it_cp_stop_apiserver,
# waits for /readyz, then restarts the controllers (when they run). A controller-manager that
# lived through the outage took 80-95 s here to serve a new namespace again (its watches back
# off, and the first ones after /readyz are refused until RBAC is loaded); tests waiting for a
# default ServiceAccount ran out of time (stop 17's CI run).
it_cp_start_apiserver() {
    _it_cp_start_apiserver
    if [[ -f $IT_RUN/pids/cp-controller-manager || -f $IT_RUN/pids/cp-scheduler ]]; then
        _it_cp_stop_controllers
        _it_cp_start_controllers
    fi
}

_it_cp_start_apiserver() {
    local p=$IT_CP/pki
    _it_cp_spawn apiserver "$IT_CACHE/bin/kube-apiserver-$IT_K8S_VERSION" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
        --secure-port "$(cat "$IT_CP/apiserver.port")" --cert-dir "$IT_CP/apiserver-certs" \
        --endpoint-reconciler-type none \
        --etcd-servers "https://127.0.0.1:$(cat "$IT_CP/etcd.port")" \
        --etcd-cafile "$p/ca.crt" --etcd-certfile "$p/apiserver-etcd-client.crt" \
        --etcd-keyfile "$p/apiserver-etcd-client.key" \
        --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" \
        --tls-private-key-file "$p/apiserver.key" \
        --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$p/apiserver-kubelet-client.key" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
        --service-cluster-ip-range 10.96.0.0/24 \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --profiling=false --v=1
    _it_cp_wait kube-apiserver 90 _it_cp_apiserver_ready
}

# it_cp_stop_apiserver: stops kube-apiserver (etcd and the rest keep running).
it_cp_stop_apiserver() {
    [[ -f $IT_RUN/pids/cp-apiserver ]] || return 0
    _it_cp_kill "$(cat "$IT_RUN/pids/cp-apiserver")"
    rm -f "$IT_RUN/pids/cp-apiserver"
}

_it_cp_start_controllers() {
    local p=$IT_CP/pki kcm=$IT_CACHE/bin/kube-controller-manager-$IT_K8S_VERSION
    local sched=$IT_CACHE/bin/kube-scheduler-$IT_K8S_VERSION
    if [[ -x $kcm ]]; then
        _it_cp_spawn controller-manager "$kcm" --kubeconfig "$IT_CP/controller-manager.kubeconfig" \
            --authentication-kubeconfig "$IT_CP/controller-manager.kubeconfig" \
            --authorization-kubeconfig "$IT_CP/controller-manager.kubeconfig" \
            --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
            --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
            --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
            --use-service-account-credentials=true --v=1
    fi
    if [[ -x $sched ]]; then
        _it_cp_spawn scheduler "$sched" --kubeconfig "$IT_CP/scheduler.kubeconfig" \
            --authentication-kubeconfig "$IT_CP/scheduler.kubeconfig" \
            --authorization-kubeconfig "$IT_CP/scheduler.kubeconfig" \
            --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false --v=1
    fi
    [[ -x $kcm ]] && _it_cp_wait "controller-manager (a new namespace's default ServiceAccount)" \
        60 _it_cp_serviceaccounts_made
    return 0
}

_it_cp_stop_controllers() {
    local name
    for name in scheduler controller-manager; do
        [[ -f $IT_RUN/pids/cp-$name ]] || continue
        _it_cp_kill "$(cat "$IT_RUN/pids/cp-$name")"
        rm -f "$IT_RUN/pids/cp-$name"
    done
}

# _it_cp_serviceaccounts_made: the controller-manager gives a new namespace its default
# ServiceAccount (what every pod of a test needs); the probe namespace goes again.
_it_cp_serviceaccounts_made() {
    local ns=it-probe-$$ ok=1
    it_kubectl get namespace "$ns" >/dev/null 2>&1 || it_kubectl create namespace "$ns" || return 1
    it_kubectl -n "$ns" get serviceaccount default || ok=0
    ((ok)) && it_kubectl delete namespace "$ns" --wait=false
    ((ok))
}

# it_cp_numa_shim_token [ARGS...]: a fresh token of kube-system/numa-shim (TokenRequest API),
# e.g. `--bound-object-kind Secret --bound-object-name x` to revoke it by deleting the Secret.
# shellcheck disable=SC2120 # arguments are for callers of controlplane.sh
it_cp_numa_shim_token() {
    it_kubectl -n kube-system create token numa-shim --duration 24h "$@"
}

# it_cp_up: PKI, etcd, kube-apiserver, controllers (when built), kubeconfigs and numa-shim's RBAC.
it_cp_up() {
    local bin
    for bin in "etcd-$IT_ETCD_VERSION" "kube-apiserver-$IT_K8S_VERSION" "kubectl-$IT_K8S_VERSION"; do
        [[ -x $IT_CACHE/bin/$bin ]] || it_die "no $IT_CACHE/bin/$bin (integration/install-deps.sh)"
    done
    if [[ -d $IT_CP ]]; then
        it_log "leftover $IT_CP from an earlier run: tearing it down first"
        it_cp_down
    fi
    mkdir -p "$IT_CP" "$IT_RUN/pids" "$IT_CP_LOGS"
    local log
    for log in etcd apiserver controller-manager scheduler; do
        : >"$IT_CP_LOGS/$log.log"
    done
    it_pki_all "$IT_CP/pki" "$IT_NODE_NAME"
    it_free_port >"$IT_CP/etcd.port"
    it_free_port >"$IT_CP/etcd-peer.port"
    it_free_port >"$IT_CP/apiserver.port"
    _it_cp_start_etcd
    _it_cp_start_apiserver
    _it_cp_cert_kubeconfig "$IT_CP/admin.kubeconfig" admin
    _it_cp_cert_kubeconfig "$IT_CP/kubelet.kubeconfig" kubelet
    _it_cp_cert_kubeconfig "$IT_CP/controller-manager.kubeconfig" controller-manager
    _it_cp_cert_kubeconfig "$IT_CP/scheduler.kubeconfig" scheduler
    # numa-shim's RBAC, exactly as the DaemonSet manifest ships it.
    it_kubectl apply -l app.kubernetes.io/component=rbac \
        -f "$IT_REPO/packaging/kubernetes/daemonset-containerd.yaml" >/dev/null
    # shellcheck disable=SC2119
    it_cp_numa_shim_token >"$IT_CP/numa-shim.token"
    _it_cp_kubeconfig "$IT_CP/numa-shim.kubeconfig" "tokenFile: $IT_CP/numa-shim.token"
    _it_cp_start_controllers
    it_log "control plane on https://127.0.0.1:$(cat "$IT_CP/apiserver.port") (kubeconfigs in $IT_CP)"
}

# _it_cp_kill PID: TERM then KILL a process, only if its command line mentions IT_RUN.
_it_cp_kill() {
    local pid=$1 i
    [[ -r /proc/$pid/cmdline ]] || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$IT_RUN" || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        [[ -e /proc/$pid ]] || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# it_cp_down: stops the control plane (controllers, API server, then etcd) by PID and removes
# IT_CP. Safe to call more than once and after a partial start.
it_cp_down() {
    local name
    _it_cp_stop_controllers
    for name in apiserver etcd; do
        [[ -f $IT_RUN/pids/cp-$name ]] || continue
        _it_cp_kill "$(cat "$IT_RUN/pids/cp-$name")"
        rm -f "$IT_RUN/pids/cp-$name"
    done
    rm -rf "$IT_CP"
}

# shellcheck shell=bash
# Shared paths and helpers for the real-runtime harness. Source it; it defines no traps.
#
# Everything the harness creates lives under IT_RUN (runtime state, sockets: short path) and
# IT_WORK (cached tools and images, gitignored). Nothing here touches a system containerd.

IT_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IT_WORK=${IT_WORK:-$IT_REPO/integration/.work}
IT_BIN=$IT_WORK/bin
# Go builds of upstream tools (kubelet, kube-apiserver, kubectl, etcd, CRI-O, containerd 2.x) are
# cached outside the clone, keyed by version in the file name, so a fresh clone on the same
# machine does not build them again. NUMA_SHIM_CACHE moves it.
IT_CACHE=${NUMA_SHIM_CACHE:-/var/cache/numa-shim-it}
# Unix socket paths must stay short (108 bytes), so runtime state lives under /run.
IT_RUN=${IT_RUN:-/run/numa-shim-it}
CRICTL_VERSION=v1.37.0
# The suite runs Debian's containerd. IT_CONTAINERD_VERSION=v1.7.29 (or v2.4.2) builds and runs
# that version from the Go module proxy instead (1.7 implements GetContainerEvents, which Debian's
# 1.6 answers with Unimplemented on both sides of the parity check). IT_RUNTIME=crio runs CRI-O.
IT_CONTAINERD_VERSION=${IT_CONTAINERD_VERSION-}
# The other runtimes the suite runs (integration/runtime-suite.sh), built by install-deps.sh.
IT_CONTAINERD2_VERSION=${IT_CONTAINERD2_VERSION:-v2.4.2}
IT_CRIO_VERSION=${IT_CRIO_VERSION:-v1.36.3}
# Cgroup parents the harness's own pod configs use, and the one critest uses when the runtime does
# not answer RuntimeConfig (containerd 1.6). Teardown removes what is left under them.
IT_CG=${IT_RUN##*/}
# shellcheck disable=SC2034 # used by containerd.sh
IT_CGROUP_PARENTS=("$IT_CG" test.slice)

export IT_REPO IT_WORK IT_BIN IT_CACHE IT_RUN IT_CG CRICTL_VERSION IT_CONTAINERD_VERSION IT_CONTAINERD2_VERSION
export IT_CRIO_VERSION

# crictl reads /etc/crictl.yaml unless told otherwise: give it an empty private one.
mkdir -p "$IT_WORK"
[[ -e $IT_WORK/crictl.yaml ]] || : >"$IT_WORK/crictl.yaml"

it_log() { printf '[it %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
it_die() { it_log "FATAL: $*"; exit 1; }

# it_free_port: a loopback TCP port no socket uses, in any state, picked at random in
# 20000-32767: below the kernel's ephemeral range (32768-60999 here), whose ports outgoing
# connections take at any time (seen: a kubelet port picked in 20000-39999 among the listening
# ports only was taken by a connection before the kubelet bound it: "address already in use").
it_free_port() {
    local port used low
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range
    ((low > 20000)) || it_die "it_free_port: the ephemeral port range starts at $low, below 20000"
    ((low = low > 32768 ? 32768 : low))
    used=$(ss -Htan | awk '{print $4}' | sed 's/.*://' | sort -u)
    while :; do
        port=$((20000 + RANDOM % (low - 20000)))
        grep -qx "$port" <<<"$used" || break
    done
    echo "$port"
}

# it_crictl ENDPOINT ARGS... runs the harness's crictl against a unix socket path; each call may
# take IT_CRICTL_TIMEOUT (default 60s; the multi-NUMA guests, ~20 times slower, set more).
it_crictl() {
    local ep=$1
    shift
    "$IT_BIN/crictl" --config "$IT_WORK/crictl.yaml" --runtime-endpoint "unix://$ep" --image-endpoint "unix://$ep" --timeout "${IT_CRICTL_TIMEOUT:-60s}" "$@"
}

# it_wait_socket PATH SECONDS: waits for a CRI server to answer `crictl version` on PATH.
it_wait_socket() {
    local sock=$1 secs=$2 i
    for ((i = 0; i < secs * 5; i++)); do
        if [[ -S $sock ]] && it_crictl "$sock" version >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# it_numa_shim_bin: path of the numa-shim binary (built by cargo into CARGO_TARGET_DIR).
it_numa_shim_bin() {
    local target=${CARGO_TARGET_DIR:-$IT_REPO/target}
    printf '%s/debug/numa-shim\n' "$target"
}

# it_go_module_build DIR OUT: builds the project's Go module in DIR (a main package) to OUT,
# static (CGO_ENABLED=0) and -trimpath; skipped when OUT is newer than every source file of DIR
# (seconds with the Go module cache warm). The modules' build.sh scripts call it.
it_go_module_build() {
    local dir=$1 out=$2
    if [[ -x $out && -z $(find "$dir" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$out" -print -quit) ]]; then
        return 0
    fi
    mkdir -p "$(dirname "$out")"
    (cd "$dir" && CGO_ENABLED=0 PATH=$PATH:/usr/local/go/bin go build -trimpath -o "$out.tmp" .)
    mv "$out.tmp" "$out"
}

#!/usr/bin/env bash
# Packaging checks for numa-shim: the systemd unit and kubelet drop-ins, the Kubernetes manifests,
# the example configurations and the Debian package. Prints one line per check and ends with
# "N passed, N failed"; exits non-zero if any check failed.
#
# Tools it needs and installs when missing (from package registries only):
#   systemd-analyze  apt-get install systemd
#   kubernetes-validate  pip install kubernetes-validate==1.37.0 (bundles the Kubernetes OpenAPI
#                    schemas, so it validates offline)
#   cargo-deb        cargo install cargo-deb --locked
#   go               to build integration/kubeletconfig-check (k8s.io/kubelet's own config types)
#
# Set VERBOSE=1 to print every check's output, not only the failing ones'.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# shellcheck source=integration/lib/checks.sh
source "$ROOT/integration/lib/checks.sh"

ensure_tools() {
    command -v systemd-analyze >/dev/null || {
        apt-get update -qq && apt-get install -y -qq systemd >/dev/null
    }
    command -v kubernetes-validate >/dev/null || pip install -q kubernetes-validate==1.37.0
    command -v cargo-deb >/dev/null || cargo install cargo-deb --locked -q
}

# --- systemd ------------------------------------------------------------------------------------

# systemd-analyze verify insists that ExecStart's binary exists. The test runs it on a copy of the
# unit whose ExecStart points at the binary built from this tree instead of /usr/bin/numa-shim.
unit_copy() {
    local binary=$1 dir=$WORK/units
    mkdir -p "$dir"
    sed "s#^ExecStart=/usr/bin/numa-shim #ExecStart=$binary #" \
        "$ROOT/packaging/systemd/numa-shim.service" >"$dir/numa-shim.service"
    grep -q "^ExecStart=$binary serve --config /etc/numa-shim/config.yaml$" "$dir/numa-shim.service"
}

# Any output from verify is a warning about our files; the check demands none.
verify_quiet() {
    local out
    out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$@" 2>&1)
    local rc=$?
    echo "$out"
    [ $rc -eq 0 ] && [ -z "$out" ]
}

unit_typo() {
    mkdir -p "$WORK/typo"
    sed 's/^Restart=always$/Restart=alwayz/' "$WORK/units/numa-shim.service" >"$WORK/typo/numa-shim.service"
    it_fails_as_expected verify_quiet "$WORK/typo/numa-shim.service"
}

# systemd's own exposure score for the hardening (0 = locked down, 10 = none); demand <= 3.
unit_exposure() {
    local out score
    out=$(cd "$WORK/units" && SYSTEMD_LOG_COLOR=0 systemd-analyze security --offline=true \
        --no-pager "$WORK/units/numa-shim.service" 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -E '^(✗|→)'
    score=$(echo "$out" | sed -n 's/.*Overall exposure level for numa-shim.service: \([0-9.]*\).*/\1/p')
    [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }'
}

unit_has_settings() {
    local unit=$ROOT/packaging/systemd/numa-shim.service missing=0
    for line in 'Before=kubelet.service' 'Restart=always' 'RuntimeDirectory=numa-shim' \
        'StateDirectory=numa-shim' 'RuntimeDirectoryPreserve=restart' \
        'ExecStart=/usr/bin/numa-shim serve --config /etc/numa-shim/config.yaml' \
        'ProtectSystem=strict' 'NoNewPrivileges=yes'; do
        grep -qxF "$line" "$unit" || { echo "missing: $line"; missing=1; }
    done
    grep -qE '^After=.*\bcontainerd\.service\b' "$unit" || { echo "missing: After=containerd"; missing=1; }
    grep -qE '^RestrictAddressFamilies=.*AF_UNIX' "$unit" || { echo "unix sockets not allowed"; missing=1; }
    # The hardening must leave cgroupfs and sysfs readable: no InaccessiblePaths over them.
    if grep -qE '^(InaccessiblePaths|TemporaryFileSystem)=.*(/sys|/proc)' "$unit"; then
        echo "sysfs or cgroupfs hidden"; missing=1
    fi
    return $missing
}

# The kubelet's unit as kubeadm ships it (ExecStart with $KUBELET_CONFIG_ARGS), plus our drop-in.
kubelet_dropin_loads() {
    local dir=$WORK/kubelet-units
    mkdir -p "$dir/kubelet.service.d"
    # shellcheck disable=SC2016 # $KUBELET_CONFIG_ARGS is for systemd to expand, not the shell
    printf '[Service]\nExecStart=%s $KUBELET_CONFIG_ARGS\n' "$(command -v true)" >"$dir/kubelet.service"
    printf '[Service]\nEnvironment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"\n' \
        >"$dir/kubelet.service.d/10-kubeadm.conf"
    cp "$ROOT/packaging/kubelet/kubelet.service.d/10-numa-shim.conf" "$dir/kubelet.service.d/"
    cp "$WORK/units/numa-shim.service" "$dir/"
    # 10-kubeadm.conf must sort before 10-numa-shim.conf so ours sets KUBELET_CONFIG_ARGS last.
    local last
    last=$(find "$dir/kubelet.service.d" -mindepth 1 -printf '%f\n' | sort | tail -1)
    [ "$last" = 10-numa-shim.conf ] || return 1
    (cd "$dir" && SYSTEMD_UNIT_PATH="$dir:" verify_quiet "$dir/kubelet.service")
}

# Proves verify reads the drop-in at all: a misspelled key in it must be reported.
kubelet_dropin_typo() {
    local dir=$WORK/kubelet-units
    sed -i 's/^Wants=/Wantz=/' "$dir/kubelet.service.d/10-numa-shim.conf"
    (cd "$dir" && SYSTEMD_UNIT_PATH="$dir:" it_fails_as_expected verify_quiet "$dir/kubelet.service")
}

# --- Kubernetes manifests -----------------------------------------------------------------------

validate_manifests() {
    kubernetes-validate --strict -k 1.37.0 "$@"
}

broken_manifest() {
    # An unknown field and a wrong type: a validator that accepts this checks nothing.
    sed -e 's/^      hostNetwork: true$/      hostNetwork: "yes"/' \
        -e 's/^          privileged: true$/          privileged: true\n          privilegedd: true/' \
        "$ROOT/packaging/kubernetes/daemonset-containerd.yaml" >"$WORK/broken.yaml"
    ! cmp -s "$WORK/broken.yaml" "$ROOT/packaging/kubernetes/daemonset-containerd.yaml" &&
        it_fails_as_expected validate_manifests "$WORK/broken.yaml"
}

# daemonset_shape FILE RUNTIME_DIR [EXTRA_HOST_PATH...]: the DaemonSet's privileges, host paths
# and config, read with a YAML parser.
daemonset_shape() {
    python3 - "$@" <<'EOF'
import sys, yaml
path, runtime_dir, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
docs = {d["kind"]: d for d in yaml.safe_load_all(open(path)) if d}
pod = docs["DaemonSet"]["spec"]["template"]["spec"]
container = pod["containers"][0]
problems = []
if not container.get("securityContext", {}).get("privileged"):
    problems.append("not privileged")
if not pod.get("hostNetwork"):
    problems.append("no hostNetwork (metrics on the node's loopback)")
if not pod.get("hostPID"):
    problems.append("no hostPID (the drift check reads /proc/<pid> of the node's containers)")
want = {"/run/numa-shim", runtime_dir, "/var/lib/numa-shim", "/sys",
        "/var/lib/kubelet/pods-api", "/var/lib/kubelet/pod-resources", *extra}
host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
for name, p in host.items():
    if mounted.get(name) != p:
        problems.append(f"hostPath {p} mounted at {mounted.get(name)}")
if set(host.values()) != want:
    problems.append(f"hostPaths {sorted(host.values())} != {sorted(want)}")
config = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])
if not config["runtime"].startswith("unix://" + runtime_dir + "/"):
    problems.append(f"runtime {config['runtime']} not under {runtime_dir}")
if config["listen"] != "unix:///run/numa-shim/cri.sock":
    problems.append(f"listen {config['listen']}")
probes = [container[p]["httpGet"] for p in ("livenessProbe", "readinessProbe")]
if [p["path"] for p in probes] != ["/healthz", "/readyz"] or any(p["host"] != "127.0.0.1" for p in probes):
    problems.append(f"probes {probes}")
open(sys.argv[1] + ".config.yaml", "w").write(docs["ConfigMap"]["data"]["config.yaml"])
print("\n".join(problems) or f"{path}: privileged, hostNetwork, hostPID, hostPaths {sorted(want)}")
sys.exit(1 if problems else 0)
EOF
}

# --- kubelet configuration ----------------------------------------------------------------------

build_kubeletconfig_check() {
    (cd "$ROOT/integration/kubeletconfig-check" && go build -o "$WORK/kubeletconfig-check" .)
}

dropin_values() {
    python3 - "$ROOT/packaging/kubelet/kubelet.conf.d/10-numa-shim.conf" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
want = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": "unix:///run/numa-shim/cri.sock",
        "cpuManagerPolicy": "none", "memoryManagerPolicy": "None", "topologyManagerPolicy": "none"}
print(doc)
sys.exit(0 if doc == want else 1)
EOF
}

misspelled_kubelet_field() {
    sed 's/^cpuManagerPolicy:/cpuManagerPolicys:/' \
        "$ROOT/packaging/kubelet/kubelet.conf.d/10-numa-shim.conf" >"$WORK/misspelled.conf"
    it_fails_as_expected "$WORK/kubeletconfig-check" "$WORK/misspelled.conf"
}

# --- Debian package -----------------------------------------------------------------------------

build_deb() {
    (cd "$ROOT" && cargo deb --output "$WORK/numa-shim.deb")
}

# Path in the package → source file in the tree (the binary is checked by running it).
EXPECTED_FILES=(
    "etc/numa-shim/config.yaml=packaging/config/config.yaml"
    "etc/kubernetes/kubelet.conf.d/10-numa-shim.conf=packaging/kubelet/kubelet.conf.d/10-numa-shim.conf"
    "usr/lib/systemd/system/kubelet.service.d/10-numa-shim.conf=packaging/kubelet/kubelet.service.d/10-numa-shim.conf"
    "usr/lib/systemd/system/numa-shim.service=packaging/systemd/numa-shim.service"
    "usr/share/doc/numa-shim/operations.md=docs/operations.md"
    "usr/share/doc/numa-shim/examples/config.yaml=packaging/config/config.yaml"
    "usr/share/doc/numa-shim/examples/pod-scope.yaml=packaging/config/pod-scope.yaml"
    "usr/share/doc/numa-shim/examples/high-performance.yaml=packaging/config/high-performance.yaml"
    "usr/share/doc/numa-shim/examples/kubernetes/daemonset-containerd.yaml=packaging/kubernetes/daemonset-containerd.yaml"
    "usr/share/doc/numa-shim/examples/kubernetes/daemonset-crio.yaml=packaging/kubernetes/daemonset-crio.yaml"
)

deb_lists_files() {
    dpkg-deb -c "$WORK/numa-shim.deb" | tee "$WORK/listing"
    local missing=0
    grep -qE '^-rwxr-xr-x (root/root|0/0) .* \./usr/bin/numa-shim$' "$WORK/listing" ||
        { echo "missing: ./usr/bin/numa-shim 0755"; missing=1; }
    for entry in "${EXPECTED_FILES[@]}"; do
        grep -qE "^-rw-r--r-- (root/root|0/0) .* \./${entry%%=*}$" "$WORK/listing" ||
            { echo "missing: ./${entry%%=*} 0644"; missing=1; }
    done
    return $missing
}

deb_extracts_in_place() {
    local root=$WORK/root differ=0
    dpkg-deb -x "$WORK/numa-shim.deb" "$root"
    for entry in "${EXPECTED_FILES[@]}"; do
        cmp "$root/${entry%%=*}" "$ROOT/${entry#*=}" || differ=1
    done
    "$root/usr/bin/numa-shim" --version && return $differ
}

deb_control() {
    dpkg-deb -e "$WORK/numa-shim.deb" "$WORK/control"
    cat "$WORK/control/conffiles"
    grep -qx /etc/numa-shim/config.yaml "$WORK/control/conffiles" &&
        grep -qx /etc/kubernetes/kubelet.conf.d/10-numa-shim.conf "$WORK/control/conffiles" &&
        grep -q 'deb-systemd-helper enable numa-shim.service' "$WORK/control/postinst" &&
        grep -q 'try-restart' "$WORK/control/postinst" &&
        dpkg-deb -f "$WORK/numa-shim.deb" Package Version Architecture Depends
}

# dpkg itself installs it into a scratch root (dpkg --root, scripts run chrootless with DPKG_ROOT
# set, so deb-systemd-helper enables the unit inside the scratch root, not on this machine). On a
# host booted with systemd the postinst would also run `systemctl daemon-reload` on the host, so
# there the package is only unpacked, not configured.
deb_installs_into_instdir() {
    local inst=$WORK/inst action=-i
    [ -d /run/systemd/system ] && action=--unpack
    mkdir -p "$inst/var/lib/dpkg/updates" "$inst/var/lib/dpkg/info"
    touch "$inst/var/lib/dpkg/status"
    dpkg --root="$inst" --force-script-chrootless --force-not-root --force-depends \
        --log=/dev/null "$action" "$WORK/numa-shim.deb" || return 1
    dpkg --root="$inst" -L numa-shim | grep -x /usr/bin/numa-shim || return 1
    local file missing=0
    for file in usr/bin/numa-shim etc/kubernetes/kubelet.conf.d/10-numa-shim.conf \
        usr/lib/systemd/system/kubelet.service.d/10-numa-shim.conf \
        usr/lib/systemd/system/numa-shim.service etc/numa-shim/config.yaml; do
        [ -f "$inst/$file" ] || { echo "missing after install: /$file"; missing=1; }
    done
    if [ "$action" = -i ]; then
        local wants=etc/systemd/system/multi-user.target.wants/numa-shim.service
        if [ -L "$inst/$wants" ]; then
            echo "enabled: /$wants -> $(readlink "$inst/$wants")"
        else
            echo "not enabled in the scratch root"
            missing=1
        fi
    else
        echo "host runs systemd: unpacked only"
    fi
    return $missing
}

# --- run ----------------------------------------------------------------------------------------

ensure_tools
(cd "$ROOT" && cargo build -q --bin numa-shim) || { echo "FAIL cargo build"; exit 1; }
BINARY=$CARGO_TARGET_DIR/debug/numa-shim

it_check "systemd unit: copy with ExecStart=$BINARY" unit_copy "$BINARY"
it_check "systemd unit: systemd-analyze verify, no warnings" verify_quiet "$WORK/units/numa-shim.service"
it_check "systemd unit: ordering, restart, directories, hardening" unit_has_settings
it_check "systemd unit: systemd-analyze security --offline exposure <= 3.0" unit_exposure
it_check "systemd unit: a typo makes verify complain (negative control)" unit_typo
it_check "kubelet.service drop-in: verify with a kubeadm-style kubelet.service" kubelet_dropin_loads
it_check "kubelet.service drop-in: a typo in it is reported (negative control)" kubelet_dropin_typo
it_check "kubelet drop-in: exact endpoint and policies" dropin_values
it_check "kubeletconfig-check builds (k8s.io/kubelet types)" build_kubeletconfig_check
it_check "kubelet drop-in: strict KubeletConfiguration decode" \
    "$WORK/kubeletconfig-check" "$ROOT/packaging/kubelet/kubelet.conf.d/10-numa-shim.conf"
it_check "kubelet drop-in: a misspelled field is rejected (negative control)" misspelled_kubelet_field
it_check "example configs: kubelet fields decode strictly" \
    "$WORK/kubeletconfig-check" -fragment "$ROOT"/packaging/config/*.yaml
it_check "manifests: kubernetes-validate --strict (1.37 schemas)" \
    validate_manifests "$ROOT"/packaging/kubernetes/*.yaml
it_check "manifests: a broken DaemonSet is rejected (negative control)" broken_manifest
cp "$ROOT/packaging/kubernetes/daemonset-containerd.yaml" "$ROOT/packaging/kubernetes/daemonset-crio.yaml" "$WORK/"
it_check "DaemonSet containerd: privileges, host paths, probes, config" \
    daemonset_shape "$WORK/daemonset-containerd.yaml" /run/containerd
it_check "DaemonSet CRI-O: privileges, host paths, probes, config" \
    daemonset_shape "$WORK/daemonset-crio.yaml" /var/run/crio /etc/crio
it_check "DaemonSet configs: kubelet fields decode strictly" \
    "$WORK/kubeletconfig-check" -fragment "$WORK"/daemonset-*.yaml.config.yaml
it_check "cargo deb builds the package" build_deb
it_check "deb: dpkg-deb -c lists every file with its mode" deb_lists_files
it_check "deb: extracted files equal the sources, binary runs" deb_extracts_in_place
it_check "deb: conffiles and systemd maintainer scripts" deb_control
it_check "deb: dpkg -i into a scratch root, unit enabled there" deb_installs_into_instdir

it_checks_done packaging

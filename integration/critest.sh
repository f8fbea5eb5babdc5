#!/usr/bin/env bash
# critest parity: runs cri-tools' critest v1.37.0 against the private runtime directly and through
# `numa-shim serve` with the same skip set (integration/critest-skips.txt, each with its reason).
# Every spec that passes directly must pass through numa-shim. Prints both pass counts and a final
# `N passed, N failed` line for the numa-shim run (failed = specs that passed directly but not
# through numa-shim).
#
#   integration/critest.sh            direct, then through numa-shim
#   integration/critest.sh --direct   direct only (to check the skip list on a new runtime)
#
# Uses the runtime named by NUMA_SHIM_IT_CONTAINERD (test-all.sh) or starts its own (lib/parity.sh;
# IT_RUNTIME, IT_CONTAINERD_VERSION: lib/runtime.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/parity.sh
source "$here/lib/parity.sh"

mode=${1:-shim}
out=$IT_WORK/critest/$IT_CG
[[ -x $IT_BIN/critest ]] || it_die "no $IT_BIN/critest (integration/install-deps.sh)"
parity_up "$out"

cat >"$out/images.yaml" <<EOF
defaultTestContainerImage: $IT_BUSYBOX_IMAGE
webServerTestImage: $IT_WEB_IMAGE
EOF
# The skip regex: the part of each non-comment line before " | " (the reason).
skip=$(grep -v -e '^#' -e '^\s*$' "$here/critest-skips.txt" | sed 's/ | .*$//' | paste -sd'|')

# run_critest NAME SOCKET: runs the suite, writes $out/NAME.json (ginkgo report) and NAME.log.
run_critest() {
    local name=$1 sock=$2 start rc=0
    start=$(date +%s)
    (cd "$out" && "$IT_BIN/critest" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" \
        --config "$IT_WORK/crictl.yaml" --test-images-file "$out/images.yaml" \
        --ginkgo.skip "$skip" --ginkgo.flake-attempts 2 --ginkgo.timeout 30m --ginkgo.no-color \
        --ginkgo.json-report "$out/$name.json" >"$out/$name.log" 2>&1) || rc=$?
    it_log "critest $name: exit $rc in $(($(date +%s) - start))s (log $out/$name.log)"
    grep -E '^(Ran |FAIL!|SUCCESS!)' "$out/$name.log" >&2 || true
    [[ -s $out/$name.json ]] || it_die "critest $name wrote no report; see $out/$name.log"
}

# specs FILE STATE: the full names of the specs in STATE (passed, failed, ...), sorted.
specs() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
for suite in json.load(open(sys.argv[1])):
    for s in suite.get("SpecReports") or []:
        if s.get("LeafNodeType") == "It" and s.get("State") == sys.argv[2]:
            print(" ".join(s.get("ContainerHierarchyTexts") or []) + " " + s.get("LeafNodeText", ""))
EOF
}

run_critest direct "$IT_SOCK"
specs "$out/direct.json" passed | sort >"$out/direct.passed"
specs "$out/direct.json" failed | sort >"$out/direct.failed"
echo "critest direct: $(wc -l <"$out/direct.passed") passed, $(wc -l <"$out/direct.failed") failed" >&2
if [[ -s $out/direct.failed ]]; then
    it_log "specs failing against $IT_RUNTIME directly (not skipped; fix the skip list or the runtime):"
    sed 's/^/  /' "$out/direct.failed" >&2
fi
[[ $mode == --direct ]] && { [[ ! -s $out/direct.failed ]]; exit; }

parity_shim critest-shim
run_critest numa-shim "$PARITY_SHIM"
parity_shim_stop critest-shim
specs "$out/numa-shim.json" passed | sort >"$out/numa-shim.passed"
comm -23 "$out/direct.passed" "$out/numa-shim.passed" >"$out/regressions"
direct_n=$(wc -l <"$out/direct.passed")
shim_n=$(wc -l <"$out/numa-shim.passed")
lost=$(wc -l <"$out/regressions")
echo "critest passed directly: $direct_n; through numa-shim: $shim_n" >&2
if ((lost)); then
    it_log "specs that pass directly but not through numa-shim:"
    sed 's/^/  /' "$out/regressions" >&2
fi
echo "critest-through-numa-shim: $((direct_n - lost)) passed, $lost failed"
((lost == 0 && direct_n > 0))

#!/usr/bin/env bash
# oracle.sh [--cases N] [--seed S] [--from K] [--wide] [--fixed]: the differential suite against the
# kubelet's own managers (tests/oracle.rs). Runs N generated cases (default 1000, from index K,
# default 0: --from K --cases 1 judges case K alone) of seed S (default a fresh one, printed)
# through kubelet-oracle and numa-shim's decision core and compares them after every step; a
# disagreement fails and prints its minimal scenario (also in target/oracle/).
# --wide makes every case a wide machine (9-10 NUMA nodes, max-allowable-numa-nodes raised);
# NUMA_SHIM_ORACLE_WIDE=11,12 picks other node counts.
# --fixed runs the CI suites instead: 500 cases of the fixed seed, 200 of a fresh one, 40 wide
# cases of a fresh one.
# The oracle binary: $NUMA_SHIM_ORACLE, else $IT_BIN/kubelet-oracle (install-deps.sh builds it
# with integration/kubelet-oracle/build.sh; built here when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/lib/common.sh"

cases=1000
seed=
fixed=false
from=0
while (($#)); do
    case $1 in
    --cases) cases=${2:?--cases needs a number}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --from) from=${2:?--from needs a number}; shift 2 ;;
    --fixed) fixed=true; shift ;;
    --wide) export NUMA_SHIM_ORACLE_WIDE=${NUMA_SHIM_ORACLE_WIDE:-1}; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "oracle.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $cases =~ ^[0-9]+$ ]] || { echo "oracle.sh: --cases wants a number, got $cases" >&2; exit 2; }
[[ $from =~ ^[0-9]+$ ]] || { echo "oracle.sh: --from wants a number, got $from" >&2; exit 2; }
[[ -z $seed || $seed =~ ^[0-9]+$ ]] || { echo "oracle.sh: --seed wants a number, got $seed" >&2; exit 2; }

oracle=${NUMA_SHIM_ORACLE:-$IT_BIN/kubelet-oracle}
if [[ ! -x $oracle && -z ${NUMA_SHIM_ORACLE:-} && -x $here/kubelet-oracle/build.sh ]]; then
    it_log "building kubelet-oracle"
    "$here/kubelet-oracle/build.sh" "$oracle"
fi
[[ -x $oracle ]] || { echo "oracle.sh: no kubelet-oracle binary at $oracle (set NUMA_SHIM_ORACLE)" >&2; exit 1; }
export NUMA_SHIM_ORACLE=$oracle

cd "$IT_REPO"
if $fixed; then
    exec cargo test --test oracle -- --ignored --test-threads=1 \
        five_hundred_cases_with_the_fixed_seed two_hundred_cases_with_a_fresh_seed \
        forty_wide_cases_with_a_fresh_seed
fi
export NUMA_SHIM_ORACLE_CASES=$cases NUMA_SHIM_ORACLE_FROM=$from
if [[ -n $seed ]]; then
    export NUMA_SHIM_ORACLE_SEED=$seed
fi
exec cargo test --test oracle -- --ignored --exact configured_run

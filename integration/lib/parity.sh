# shellcheck shell=bash
# The harness of the parity scripts (integration/crictl_parity.sh, integration/critest.sh), which
# run one client against the private runtime directly and through `numa-shim serve` and compare
# the answers. The scripts source only this: it brings in the harness they share (common.sh,
# image.sh, runtime.sh: the runtime IT_RUNTIME names). It sets traps only in parity_up, and only
# when it starts the runtime itself.

# shellcheck source=integration/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=integration/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/image.sh"
# shellcheck source=integration/lib/runtime.sh
source "$(dirname "${BASH_SOURCE[0]}")/runtime.sh"

# parity_up DIR: DIR made anew (the run's answers and reports), and the private runtime: the one
# NUMA_SHIM_IT_CONTAINERD names (test-all.sh, runtime-suite.sh have it up), else one started here
# and torn down on exit.
parity_up() {
    rm -rf "$1"
    mkdir -p "$1"
    if [[ -z ${NUMA_SHIM_IT_CONTAINERD:-} ]]; then
        trap it_teardown EXIT
        trap "exit 143" TERM INT
        it_up
    fi
}

# parity_shim NAME: builds numa-shim and starts it as NAME in front of the runtime, with the flags
# NUMA_SHIM_IT_SHIM_ARGS gives (a list of words; test-all.sh's); its socket in PARITY_SHIM.
parity_shim() {
    cargo build --quiet --bin numa-shim --manifest-path "$IT_REPO/Cargo.toml"
    # NUMA_SHIM_IT_SHIM_ARGS is a list of words; the scripts read PARITY_SHIM.
    # shellcheck disable=SC2034,SC2086
    PARITY_SHIM=$(it_shim_start "$1" ${NUMA_SHIM_IT_SHIM_ARGS:-})
}

# parity_shim_stop NAME: stops the numa-shim parity_shim started as NAME.
parity_shim_stop() { _it_kill "$(cat "$IT_RUN/pids/$1")"; }

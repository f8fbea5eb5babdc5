# shellcheck shell=bash
# Counted checks for the suite's scripts (apiserver-tests.sh, packaging.sh, runtime-suite.sh, ...).
# Source it; it defines no traps. Every check runs even when an earlier one failed; the script
# ends with `it_checks_done`, which prints the closing "N passed, N failed" line.

it_passed=0
it_failed=0
it_summary=()
it_check_out=$(mktemp)

# it_check NAME CMD...: runs CMD with its output kept aside, prints "ok   NAME" or "FAIL NAME"
# followed by that output (VERBOSE=1: after an ok too), and counts it. Returns 0 either way.
it_check() {
    local name=$1
    shift
    if "$@" >"$it_check_out" 2>&1; then
        it_passed=$((it_passed + 1))
        echo "ok   $name"
        if [[ ${VERBOSE:-0} == 1 ]]; then sed 's/^/     | /' "$it_check_out"; fi
    else
        it_failed=$((it_failed + 1))
        echo "FAIL $name"
        sed 's/^/     | /' "$it_check_out"
    fi
    return 0
}

# it_timed NAME CMD...: runs a long CMD with its output streaming, times it, adds a line to
# it_summary and counts it. Returns 0 either way.
it_timed() {
    local name=$1 start rc=0
    shift
    start=$(date +%s)
    printf '[it %(%H:%M:%S)T] --- %s\n' -1 "$name" >&2
    "$@" || rc=$?
    if ((rc == 0)); then
        it_passed=$((it_passed + 1))
        it_summary+=("ok     $(($(date +%s) - start))s  $name")
    else
        it_failed=$((it_failed + 1))
        it_summary+=("FAILED $(($(date +%s) - start))s  $name (exit $rc)")
    fi
    return 0
}

# it_fails_as_expected CMD...: succeeds when CMD fails (a check that a bad input is refused).
it_fails_as_expected() {
    if "$@"; then
        echo "expected a failure, got success"
        return 1
    fi
    return 0
}

# it_checks_done [LABEL]: prints it_summary (if any) to stderr and "[LABEL: ]N passed, N failed";
# returns non-zero when a check failed.
it_checks_done() {
    local label=${1:+$1: }
    if ((${#it_summary[@]})); then printf '  %s\n' "${it_summary[@]}" >&2; fi
    rm -f "$it_check_out"
    echo "${label}$it_passed passed, $it_failed failed"
    ((it_failed == 0))
}

//! The suite against stand-in oracles (no kubelet-oracle binary needed): a shell script that
//! answers each case with `numa-shim simulate --output steps`, except on one marked case, where
//! it hangs (the client must time out, kill it, start a fresh one and go on) or answers
//! differently (the run must fail, name the field and print a minimal scenario).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::client::Oracle;

/// The seed of the stand-in runs.
const SEED: u64 = 20_260_101;

/// Writes the stand-in script to `dir`: `on_marked` is the shell run for the case `marked`
/// (`exec sleep 300` to hang; `MUTATE` to answer through `sed`).
fn stand_in(dir: &Path, marked: &str, mutate: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("stand-in dir");
    let script = dir.join("oracle.sh");
    let text = format!(
        r#"#!/bin/sh
# A stand-in for kubelet-oracle (tests/oracle/standin.rs).
while IFS= read -r line; do
    sed=cat
    case $line in *'"id":"{marked}"'*) {mutate} ;; esac
    printf '%s\n' "$line" >'{dir}/case.json'
    if out=$('{ns}' simulate --output steps '{dir}/case.json' 2>'{dir}/err'); then
        printf '%s\n' "$out" | tr -d '\n' | $sed
        echo
    else
        echo '{{"error":"simulate failed"}}'
    fi
done
"#,
        dir = dir.display(),
        ns = env!("CARGO_BIN_EXE_numa-shim"),
    );
    std::fs::write(&script, text).expect("stand-in script");
    let mut perm = std::fs::metadata(&script).expect("script").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    script
}

fn dir(name: &str) -> PathBuf {
    crate::out_dir().join(format!("standin-{name}"))
}

#[test]
fn a_case_the_oracle_does_not_answer_times_out_and_the_run_goes_on() {
    let dir = dir("hang");
    let marked = format!("seed-{SEED}/1");
    let bin = stand_in(&dir, &marked, "exec sleep 300");
    let oracle = Oracle::from_bin(Some(bin), &dir, Duration::from_secs(3)).expect("stand-in");
    let report = crate::run_with(oracle, &dir, SEED, 0..4);
    assert_eq!(report.timed_out.len(), 1, "{}", report.summary);
    assert!(
        report.timed_out[0].contains(&marked),
        "{:?}",
        report.timed_out
    );
    let file = dir.join(format!("seed-{SEED}-1-timed-out.json"));
    assert!(file.is_file(), "no scenario {}", file.display());
    assert!(
        report.timed_out[0].contains(&file.display().to_string()),
        "{:?}",
        report.timed_out
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(
        report.summary.contains("3 agree") && report.summary.contains("2 oracle(s) started"),
        "{}",
        report.summary
    );
}

#[test]
fn an_oracle_that_answers_differently_fails_the_run_with_a_minimal_scenario() {
    let dir = dir("differ");
    let marked = format!("seed-{SEED}/1");
    let bin = stand_in(
        &dir,
        &marked,
        r#"sed='sed s/"admitted":[[:space:]]*true/"admitted":false/'"#,
    );
    let oracle = Oracle::from_bin(Some(bin), &dir, Duration::from_secs(60)).expect("stand-in");
    let report = crate::run_with(oracle, &dir, SEED, 0..3);
    assert_eq!(report.failures.len(), 1, "{}", report.summary);
    let failure = &report.failures[0];
    assert!(failure.contains(&marked), "{failure}");
    assert!(failure.contains("admitted"), "names no field: {failure}");
    assert!(failure.contains("minimal scenario"), "{failure}");
    assert!(
        failure.contains("\"steps\""),
        "prints no scenario: {failure}"
    );
    let file = dir.join(format!("seed-{SEED}-1.json"));
    assert!(file.is_file(), "no minimal scenario {}", file.display());
    assert!(report.summary.contains("1 disagree"), "{}", report.summary);
}

//! Every kubelet test case in `shared/fixtures/vectors/` run through the simulate library path
//! and compared with its `expect` block (every key the block gives). All vectors run; the test
//! fails once at the end listing each failing file and each difference.

use std::path::{Path, PathBuf};

use numa_shim::scenario::{expect, Scenario};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/vectors")
}

/// The differences for one vector, or why it could not run.
fn run_vector(path: &Path) -> Vec<String> {
    let scenario = match Scenario::load(path) {
        Ok(s) => s,
        Err(e) => return vec![format!("load: {e}")],
    };
    let Some(block) = scenario.expect.clone() else {
        return vec!["no expect block".to_string()];
    };
    let outcome = match scenario.run() {
        Ok(o) => o,
        Err(e) => return vec![format!("run: {e}")],
    };
    let report = match serde_json::to_value(&outcome.report) {
        Ok(v) => v,
        Err(e) => return vec![format!("report: {e}")],
    };
    expect::check(&block, &report)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn every_vector_matches_its_expect_block() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("shared/fixtures/vectors is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            )
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no vector found in {}",
        vectors_dir().display()
    );
    let mut failures = Vec::new();
    for file in &files {
        let diffs = run_vector(file);
        if !diffs.is_empty() {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            failures.push(format!("{name}:\n    {}", diffs.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

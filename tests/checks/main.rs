//! Checks without sockets or runtimes: the layer order of ARCHITECTURE.md, configs and examples, the shared vectors, topology and kubelet-config checks, refusal texts.
//!
//! One test binary; each module was its own binary before.

mod architecture;
mod cli_topology;
mod config_examples;
mod config_validation;
mod crio_config;
mod examples;
mod kubelet_config_check;
mod refusals;
mod vectors;

use std::path::{Path, PathBuf};

/// `topoDualSocketHT` (2 NUMA nodes × 6 CPUs) with 16Gi of memory on each node (the fixture has
/// CPUs only; the Memory Manager needs sizes), written to `dir/topology.json`: the machine of the
/// `check-config` checks.
fn dual_socket_in(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/fixtures/topologies/topoDualSocketHT.json"),
    )
    .unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["numa"] = serde_json::json!([{"id": 0, "memory": "16Gi"}, {"id": 1, "memory": "16Gi"}]);
    let path = dir.join("topology.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// This project's machine as topology JSON: 2 CPUs, one NUMA node with 4Gi.
fn two_cpus() -> serde_json::Value {
    serde_json::json!({
        "cpus": [{"id": 0, "core": 0, "socket": 0, "numa": 0}, {"id": 1, "core": 1, "socket": 0, "numa": 0}],
        "numa": [{"id": 0, "memory": "4Gi"}]
    })
}

/// The real-peer suites' support, in the library, runs the binary cargo built for the test: the
/// one `CARGO_BIN_EXE_numa-shim` names.
#[test]
fn support_finds_the_built_binary() {
    assert_eq!(
        numa_shim::testing::process::built_binary(),
        std::path::Path::new(env!("CARGO_BIN_EXE_numa-shim"))
    );
}

/// The one launcher fails a test at once, naming the exit and showing the log, when numa-shim
/// ends before it answers (here on a flag it does not know), rather than waiting out its 30 s.
#[tokio::test]
async fn the_launcher_fails_at_once_when_numa_shim_exits_before_it_answers() {
    use numa_shim::testing::process::{serve_args, ShimProcess};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let (socket, log) = (dir.path().join("shim.sock"), dir.path().join("serve.log"));
    let args = serve_args(
        &socket,
        &dir.path().join("runtime.sock"),
        &["--no-such-flag"],
    );
    let started = Instant::now();
    let start = tokio::spawn(async move {
        let bin = Path::new(env!("CARGO_BIN_EXE_numa-shim"));
        ShimProcess::start(bin, args, &socket, &log).await;
    });
    let failed = start
        .await
        .expect_err("numa-shim answered with an unknown flag");
    let message = *failed.into_panic().downcast::<String>().unwrap();
    assert!(
        message.contains("exited") && message.contains("--no-such-flag"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{message}");
}

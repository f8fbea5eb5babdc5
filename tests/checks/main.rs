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

//! Runs the built `numa-shim topology` against a fake sysfs tree (2 sockets × 2 cores × 2 threads,
//! threads {c, c+4}, one NUMA node and one L3 per socket, 2Mi hugepages on node 0).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use numa_shim::topology::fake::FakeSysfs;
use numa_shim::topology::{SyntheticSpec, Topology};

fn machine() -> Topology {
    let mut spec = SyntheticSpec::new(2, 1, 2, 2, 1);
    spec.memory_per_numa = 16 << 30;
    let mut t = spec.build().unwrap();
    t.numa[0].hugepages = BTreeMap::from([(2 << 20, 1 << 30)]);
    t
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numa-shim"))
        .arg("topology")
        .args(args)
        .output()
        .unwrap()
}

fn fake_root() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    FakeSysfs::new(machine()).write(&root).unwrap();
    let root = root.to_str().unwrap().to_string();
    (dir, root)
}

#[test]
fn json_output_is_the_discovered_topology() {
    let (_dir, root) = fake_root();
    let out = run(&["--sysfs", &root, "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(r#""hugepages":{"2Mi":"1Gi"}"#), "{text}");
    assert_eq!(Topology::from_json_str(&text).unwrap(), machine());

    // json is the default, and the output reads back through `Topology::load` as a file.
    let default = run(&["--sysfs", &root]);
    assert_eq!(String::from_utf8(default.stdout).unwrap(), text);
    let file = Path::new(&root).parent().unwrap().join("machine.json");
    std::fs::write(&file, &text).unwrap();
    let again = run(&["--sysfs", file.to_str().unwrap()]);
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
}

#[test]
fn table_output_lists_each_numa_node() {
    let (_dir, root) = fake_root();
    let out = run(&["--sysfs", &root, "--output", "table"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "8 cpus, 4 cores, 2 sockets, 2 numa nodes, 2 uncore caches",
            "numa 0  cpus 0-1,4-5  memory 16Gi  hugepages 2Mi=1Gi  distances 10 21",
            "  socket 0  uncore 0  cpus 0-1,4-5  cores 0[0,4] 1[1,5]",
            "numa 1  cpus 2-3,6-7  memory 16Gi  hugepages none  distances 21 10",
            "  socket 1  uncore 1  cpus 2-3,6-7  cores 2[2,6] 3[3,7]",
        ],
        "{text}"
    );
}

#[test]
fn errors_name_the_path_and_fail() {
    let (_dir, root) = fake_root();
    std::fs::remove_file(Path::new(&root).join("devices/system/cpu/cpu3/topology/core_id"))
        .unwrap();
    let out = run(&["--sysfs", &root]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("cpu3/topology/core_id"), "{err}");
    assert!(out.stdout.is_empty());

    let out = run(&["--sysfs", &root, "--output", "yaml"]);
    assert!(!out.status.success());
}

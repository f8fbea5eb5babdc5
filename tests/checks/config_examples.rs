//! `check-config` on the shared example files (as `--kubelet-config`, against
//! `topoDualSocketHT` with 16Gi per NUMA node) and on the packaged configuration files: what it says about each is what
//! docs/configuration.md quotes.

use std::path::{Path, PathBuf};
use std::process::Command;

use numa_shim::cli::check_config::{check, check_files, check_kubelet, Args};
use numa_shim::cli::flags::FileFlags;
use numa_shim::config::Config;

use crate::dual_socket_in;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn shared(sub: &str) -> PathBuf {
    root().join("../shared/fixtures").join(sub)
}

#[test]
fn shared_examples_as_kubelet_config() {
    let no_kubelet = "no KubeletConfiguration document";
    let expected: &[(&str, &str)] = &[
        ("container-scope-mixed.yaml", no_kubelet),
        ("empty-shared-pool.yaml", no_kubelet),
        (
            "kubelet-high-performance-node.yaml",
            "reservedMemory: the total amount \"1Gi\" of type \"memory\" is not equal to the value \"100Mi\"",
        ),
        (
            "kubelet-pod-scope.yaml",
            "reservedMemory: the total amount \"0\" of type \"memory\" is not equal to the value \"100Mi\"",
        ),
        ("pod-level-resource-demo.yaml", no_kubelet),
        ("pod-scope-mixed.yaml", no_kubelet),
    ];
    let mut seen: Vec<String> = std::fs::read_dir(shared("examples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    seen.sort();
    let names: Vec<&str> = expected.iter().map(|(n, _)| *n).collect();
    assert_eq!(seen, names, "every example file has an expectation");
    let dir = tempfile::tempdir().unwrap();
    let machine = dual_socket_in(dir.path());
    for (name, error) in expected {
        let path = shared(&format!("examples/{name}"));
        let f = check(&Config::default(), Some(&path), &machine);
        assert_eq!(f.errors.len(), 1, "{name}: {f:?}");
        assert!(f.errors[0].contains(error), "{name}: {f:?}");
    }
}

#[test]
fn high_performance_example_passes_once_memory_adds_up_and_the_kubelets_managers_are_off() {
    // The same settings plus systemReserved memory: 1Gi - 100Mi, so that reservedMemory (1Gi)
    // equals kubeReserved + systemReserved + evictionHard (100Mi default).
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(shared("examples/kubelet-high-performance-node.yaml"))
        .unwrap()
        + "systemReserved:\n  memory: 924Mi\n";
    let path = dir.path().join("kubelet.yaml");
    std::fs::write(&path, text).unwrap();
    let machine = dual_socket_in(dir.path());
    // As the kubelet's own file it still runs the kubelet's managers: refused.
    let f = check(&Config::default(), Some(&path), &machine);
    assert_eq!(f.errors.len(), 2, "{f:?}");
    assert!(
        f.errors[0].starts_with("kubelet cpuManagerPolicy:"),
        "{f:?}"
    );
    assert!(
        f.errors[1].starts_with("kubelet memoryManagerPolicy:"),
        "{f:?}"
    );
    // With the packaged drop-in in the kubelet's --config-dir, numa-shim takes the settings
    // over and the kubelet runs without its managers.
    let conf_d = root().join("packaging/kubelet/kubelet.conf.d");
    let f = check_kubelet(&Config::default(), Some(&path), Some(&conf_d), &machine);
    assert!(f.errors.is_empty(), "{f:?}");
}

#[test]
fn packaged_configs_pass() {
    let dir = tempfile::tempdir().unwrap();
    let machine = dual_socket_in(dir.path());
    for name in ["config.yaml", "pod-scope.yaml", "high-performance.yaml"] {
        let f = check_files(&Args {
            files: FileFlags {
                config: Some(root().join("packaging/config").join(name)),
                topology: Some(machine.clone()),
                ..FileFlags::default()
            },
        });
        assert!(f.errors.is_empty(), "{name}: {f:?}");
    }
}

#[test]
fn the_command_prints_ok_or_errors_with_exit_status() {
    let bin = env!("CARGO_BIN_EXE_numa-shim");
    let dir = tempfile::tempdir().unwrap();
    let machine = dual_socket_in(dir.path());
    let ok = Command::new(bin)
        .args(["check-config", "--config"])
        .arg(root().join("packaging/config/config.yaml"))
        .arg("--topology")
        .arg(&machine)
        .output()
        .unwrap();
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "OK\n");
    let bad = Command::new(bin)
        .args(["check-config", "--kubelet-config"])
        .arg(shared("examples/kubelet-pod-scope.yaml"))
        .arg("--topology")
        .arg(&machine)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(out.starts_with("error: reservedMemory:"), "{out}");
}

/// integration/packaging.sh strips numa-shim's own keys from the example configs before decoding
/// the rest strictly as a KubeletConfiguration (integration/kubeletconfig-check); its list must
/// name every key of numa-shim's own (the keys before `apiVersion` in `KNOWN_KEYS`, except those
/// the kubelet has too).
#[test]
fn the_kubelet_field_checker_knows_every_numa_shim_key() {
    let go = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/kubeletconfig-check/main.go"
    ))
    .unwrap();
    let own = numa_shim::config::KNOWN_KEYS
        .iter()
        .take_while(|k| **k != "apiVersion")
        .filter(|k| !["containerRuntimeEndpoint", "logging"].contains(k));
    for key in own {
        assert!(
            go.contains(&format!("\"{key}\"")),
            "{key} is missing from numaShimKeys in integration/kubeletconfig-check/main.go"
        );
    }
}

//! `check-config` with `crioConfig`: CRI-O settings that fight numa-shim over cpusets are
//! warnings naming the setting, checked against the reserved CPUs numa-shim resolves; a CRI-O
//! file that cannot be read is an error. The machine is `topoDualSocketHT` (2 NUMA nodes × 6
//! CPUs) with 16Gi per node. (The same warnings from a real CRI-O's Status answer are checked
//! in tests/realruntime on CRI-O.)

use std::path::{Path, PathBuf};
use std::process::Command;

use numa_shim::cli::check_config::{check, Findings};
use numa_shim::config::{self, Config};

use crate::dual_socket_in;

/// An OpenShift-style node: management workload partitioning on CPUs 0-1, shared CPUs, infra
/// containers on 0-1, and a high-performance runtime handler (drop-in).
const CRIO_CONF: &str = r#"
[crio.runtime]
infra_ctr_cpuset = "0-1"
shared_cpuset = "10-11"

[crio.runtime.workloads.management]
activation_annotation = "target.workload.openshift.io/management"
annotation_prefix = "resources.workload.openshift.io"
[crio.runtime.workloads.management.resources]
cpushares = 0
cpuset = "0-1"
"#;
const HIGH_PERFORMANCE: &str = r#"
[crio.runtime.runtimes.high-performance]
runtime_path = "/usr/bin/runc"
allowed_annotations = ["cpu-load-balancing.crio.io", "cpu-quota.crio.io", "irq-load-balancing.crio.io", "cpu-shared.crio.io"]
"#;

fn findings(dir: &Path, numa_shim: &str) -> Findings {
    let c: Config = config::parse(numa_shim).unwrap_or_else(|e| panic!("{numa_shim}: {e}"));
    check(&c, None, &dual_socket_in(dir))
}

fn write_crio(dir: &Path) -> PathBuf {
    let conf = dir.join("crio.conf");
    std::fs::write(&conf, CRIO_CONF).unwrap();
    std::fs::create_dir_all(dir.join("crio.conf.d")).unwrap();
    std::fs::write(dir.join("crio.conf.d/99-hp.conf"), HIGH_PERFORMANCE).unwrap();
    conf
}

#[test]
fn crio_features_that_fight_numa_shim_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_crio(dir.path());
    let f = findings(
        dir.path(),
        &format!(
            "crioConfig: {}\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
            conf.display()
        ),
    );
    assert!(f.errors.is_empty(), "{f:?}");
    let crio: Vec<&String> = f
        .warnings
        .iter()
        .filter(|w| w.starts_with("crioConfig: "))
        .collect();
    let has = |needle: &str| crio.iter().any(|w| w.contains(needle));
    assert!(has("[crio.runtime.workloads.management]"), "{crio:#?}");
    assert!(has("target.workload.openshift.io/management"), "{crio:#?}");
    assert!(has("shared_cpuset = \"10-11\""), "{crio:#?}");
    assert!(
        has("runtime handler high-performance allows cpu-load-balancing.crio.io"),
        "{crio:#?}"
    );
    assert!(
        has("irq-load-balancing.crio.io (moves device interrupts"),
        "{crio:#?}"
    );
    assert!(
        has("infra_ctr_cpuset = \"0-1\" is not within numa-shim's reserved CPUs (0)"),
        "{crio:#?}"
    );
    assert_eq!(crio.len(), 4, "{crio:#?}");

    // Reserving the infra CPUs settles that one.
    let f = findings(
        dir.path(),
        &format!(
            "crioConfig: {}\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0-1\"\n",
            conf.display()
        ),
    );
    assert!(
        !f.warnings.iter().any(|w| w.contains("infra_ctr_cpuset")),
        "{f:?}"
    );
}

#[test]
fn without_crio_config_nothing_is_read() {
    let dir = tempfile::tempdir().unwrap();
    write_crio(dir.path());
    let f = findings(
        dir.path(),
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
    );
    assert!(
        f.warnings.iter().all(|w| !w.starts_with("crioConfig")),
        "{f:?}"
    );
}

#[test]
fn unreadable_or_invalid_crio_config_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = findings(
        dir.path(),
        "crioConfig: /nonexistent/crio.conf\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
    );
    assert!(
        f.errors
            .iter()
            .any(|e| e.starts_with("crioConfig: ") && e.contains("/nonexistent/crio.conf")),
        "{f:?}"
    );
    let bad = dir.path().join("bad.conf");
    std::fs::write(&bad, "[crio.runtime]\nshared_cpuset = [1]\n").unwrap();
    let f = findings(
        dir.path(),
        &format!(
            "crioConfig: {}\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
            bad.display()
        ),
    );
    assert!(
        f.errors
            .iter()
            .any(|e| e.contains("bad.conf") && e.contains("crio.runtime.shared_cpuset")),
        "{f:?}"
    );
    let errors: Vec<String> = config::parse("crioConfig: etc/crio.conf\n")
        .unwrap()
        .validate()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        ["crioConfig: \"etc/crio.conf\" must be an absolute path"]
    );
}

#[test]
fn the_cli_flag_names_the_crio_config() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_crio(dir.path());
    let numa_shim = dir.path().join("numa-shim.yaml");
    std::fs::write(
        &numa_shim,
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_numa-shim"))
        .arg("check-config")
        .arg("--config")
        .arg(&numa_shim)
        .arg("--topology")
        .arg(dual_socket_in(dir.path()))
        .arg("--crio-config")
        .arg(&conf)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("OK\n"), "{stdout}");
    assert_eq!(
        stdout.matches("warning: crioConfig: ").count(),
        4,
        "{stdout}"
    );
}

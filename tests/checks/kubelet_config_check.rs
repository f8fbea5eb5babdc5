//! What numa-shim says about the kubelet it sits under, given the kubelet's configuration
//! (`--kubelet-config`, with its drop-in directory `--kubelet-config-dir`): `check-config` refuses
//! a kubelet that runs its own CPU or Memory Manager or reserves fewer CPUs than numa-shim (it
//! then admits pods numa-shim can only refuse), naming what to mirror; `serve` starts but logs it
//! loudly. Seen with the real kubelet (tests/realkubelet): a 2-CPU pod the kubelet admits by its
//! allocatable stays Pending when numa-shim reserves a CPU the kubelet does not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use numa_shim::testing::process::{serve_args, ShimProcess};

const BIN: &str = env!("CARGO_BIN_EXE_numa-shim");
const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// This project's machine ([`crate::two_cpus`]), written to `dir/topology.json`.
fn machine(dir: &Path) -> PathBuf {
    let path = dir.join("topology.json");
    std::fs::write(&path, crate::two_cpus().to_string()).unwrap();
    path
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `check-config ARGS --topology T`: (exit code, stdout).
fn check_config(dir: &Path, args: &[&Path]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("check-config");
    for pair in args.chunks(2) {
        cmd.arg(pair[0]).arg(pair[1]);
    }
    let out = cmd.arg("--topology").arg(machine(dir)).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_kubelet_that_counts_the_cpus_numa_shim_reserves_is_refused_naming_the_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let shim = write(
        d,
        "numa-shim.yaml",
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ntopologyManagerPolicy: single-numa-node\n",
    );
    // The kubelet as this project ran it first: managers off, nothing reserved.
    let kubelet = write(
        d,
        "kubelet.yaml",
        &format!("{HEADER}cpuManagerPolicy: none\nmemoryManagerPolicy: None\n"),
    );
    let (code, out) = check_config(
        d,
        &[
            Path::new("--config"),
            &shim,
            Path::new("--kubelet-config"),
            &kubelet,
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("error: kubelet reservedSystemCPUs: the kubelet reserves 0 CPUs, numa-shim reserves 1 (0)"),
        "{out}"
    );
    assert!(out.contains("reservedSystemCPUs: \"0\""), "{out}");
    assert!(
        out.contains("kubeReserved/systemReserved cpu adding up to 1"),
        "{out}"
    );
    // numa-shim's own fields are the ones in force: the kubelet file's `none` does not turn
    // placement off.
    assert!(!out.contains("cpuManagerPolicy"), "{out}");

    let mirrored = write(
        d,
        "kubelet-mirrored.yaml",
        &format!("{HEADER}cpuManagerPolicy: none\nreservedSystemCPUs: \"0\"\n"),
    );
    let (code, out) = check_config(
        d,
        &[
            Path::new("--config"),
            &shim,
            Path::new("--kubelet-config"),
            &mirrored,
        ],
    );
    assert_eq!((code, out.as_str()), (0, "OK\n"));
}

#[test]
fn a_kubelet_running_its_own_managers_is_refused_unless_a_drop_in_turns_them_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The kubelet's main file keeps the settings numa-shim takes over.
    let main = write(
        d,
        "config.yaml",
        &format!(
            "{HEADER}cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nmemoryManagerPolicy: Static\n\
             reservedMemory: [{{numaNode: 0, limits: {{memory: 100Mi}}}}]\n\
             topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n"
        ),
    );
    let (code, out) = check_config(d, &[Path::new("--kubelet-config"), &main]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "error: kubelet cpuManagerPolicy: the kubelet runs its own CPU manager (\"static\")"
        ),
        "{out}"
    );
    assert!(
        out.contains("error: kubelet memoryManagerPolicy: the kubelet runs its own memory manager (\"Static\")"),
        "{out}"
    );
    // The packaged drop-in turns them off: numa-shim sees it through the drop-in directory.
    let conf_d = d.join("kubelet.conf.d");
    std::fs::create_dir(&conf_d).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("packaging/kubelet/kubelet.conf.d/10-numa-shim.conf"),
        conf_d.join("10-numa-shim.conf"),
    )
    .unwrap();
    let (code, out) = check_config(
        d,
        &[
            Path::new("--kubelet-config"),
            &main,
            Path::new("--kubelet-config-dir"),
            &conf_d,
        ],
    );
    assert_eq!((code, out.as_str()), (0, "OK\n"));
    // A later drop-in that turns the CPU manager back on wins, as in the kubelet.
    write(
        &conf_d,
        "20-local.conf",
        &format!("{HEADER}cpuManagerPolicy: static\n"),
    );
    let (code, out) = check_config(
        d,
        &[
            Path::new("--kubelet-config"),
            &main,
            Path::new("--kubelet-config-dir"),
            &conf_d,
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("20-local.conf") || out.contains("kubelet.conf.d/*.conf"),
        "{out}"
    );
}

#[tokio::test]
async fn serve_says_loudly_that_the_kubelet_runs_its_own_cpu_manager() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let main = write(
        d,
        "config.yaml",
        &format!("{HEADER}cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"),
    );
    let (main, machine, state) = (
        main.display().to_string(),
        machine(d).display().to_string(),
        d.join("state").display().to_string(),
    );
    let flags = [
        "--kubelet-config",
        &main,
        "--topology",
        &machine,
        "--state-dir",
        &state,
        "--pod-resources-socket",
        "none",
    ];
    let socket = d.join("cri.sock");
    let mut serve = ShimProcess::spawn(
        Path::new(BIN),
        serve_args(&socket, &d.join("no-runtime.sock"), &flags),
        &socket,
        &d.join("serve.log"),
    );
    // The check runs before recovery, which waits for the (absent) runtime.
    tokio::time::sleep(Duration::from_secs(3)).await;
    serve.kill9();
    let log = serve.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("THE KUBELET IS NOT SET UP FOR NUMA-SHIM"))
        .unwrap_or_else(|| panic!("no warning in:\n{log}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("field=\"cpuManagerPolicy\""), "{line}");
}

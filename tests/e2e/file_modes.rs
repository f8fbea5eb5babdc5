//! The files `numa-shim serve` makes are as safe as its sockets, whatever umask it is started
//! with: the binary runs under `umask 000` in front of the in-process fake runtime, places a
//! pod (so the checkpoint names it), and every directory and file it created is checked.

use numa_shim::testing::e2e as support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use numa_shim::testing::process::ShimProcess;
use support::harness::{fixture, kubelet_yaml, Kubelet};
use support::kubelet::{pod_def, Res, GI};
use support::runtime::{Fake, Runtime};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_under_umask_000_creates_owner_only_state() {
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    std::fs::write(&machine, fixture("topoDualSocketHT").to_json().unwrap()).unwrap();
    let config = dir.path().join("kubelet.yaml");
    std::fs::write(&config, kubelet_yaml("single-numa-node", "pod", "")).unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock"), Fake::default()).await;
    let run = dir.path().join("run/numa-shim");
    let listen = run.join("cri.sock");
    let state = dir.path().join("lib/numa-shim");
    let log = dir.path().join("serve.log");
    let mut args = vec![
        "-c".to_string(),
        "umask 000 && exec \"$0\" \"$@\"".to_string(),
        env!("CARGO_BIN_EXE_numa-shim").to_string(),
    ];
    args.extend(crate::serve_args(
        &listen,
        &runtime.path,
        &machine,
        &config,
        &state,
        &[
            "--pod-knowledge",
            "cri",
            "--kubelet-pod-resources-socket",
            "none",
        ],
    ));
    let mut serve = ShimProcess::start(Path::new("sh"), args, &listen, &log).await;
    let podres = state.join("pod-resources/kubelet.sock");
    for _ in 0..400 {
        if podres.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kubelet = Kubelet::connect(&listen).await;
    let result = kubelet
        .start_pod(&pod_def("named").container("main", Res::guaranteed(2000, GI)))
        .await;
    serve.kill9();
    result.unwrap();

    let checkpoint = state.join("numa-shim-state.json");
    let text = std::fs::read_to_string(&checkpoint).unwrap();
    assert!(text.contains("named"), "the checkpoint names the pod");
    let found = [
        ("state dir", mode(&state)),
        ("checkpoint", mode(&checkpoint)),
        ("pod-resources dir", mode(podres.parent().unwrap())),
        ("pod-resources socket", mode(&podres)),
        ("run dir", mode(&run)),
        ("cri socket", mode(&listen)),
    ];
    let want = [
        ("state dir", 0o700),
        ("checkpoint", 0o600),
        ("pod-resources dir", 0o700),
        ("pod-resources socket", 0o600),
        ("run dir", 0o750),
        ("cri socket", 0o660),
    ];
    let show = |v: &[(&str, u32)]| {
        v.iter()
            .map(|(n, m)| format!("{n} {m:o}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert_eq!(show(&found), show(&want));
    runtime.stop().await;
}

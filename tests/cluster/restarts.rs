//! numa-shim restarts (SIGTERM and SIGKILL, and down for a while) while pods are created and
//! deleted through the API server: after each, numa-shim holds exactly the pods the API server
//! has running, the kernel shows its decisions, and no CPU it gave a pod is in another pod's
//! cpuset (nothing lost, nothing granted twice).

use std::time::Duration;

use super::pods;
use super::rig::*;
use super::rk::SERIAL;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn numa_shim_restarts_while_pods_come_and_go_through_the_api_server() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start("cl-restarts").await;
    let image = c.env.image.clone();
    c.apply(&[pods::best_effort(&image)]);
    c.wait_running(&["best-effort"]).await;

    // A clean restart (SIGTERM) right after a Guaranteed pod is applied.
    c.apply(&[pods::guaranteed(&image)]);
    c.shim.terminate();
    c.shim.start_again().await;
    c.wait_running(&["best-effort", "guaranteed"]).await;
    c.wait_kernel(&[("best-effort", "app", "0"), ("guaranteed", "app", "1")])
        .await;
    c.assert_consistent().await;

    // A crash (SIGKILL) while one pod goes and another comes for its CPU.
    c.delete(&["guaranteed"]);
    c.apply(&[pods::pod_level_resource_demo(&image)]);
    c.shim.kill9();
    c.shim.start_again().await;
    c.wait_running(&["best-effort", "pod-level-resource-demo"])
        .await;
    c.wait_kernel(&[
        ("best-effort", "app", "0"),
        ("pod-level-resource-demo", "worker", "1"),
        ("pod-level-resource-demo", "telemetry-sidecar", "1"),
    ])
    .await;
    c.assert_consistent().await;

    // Down for a while (crashed) while the same happens: the kubelet's calls fail meanwhile.
    c.shim.kill9();
    c.delete(&["pod-level-resource-demo"]);
    c.apply(&[pods::pod_scope_mixed(&image)]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    c.shim.start_again().await;
    c.wait_running(&["best-effort", "pod-scope-mixed"]).await;
    c.wait_kernel(&[
        ("best-effort", "app", "0"),
        ("pod-scope-mixed", "metrics-sidecar", "1"),
        ("pod-scope-mixed", "logging-sidecar", "1"),
        ("pod-scope-mixed", "main-app", "1"),
    ])
    .await;
    c.assert_consistent().await;

    // Stopped cleanly while the last placed pod is deleted: its CPU comes back after the start.
    c.shim.terminate();
    c.delete(&["pod-scope-mixed"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.shim.start_again().await;
    c.wait_running(&["best-effort"]).await;
    c.wait_kernel(&[("best-effort", "app", "0-1")]).await;
    c.assert_consistent().await;
    let view = c.placement();
    assert_eq!(view.pods.len(), 1, "{:?}", view.pods);
    assert_eq!(view.shared_cpus, "0-1");
}

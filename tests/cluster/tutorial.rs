//! The tutorial's pods applied with `kubectl` are placed as the static pods of tests/realkubelet
//! are (the same expected cpusets), `kubectl get pod -o wide` shows them Running on the node,
//! and `kubectl delete namespace plrm-tutorial` gives every CPU back.

use numa_shim::inspect::Owner;

use super::pods;
use super::rig::*;
use super::rk::SERIAL;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn tutorial_pods_from_kubectl_apply_are_placed_and_the_namespace_gives_every_cpu_back() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start("cl-tutorial").await;
    let image = c.env.image.clone();

    // Step 1: the pod-level-resource-demo beside a BestEffort pod.
    c.apply(&[
        pods::best_effort(&image),
        pods::pod_level_resource_demo(&image),
    ]);
    let wide = c
        .wait_running(&["best-effort", "pod-level-resource-demo"])
        .await;
    eprintln!("kubectl get pod -o wide:\n{wide}");
    let seen = c
        .wait_kernel(&[
            ("best-effort", "app", "0"),
            ("pod-level-resource-demo", "worker", "1"),
            ("pod-level-resource-demo", "telemetry-sidecar", "1"),
        ])
        .await;
    // The budget's quota (1 CPU) on each container, none on the BestEffort pod.
    assert_eq!(seen["pod-level-resource-demo"]["worker"].quota, 100_000);
    assert_eq!(seen["best-effort"]["app"].quota, -1);
    c.assert_consistent().await;
    let sources: Vec<String> = c
        .placement()
        .pods
        .iter()
        .map(|p| p.source.clone())
        .collect();
    assert!(
        sources.iter().all(|s| s == "apiserver"),
        "pod specs from the API server: {sources:?}"
    );

    // The API server watcher listed once and has seen the pods' events since.
    let metrics = c.shim.metrics_text();
    let watch = |what: &str| {
        super::rk::sample(
            &metrics,
            &format!("numa_shim_apiserver_watch_total{{what=\"{what}\"}}"),
        )
    };
    assert!(watch("list") >= 1.0, "{metrics}");
    assert!(watch("event") >= 2.0, "{metrics}");

    // Step 2: deleting the demo gives its CPU back to the shared pool.
    c.delete(&["pod-level-resource-demo"]);
    c.wait_kernel(&[("best-effort", "app", "0-1")]).await;
    c.wait_running(&["best-effort"]).await;
    c.assert_consistent().await;

    // Step 3: pod-scope-mixed: the sidecars share the budget, main-app keeps its own quota.
    c.apply(&[pods::pod_scope_mixed(&image)]);
    c.wait_running(&["best-effort", "pod-scope-mixed"]).await;
    let seen = c
        .wait_kernel(&[
            ("best-effort", "app", "0"),
            ("pod-scope-mixed", "metrics-sidecar", "1"),
            ("pod-scope-mixed", "logging-sidecar", "1"),
            ("pod-scope-mixed", "main-app", "1"),
        ])
        .await;
    assert_eq!(seen["pod-scope-mixed"]["main-app"].quota, 50_000);
    c.assert_consistent().await;

    // Step 4: a classic Guaranteed pod in its place: an exclusive CPU, no quota.
    c.delete(&["pod-scope-mixed"]);
    c.apply(&[pods::guaranteed(&image)]);
    c.wait_running(&["best-effort", "guaranteed"]).await;
    let seen = c
        .wait_kernel(&[("best-effort", "app", "0"), ("guaranteed", "app", "1")])
        .await;
    assert_eq!(seen["guaranteed"]["app"].quota, -1);
    c.assert_consistent().await;

    // `kubectl delete namespace` (waiting, as a user does): every CPU is back.
    c.cp.kubectl(&["delete", "namespace", NAMESPACE, "--timeout=120s"]);
    let view = c.placement();
    assert!(view.pods.is_empty(), "pods left: {:?}", view.pods);
    assert_eq!(view.shared_cpus, "0-1", "{view:?}");
    for cpu in view.numa_nodes.iter().flat_map(|n| &n.cpus) {
        assert!(
            matches!(cpu.owner, Owner::Reserved | Owner::Shared),
            "CPU {} still held: {:?}",
            cpu.id,
            cpu.owner
        );
    }
    assert!(c.kernel().await.is_empty(), "containers left running");
    let metrics = c.shim.metrics_text();
    for pool in ["exclusive", "pod"] {
        let series = format!("numa_shim_pool_cpus{{numa_node=\"0\",pool=\"{pool}\"}}");
        assert!(metrics.contains(&series), "no {series}\n{metrics}");
        assert_eq!(
            super::rk::sample(&metrics, &series),
            0.0,
            "{series}\n{metrics}"
        );
    }
}

//! The tutorial's pods (integration/kubelet-pods) in pod and container scope, through numa-shim
//! and through the kubelet's own managers: the kernel, the decisions and PodResources must agree.

use super::oracle::*;
use super::*;

fn pod_scope_steps(image: &str, inferred: bool) -> Vec<Step> {
    let shared1 = seen("1", "0", 100_000);
    let be = |cpus: &str| ("best-effort", "app", seen(cpus, "0", -1));
    vec![
        Step {
            title: "pod-level-resource-demo beside a BestEffort pod",
            add: vec![
                ("best-effort.yaml", pods::best_effort(image)),
                ("demo.yaml", pods::pod_level_resource_demo(image)),
            ],
            remove: vec![],
            running: vec!["best-effort", "pod-level-resource-demo"],
            expect: expect(&[
                be("0"),
                ("pod-level-resource-demo", "worker", shared1.clone()),
                (
                    "pod-level-resource-demo",
                    "telemetry-sidecar",
                    shared1.clone(),
                ),
            ]),
        },
        Step {
            title: "removing the demo releases its CPU: the shared pool grows",
            add: vec![],
            remove: vec!["demo.yaml"],
            running: vec!["best-effort"],
            expect: expect(&[be("0-1")]),
        },
        Step {
            title: "pod-scope-mixed: main-app's own memory, the CPU shared in the budget",
            add: vec![("mixed.yaml", pods::pod_scope_mixed(image))],
            remove: vec![],
            running: vec!["best-effort", "pod-scope-mixed"],
            expect: expect(&[
                be("0"),
                ("pod-scope-mixed", "metrics-sidecar", shared1.clone()),
                ("pod-scope-mixed", "logging-sidecar", shared1.clone()),
                ("pod-scope-mixed", "main-app", seen("1", "0", 50_000)),
            ]),
        },
        Step {
            title: "a classic Guaranteed pod: an exclusive CPU, no quota",
            add: vec![("guaranteed.yaml", pods::guaranteed(image))],
            remove: vec!["mixed.yaml"],
            running: vec!["best-effort", "guaranteed"],
            expect: expect(&[
                be("0"),
                (
                    "guaranteed",
                    "app",
                    seen("1", "0", if inferred { 100_000 } else { -1 }),
                ),
            ]),
        },
        Step {
            title: "empty-shared-pool is refused",
            add: vec![("empty.yaml", pods::empty_shared_pool(image))],
            remove: vec!["guaranteed.yaml"],
            running: vec!["best-effort"],
            expect: if inferred {
                // Admitted at its sandbox from the sandbox's resources, refused at main-app:
                // the sidecar runs in the budget.
                expect(&[be("0"), ("empty-shared-pool", "logging-sidecar", shared1)])
            } else {
                expect(&[be("0-1")])
            },
        },
    ]
}

/// Every pod numa-shim admitted names where its spec came from.
fn assert_sources(env: &Env, shim: &Shim) {
    let want = if env.has_pods_api() {
        "pods-api"
    } else {
        "inferred"
    };
    let view = shim.placement();
    for pod in view["pods"].as_array().cloned().unwrap_or_default() {
        assert_eq!(pod["source"], want, "{pod}");
    }
    let metrics = shim.metrics_text();
    assert!(
        sample(&metrics, &format!("numa_shim_pods{{source=\"{want}\"}}")) >= 1.0,
        "{metrics}"
    );
    let log = shim.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("admitted") && l.contains(&format!("source=\"{want}\""))),
        "{}",
        tail(&log, 40)
    );
}

#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn tutorial_pods_in_pod_scope_match_the_kubelets_own_managers() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let inferred = !env.has_pods_api();
    let steps = pod_scope_steps(&env.image, inferred);
    let shim_run = {
        let rig = rig(&env, "pod-scope", Mode::NumaShim, &settings("pod")).await;
        let seen = run_steps(&env, &rig, &steps).await;
        assert_sources(&env, &rig.shim);
        // The refused pod: shown with the kubelet's reason, retried by the kubelet, Pending.
        let refused = wait_refusals(&rig.shim, "empty-shared-pool", 2).await;
        assert_eq!(refused["reason"], "TopologyAffinityError", "{refused}");
        let pod = rig.kubelet.pod_named("empty-shared-pool").unwrap();
        assert_eq!(pod["status"]["phase"], "Pending", "{pod}");
        assert!(
            !rig.shim.log_text().contains("THE KUBELET IS NOT SET UP"),
            "the kubelet's drop-in turns its managers off"
        );
        seen
    };
    if !env.has_reference_managers() {
        eprintln!(
            "kubelet {}: its own managers are not v1.37's, no reference run",
            env.version
        );
        return;
    }
    let reference = {
        let rig = rig(&env, "pod-scope-ref", Mode::Reference, &settings("pod")).await;
        let seen = run_steps(&env, &rig, &steps).await;
        // The kubelet refuses the pod itself, with the reason numa-shim gave.
        let pod = wait_phase(&rig.kubelet, "empty-shared-pool", "Failed").await;
        assert_eq!(pod["status"]["reason"], "TopologyAffinityError", "{pod}");
        seen
    };
    compare(&steps, &shim_run, &reference);
}

#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn container_scope_pod_matches_the_kubelets_own_managers() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let steps = vec![Step {
        title: "container-scope-mixed beside a BestEffort pod",
        add: vec![
            ("best-effort.yaml", pods::best_effort(&env.image)),
            (
                "container-scope.yaml",
                pods::container_scope_mixed(&env.image),
            ),
        ],
        remove: vec![],
        running: vec!["best-effort", "container-scope-mixed"],
        expect: expect(&[
            ("best-effort", "app", seen("0", "0", -1)),
            (
                "container-scope-mixed",
                "infrastructure-sidecar",
                seen("1", "0", -1),
            ),
            ("container-scope-mixed", "worker-1", seen("0", "0", 100_000)),
            ("container-scope-mixed", "worker-2", seen("0", "0", 100_000)),
        ]),
    }];
    let shim_run = {
        let rig = rig(&env, "ctr-scope", Mode::NumaShim, &settings("container")).await;
        run_steps(&env, &rig, &steps).await
    };
    if !env.has_reference_managers() {
        eprintln!(
            "kubelet {}: its own managers are not v1.37's, no reference run",
            env.version
        );
        return;
    }
    let reference = {
        let rig = rig(
            &env,
            "ctr-scope-ref",
            Mode::Reference,
            &settings("container"),
        )
        .await;
        run_steps(&env, &rig, &steps).await
    };
    compare(&steps, &shim_run, &reference);
}

//! Minutes of the kubelet's periodic calls through numa-shim, against an explicit list of the
//! kubelet errors expected on this machine.

use std::collections::BTreeMap;

use super::*;

/// Runtime errors the kubelet logs here that are not numa-shim's, each with why.
const EXPECTED_KUBELET_ERRORS: &[(&str, &str)] = &[
    (
        "RuntimeConfig from runtime service failed",
        "containerd 1.6 does not implement RuntimeConfig; the kubelet uses its cgroupDriver",
    ),
    (
        "Failed to set rlimit on max file handles",
        "no CAP_SYS_RESOURCE on this machine",
    ),
    (
        "Failed to ensure process in container with oom score",
        "no CAP_SYS_RESOURCE and no init pid namespace here",
    ),
    (
        "Skipping pod synchronization",
        "at start, before the first PLEG relist",
    ),
    (
        "Failed to read data from checkpoint",
        "first start: no device-manager checkpoint yet",
    ),
    (
        "failed to check if we have separate container filesystem",
        "containerd's image filesystem has no imagefs label",
    ),
    (
        "failed to check if node is newer; using informer node",
        "standalone mode: the node object never came from an API server, so it has no \
         resourceVersion to compare (pkg/kubelet/kubelet_nodecache.go)",
    ),
];

/// Five minutes (NUMA_SHIM_IT_SOAK_SECS) of the kubelet's periodic calls through numa-shim
/// (status, relists, stats, image filesystem, pod sandbox and container status) with running
/// pods: no runtime error in the kubelet's log beyond EXPECTED_KUBELET_ERRORS, no numa-shim
/// warning, no drift, no container restart, placements unchanged.
#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn periodic_calls_through_numa_shim_leave_no_runtime_error() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let rig = rig(&env, "soak", Mode::NumaShim, &settings("pod")).await;
    rig.kubelet
        .add("best-effort.yaml", &pods::best_effort(&env.image));
    rig.kubelet
        .add("mixed.yaml", &pods::pod_scope_mixed(&env.image));
    rig.kubelet
        .wait_running(&["best-effort", "pod-scope-mixed"], &[])
        .await;
    wait_cpus(&env, &rig.kubelet, "best-effort", "0").await;
    let before = kernel(&env, &rig.kubelet).await;
    let restarts_before: BTreeMap<String, _> = rig
        .kubelet
        .pods()
        .iter()
        .map(|p| (short_name(p), restarts(p)))
        .collect();
    let log_start = rig.kubelet.log_text().len();
    eprintln!("soaking for {:?}", env.soak);
    tokio::time::sleep(env.soak).await;

    let log = rig.kubelet.log_text();
    eprintln!(
        "kubelet log lines during the soak: {}",
        log[log_start..].lines().count()
    );
    let unexpected: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with('E'))
        .filter(|l| !EXPECTED_KUBELET_ERRORS.iter().any(|(m, _)| l.contains(m)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "kubelet errors:\n{}",
        unexpected.join("\n")
    );
    let shim_log = rig.shim.log_text();
    let warnings: Vec<&str> = shim_log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        // A fresh state directory: nothing to recover.
        .filter(|l| !l.contains("rebuilding state from the runtime problem=no checkpoint"))
        // The CRI-O harness turns on, in a form no pod of the tests uses, the CRI-O CPU features
        // numa-shim warns about at start (integration/lib/crio.sh, all named numa-shim-it...),
        // so that tests/realruntime can check those warnings.
        .filter(|l| !(l.contains("serve::crio_check") && l.contains("numa-shim-it")))
        .collect();
    assert!(
        warnings.is_empty(),
        "numa-shim warnings:\n{}",
        warnings.join("\n")
    );
    let metrics = rig.shim.metrics_text();
    assert_eq!(
        sample(
            &metrics,
            "numa_shim_drift_corrections_total{resource_name=\"cpu\"}"
        ),
        0.0
    );
    // The periodic calls did go through numa-shim.
    for method in [
        "ListPodSandbox",
        "ListContainers",
        "PodSandboxStatus",
        "ContainerStatus",
        "Status",
        "ImageFsInfo",
    ] {
        let series = format!("numa_shim_relay_shim_duration_seconds_count{{method=\"{method}\"}}");
        assert!(
            sample(&metrics, &series) > 0.0,
            "no {method} calls:\n{metrics}"
        );
    }
    assert_eq!(
        kernel(&env, &rig.kubelet).await,
        before,
        "placements unchanged"
    );
    let restarts_after: BTreeMap<String, _> = rig
        .kubelet
        .pods()
        .iter()
        .map(|p| (short_name(p), restarts(p)))
        .collect();
    assert_eq!(restarts_after, restarts_before, "no container restarted");
}

//! A pod numa-shim refuses, as the user sees it: `kubectl describe pod` shows numa-shim's
//! Warning Event with the kubelet's reason and message, the pod ends Failed with that reason
//! (as the kubelet's own rejectPod ends it), and the kubelet stops asking for its sandbox.

use std::time::{Duration, Instant};

use super::pods;
use super::rig::*;
use super::rk::{sample, SERIAL};

const REASON: &str = "TopologyAffinityError";
const MESSAGE: &str =
    "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager";

/// RunPodSandbox calls numa-shim answered (all of them pass through it to the runtime or end
/// in it).
fn run_pod_sandbox_calls(c: &Cluster) -> f64 {
    sample(
        &c.shim.metrics_text(),
        "numa_shim_relay_shim_duration_seconds_count{method=\"RunPodSandbox\"}",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn a_refused_pod_shows_the_kubelets_reason_ends_failed_and_is_not_retried() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start("cl-refusal").await;
    let image = c.env.image.clone();
    c.apply(&[pods::best_effort(&image)]);
    c.wait_running(&["best-effort"]).await;

    c.apply(&[pods::empty_shared_pool(&image)]);
    let phase = || {
        c.kubectl(&[
            "get",
            "pod",
            "empty-shared-pool",
            "-o",
            "jsonpath={.status.phase}/{.status.reason}/{.status.message}",
        ])
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while phase() != format!("Failed/{REASON}/Pod was rejected: {MESSAGE}") {
        assert!(
            Instant::now() < deadline,
            "empty-shared-pool is {}\nkubelet log:\n{}",
            phase(),
            super::rk::tail(&c.kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let describe = c.kubectl(&["describe", "pod", "empty-shared-pool"]);
    eprintln!("kubectl describe pod empty-shared-pool:\n{describe}");
    let field = |name: &str| {
        describe
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")).map(str::trim))
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(field("Status"), "Failed", "{describe}");
    assert_eq!(field("Reason"), REASON, "{describe}");
    assert_eq!(field("Message"), format!("Pod was rejected: {MESSAGE}"));
    let events: Vec<&str> = describe
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .collect();
    assert!(
        events.iter().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.first() == Some(&"Warning")
                && cols.get(1) == Some(&REASON)
                && l.contains("numa-shim")
                && l.ends_with(MESSAGE)
        }),
        "no Warning {REASON} Event from numa-shim:\n{describe}"
    );

    // The kubelet tore the pod down: no more RunPodSandbox over two of its retry periods
    // (10-15 s each) — with a status-only patch it retried every 10-15 s for ever.
    let refusals = |c: &Cluster| {
        c.shim
            .log_text()
            .lines()
            .filter(|l| l.contains("sandbox refused") && l.contains(REASON))
            .count()
    };
    let (calls, refused) = (run_pod_sandbox_calls(&c), refusals(&c));
    tokio::time::sleep(Duration::from_secs(32)).await;
    assert_eq!(
        (run_pod_sandbox_calls(&c), refusals(&c)),
        (calls, refused),
        "RunPodSandbox went on after the pod ended Failed"
    );
    assert!(refused <= 2, "{refused} refusals before the pod ended");
    assert_eq!(
        phase(),
        format!("Failed/{REASON}/Pod was rejected: {MESSAGE}")
    );
    // The writer's counters: one Event, one status, nothing failed.
    let metrics = c.shim.metrics_text();
    for (outcome, want) in [("event", 1.0), ("status", 1.0), ("failure", 0.0)] {
        let series = format!("numa_shim_refusal_reports_total{{outcome=\"{outcome}\"}}");
        assert_eq!(sample(&metrics, &series), want, "{series}\n{metrics}");
    }
    // The BestEffort pod is untouched and numa-shim holds nothing of the refused one.
    assert_eq!(
        c.kubectl(&[
            "get",
            "pod",
            "best-effort",
            "-o",
            "jsonpath={.status.phase}"
        ]),
        "Running"
    );
    c.assert_consistent().await;
}

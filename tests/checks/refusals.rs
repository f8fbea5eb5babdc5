//! A pod numa-shim refuses is retried by the kubelet for ever (RunPodSandbox every 10–15 s, as
//! seen with the real kubelet in tests/realkubelet): each retry must be cheap and the refusal
//! visible. The placement hook is driven directly with the kubelet's RunPodSandbox requests.
//!
//! Machine: 2 CPUs on one NUMA node (this project's), CPU 0 reserved, pod scope,
//! single-numa-node, static CPU and memory policies: one CPU to give.

use std::sync::Arc;

use numa_shim::k8s::{KubeletConfiguration, Pod};
use numa_shim::knowledge::{Knowledge, PodCache, SpecOrigin, Watched};
use numa_shim::lifecycle::store::CHECKPOINT_NAME;
use numa_shim::lifecycle::{Placer, Registry, Store};
use numa_shim::placement::node::Node;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::LifecycleHook;
use numa_shim::relay::{CriRequest, Decision, Hook};
use numa_shim::state::Checkpoint;
use numa_shim::telemetry::Metrics;
use numa_shim::topology::Topology;

const KUBELET: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
                       topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n\
                       memoryManagerPolicy: Static\n\
                       reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n";

/// The tutorial's empty-shared-pool scaled to one CPU: main-app takes the whole budget while a
/// sidecar needs the shared pool.
const EMPTY_SHARED_POOL: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: empty-shared-pool, uid: esp}\nspec:\n  resources:\n    requests: {cpu: \"1\", memory: 256Mi}\n    limits: {cpu: \"1\", memory: 256Mi}\n  initContainers:\n  - name: logging-sidecar\n    restartPolicy: Always\n  containers:\n  - name: main-app\n    resources:\n      requests: {cpu: \"1\", memory: 128Mi}\n      limits: {cpu: \"1\", memory: 128Mi}\n";

fn machine() -> Topology {
    serde_json::from_value(crate::two_cpus()).unwrap()
}

fn sandbox(uid: &str, name: &str) -> CriRequest {
    CriRequest::RunPodSandbox(Box::new(cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

fn render(metrics: &Metrics, prefix: &str) -> Vec<String> {
    metrics
        .render()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_refused_pod_is_counted_shown_and_answered_again_without_deciding() {
    let dir = tempfile::tempdir().unwrap();
    let config = KubeletConfiguration::from_yaml(KUBELET)
        .unwrap()
        .resolve(&machine())
        .unwrap()
        .config;
    let cache = Arc::new(PodCache::default());
    let spec = Pod::all_from_yaml(EMPTY_SHARED_POOL).unwrap()[0]
        .to_pod_spec()
        .unwrap();
    cache.insert(spec);
    let metrics = Arc::new(Metrics::new());
    let placer = Arc::new(Placer::new(
        Registry::new(Node::new(machine(), config).unwrap()),
        Store::new(Checkpoint::new(dir.path(), CHECKPOINT_NAME)),
        Knowledge::Watched(vec![Watched {
            origin: SpecOrigin::PodsApi,
            cache,
        }]),
        metrics.clone(),
    ));
    let hook = LifecycleHook::new(placer.clone());
    let request = sandbox("esp", "empty-shared-pool");
    let mut messages = Vec::new();
    let mut epochs = Vec::new();
    for _ in 0..5 {
        let decision = hook.before(&request).await;
        epochs.push(placer.epoch());
        match decision {
            Decision::Reject(status) => {
                assert_eq!(status.code(), tonic::Code::FailedPrecondition);
                messages.push(status.message().to_string());
            }
            other => panic!("admitted: {other:?}"),
        }
    }
    // Only the first call decided (a decision takes the registry for writing, which moves the
    // epoch PodResources caches by); the retries were answered from the refusal.
    assert!(epochs.windows(2).all(|w| w[0] == w[1]), "{epochs:?}");
    // The same answer every time: the kubelet's event stays one aggregated event.
    assert!(messages.iter().all(|m| m == &messages[0]), "{messages:?}");
    assert!(
        messages[0].starts_with("TopologyAffinityError: "),
        "{messages:?}"
    );

    let refused = placer.refusals();
    assert_eq!(refused.len(), 1);
    assert_eq!(
        (
            refused[0].name.as_str(),
            refused[0].reason.as_str(),
            refused[0].count
        ),
        ("empty-shared-pool", "TopologyAffinityError", 5)
    );
    assert_eq!(
        refused[0].message,
        "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
    );
    // One allocation error for the pod, as the kubelet counts its single attempt; the refusal
    // counter follows every retry.
    assert_eq!(
        render(
            &metrics,
            "resource_manager_allocation_errors_total{resource_name=\"cpu\",source=\"pod\"}"
        ),
        ["resource_manager_allocation_errors_total{resource_name=\"cpu\",source=\"pod\"} 1"]
    );
    assert_eq!(
        render(&metrics, "numa_shim_pod_refusals_total{"),
        ["numa_shim_pod_refusals_total{message=\"Pod Scope pod with pod-level resources failed admission under pod-scope topology manager\",namespace=\"default\",pod=\"empty-shared-pool\",reason=\"TopologyAffinityError\"} 5"]
    );
    // Nothing was written or changed for a refusal.
    assert_eq!(
        render(&metrics, "numa_shim_checkpoint_writes_total "),
        ["numa_shim_checkpoint_writes_total 0"]
    );
    assert!(placer.registry().pods().is_empty());
}

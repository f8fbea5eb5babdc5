//! The decision at RunPodSandbox takes the kubelet's devices from the placer's device source,
//! read before the registry is locked: a pod's exclusive CPUs follow its device's NUMA node, and
//! a source that fails leaves the decision with the devices known before (logged), never a
//! panic. The placement hook is driven with the kubelet's RunPodSandbox requests.
//!
//! Machine: 8 CPUs on two NUMA nodes (0-3, 4-7), CPU 0 reserved, container scope,
//! single-numa-node, static CPU policy; GPU g0 on node 0, g1 on node 1.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use numa_shim::testing::devices as fake;

use fake::FakeDevices;
use numa_shim::k8s::{KubeletConfiguration, Pod};
use numa_shim::knowledge::{Knowledge, PodCache, SpecOrigin, Watched};
use numa_shim::lifecycle::store::CHECKPOINT_NAME;
use numa_shim::lifecycle::{Placer, Registry, Store};
use numa_shim::placement::device::{Device, DeviceFacts};
use numa_shim::placement::node::Node;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::LifecycleHook;
use numa_shim::relay::{CriRequest, Decision, Hook};
use numa_shim::state::Checkpoint;
use numa_shim::telemetry::Metrics;
use numa_shim::topology::Topology;

const KUBELET: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
                       topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n";

const GPU: &str = "example.com/gpu";

fn machine() -> Topology {
    let cpus: Vec<_> = (0..8)
        .map(|id| serde_json::json!({"id": id, "core": id, "socket": id / 4, "numa": id / 4}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "cpus": cpus,
        "numa": [{"id": 0, "memory": "4Gi"}, {"id": 1, "memory": "4Gi"}]
    }))
    .unwrap()
}

fn gpu_pod_yaml(uid: &str) -> String {
    format!(
        "metadata: {{name: {uid}, uid: {uid}}}\nspec:\n  containers:\n  - name: app\n    \
         resources:\n      limits: {{cpu: \"2\", memory: 256Mi, {GPU}: \"1\"}}\n"
    )
}

fn facts(in_use: &[&str]) -> DeviceFacts {
    DeviceFacts {
        allocatable: BTreeMap::from([(
            GPU.to_string(),
            vec![
                Device {
                    id: "g0".into(),
                    numa_nodes: vec![0],
                },
                Device {
                    id: "g1".into(),
                    numa_nodes: vec![1],
                },
            ],
        )]),
        in_use: BTreeMap::from([(
            GPU.to_string(),
            in_use
                .iter()
                .map(|s| s.to_string())
                .collect::<BTreeSet<_>>(),
        )]),
        ..DeviceFacts::default()
    }
}

fn sandbox(uid: &str) -> CriRequest {
    CriRequest::RunPodSandbox(Box::new(cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: uid.into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

fn placer(source: Arc<FakeDevices>, dir: &std::path::Path, uids: &[&str]) -> Arc<Placer> {
    let config = KubeletConfiguration::from_yaml(KUBELET)
        .unwrap()
        .resolve(&machine())
        .unwrap()
        .config;
    let cache = Arc::new(PodCache::default());
    for uid in uids {
        cache.insert(
            Pod::all_from_yaml(&gpu_pod_yaml(uid)).unwrap()[0]
                .to_pod_spec()
                .unwrap(),
        );
    }
    Arc::new(
        Placer::new(
            Registry::new(Node::new(machine(), config).unwrap()),
            Store::new(Checkpoint::new(dir, CHECKPOINT_NAME)),
            Knowledge::Watched(vec![Watched {
                origin: SpecOrigin::PodsApi,
                cache,
            }]),
            Arc::new(Metrics::new()),
        )
        .with_devices(source),
    )
}

fn cpus(placer: &Placer, uid: &str) -> String {
    placer
        .registry()
        .node()
        .container(uid, "app")
        .unwrap()
        .cpus
        .to_string()
}

#[tokio::test]
async fn the_pods_cpus_follow_its_device_and_a_failing_source_keeps_the_devices_known_before() {
    let dir = tempfile::tempdir().unwrap();
    // g0 is held by another pod: the GPU and the CPUs go to node 1.
    let source = Arc::new(FakeDevices::new(facts(&["g0"])));
    let placer = placer(source.clone(), dir.path(), &["a", "b", "c"]);
    let hook = LifecycleHook::new(placer.clone());
    if let Decision::Reject(status) = hook.before(&sandbox("a")).await {
        panic!("refused: {status:?}");
    }
    assert_eq!(source.asked(), ["a"]);
    assert_eq!(cpus(&placer, "a"), "4-5");
    assert_eq!(
        placer
            .registry()
            .node()
            .container("a", "app")
            .unwrap()
            .devices[GPU],
        ["g1"]
    );
    // The source fails: the pod is still admitted, with the devices known before (g1 is now
    // a's, g0 another pod's: nothing free on any node, so no device and no preference).
    source.fail("the kubelet's PodResources socket is gone");
    match hook.before(&sandbox("b")).await {
        Decision::Reject(status) => {
            assert!(
                status.message().contains("TopologyAffinityError"),
                "{status:?}"
            )
        }
        _ => panic!("b admitted without a free device"),
    }
    assert_eq!(source.asked(), ["a", "b"]);
    // The source answers again: g0 is free now, c gets it and node 0's CPUs.
    source.set(facts(&[]));
    if let Decision::Reject(status) = hook.before(&sandbox("c")).await {
        panic!("refused: {status:?}");
    }
    assert_eq!(cpus(&placer, "c"), "1-2");
}

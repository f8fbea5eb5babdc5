//! How many durable checkpoint writes a pod start waits for: the reservation, written before
//! RunPodSandbox reaches the runtime, and nothing else. What the runtime did with the calls
//! (the sandbox's and the container's ids, stop and removal) is written afterwards by the state
//! writer, in one write for everything pending, because recovery reads it back from the runtime
//! anyway (the restart matrix in tests/realruntime/restart.rs covers a crash before that write).
//!
//! The relay with placement runs in front of the fake runtime; the state writer is started only
//! after the calls, so any write counted before then was on a call's path.

use numa_shim::testing::relay::client;
use numa_shim::testing::relay::fake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{channel, runtime_client, RunningRelay};
use fake::Runtime;
use numa_shim::k8s::{KubeletConfiguration, Pod};
use numa_shim::knowledge::{Knowledge, PodCache, SpecOrigin, Watched};
use numa_shim::lifecycle::store::CHECKPOINT_NAME;
use numa_shim::lifecycle::{Placer, Registry, Store};
use numa_shim::placement::node::Node;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::LifecycleHook;
use numa_shim::relay::RelayBuilder;
use numa_shim::state::Checkpoint;
use numa_shim::telemetry::Metrics;
use numa_shim::topology::Topology;

const KUBELET: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
                       topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n";

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, uid: web-uid}\nspec:\n  containers:\n  - name: app\n    resources:\n      requests: {cpu: \"2\", memory: 1Gi}\n      limits: {cpu: \"2\", memory: 1Gi}\n";

fn topology() -> Topology {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/topologies/topoDualSocketHT.json");
    Topology::load(&path).unwrap()
}

fn on_disk(dir: &std::path::Path) -> String {
    let value: serde_json::Value = Checkpoint::new(dir, CHECKPOINT_NAME)
        .read()
        .unwrap()
        .expect("a checkpoint");
    value.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_start_waits_for_one_durable_write() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let machine = topology();
    let config = KubeletConfiguration::from_yaml(KUBELET)
        .unwrap()
        .resolve(&machine)
        .unwrap()
        .config;
    let cache = Arc::new(PodCache::default());
    let spec = Pod::all_from_yaml(POD).unwrap()[0].to_pod_spec().unwrap();
    cache.insert(spec.clone());
    let metrics = Arc::new(Metrics::new());
    let placer = Arc::new(Placer::new(
        Registry::new(Node::new(machine, config).unwrap()),
        Store::new(Checkpoint::new(dir.path(), CHECKPOINT_NAME)),
        Knowledge::Watched(vec![Watched {
            origin: SpecOrigin::PodsApi,
            cache,
        }]),
        metrics.clone(),
    ));
    let relay = RunningRelay::start_with(
        RelayBuilder::new(dir.path().join("shim.sock"), &runtime.path)
            .hook(LifecycleHook::new(placer.clone()))
            .metrics(metrics.clone()),
    )
    .await;
    let mut client = runtime_client(channel(&relay.path).await);

    let sandbox = cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: spec.name.clone(),
                uid: spec.uid.clone(),
                namespace: spec.namespace.clone(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox_id = client
        .run_pod_sandbox(sandbox)
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    assert_eq!(
        metrics.checkpoint_writes(),
        1,
        "RunPodSandbox: the reservation, before forwarding"
    );
    let reserved = on_disk(dir.path());
    assert!(reserved.contains("web-uid"), "{reserved}");

    let create = cri::CreateContainerRequest {
        pod_sandbox_id: sandbox_id.clone(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".to_string(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let container_id = client
        .create_container(create)
        .await
        .unwrap()
        .into_inner()
        .container_id;
    assert_eq!(
        metrics.checkpoint_writes(),
        1,
        "a pod start waits for one write (StartContainer is passed through unread)"
    );
    // The commits are in memory all along: the next call sees them.
    assert_eq!(
        placer
            .registry()
            .applied(&container_id)
            .map(|c| c.cpus.len()),
        Some(2)
    );

    // The state writer catches up: one write for both commits.
    let writer = placer.clone();
    let task = tokio::spawn(async move {
        writer
            .keep_state(Duration::from_secs(60), Duration::from_millis(10))
            .await
    });
    // A write is counted when it returns, after the file is renamed into place and its folder
    // synced: the file can show the commits before the count does (seen in CI, on a busy disk).
    let deadline = Instant::now() + Duration::from_secs(10);
    while metrics.checkpoint_writes() < 2 || !on_disk(dir.path()).contains(&container_id) {
        assert!(Instant::now() < deadline, "commits never written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let text = on_disk(dir.path());
    assert!(text.contains(&sandbox_id), "{text}");
    assert_eq!(metrics.checkpoint_writes(), 2, "one write for both commits");

    // Stopping and removing the pod are recorded the same way, off the calls' path.
    task.abort();
    let _ = task.await;
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: sandbox_id.clone(),
        })
        .await
        .unwrap();
    client
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox_id.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        metrics.checkpoint_writes(),
        2,
        "stop and remove wait for none"
    );
    assert!(placer.registry().pods().is_empty(), "released in memory");
    let writer = placer.clone();
    let task = tokio::spawn(async move {
        writer
            .keep_state(Duration::from_secs(60), Duration::from_millis(10))
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while on_disk(dir.path()).contains("web-uid") {
        assert!(Instant::now() < deadline, "release never written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
}

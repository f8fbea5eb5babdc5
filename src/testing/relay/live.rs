//! Test support: a relay with the real placement hook in front of the fake runtime that does
//! not answer deadlines itself (as a grpc-go runtime whose handler hangs), the CRI requests the
//! deadline tests send, and waiting for the placer's state. Used by
//! tests/relay (cancel, deadlines, decision_off_worker).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lifecycle::Placer;
use crate::placement::config::TopologyScope;
use crate::proto::cri::v1 as cri;
use crate::relay::LifecycleHook;
use crate::relay::RelayBuilder;
use crate::telemetry::Metrics;
use prost::Message;

use super::client::RunningRelay;
use super::fake::Runtime;
use crate::testing::podresources::registry as support;

pub const RUN: &str = "/runtime.v1.RuntimeService/RunPodSandbox";
pub const CREATE: &str = "/runtime.v1.RuntimeService/CreateContainer";
pub const SETTLE: Duration = Duration::from_millis(400);

pub struct Live {
    pub dir: tempfile::TempDir,
    pub runtime: Runtime,
    pub relay: RunningRelay,
    pub placer: Arc<Placer>,
}

pub async fn live() -> Live {
    live_with(|b| b).await
}

/// [`live`] with the relay's builder adjusted by `adjust`.
pub async fn live_with(
    adjust: impl FnOnce(RelayBuilder<LifecycleHook>) -> RelayBuilder<LifecycleHook>,
) -> Live {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start_without_deadlines(&dir.path().join("runtime.sock")).await;
    let registry = support::registry_on(1, 32, TopologyScope::Pod);
    let metrics = Arc::new(Metrics::new());
    let placer = support::placer_with(registry, dir.path(), metrics.clone());
    let relay = RunningRelay::start_with(adjust(
        RelayBuilder::new(dir.path().join("shim.sock"), &runtime.path)
            .hook(LifecycleHook::new(placer.clone()))
            .metrics(metrics)
            .settle_delay(SETTLE)
            .settle_lookup_timeout(Duration::from_millis(300)),
    ))
    .await;
    Live {
        dir,
        runtime,
        relay,
        placer,
    }
}

/// A Guaranteed 2-CPU sandbox as the kubelet sends it (pod knowledge inferred from CRI).
pub fn sandbox(name: &str) -> Vec<u8> {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "ns".into(),
                attempt: 0,
            }),
            linux: Some(cri::LinuxPodSandboxConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_period: 100_000,
                    cpu_quota: 200_000,
                    cpu_shares: 2048,
                    memory_limit_in_bytes: 1 << 30,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    }
    .encode_to_vec()
}

pub fn container(sandbox_id: &str, name: &str) -> Vec<u8> {
    cri::CreateContainerRequest {
        pod_sandbox_id: sandbox_id.into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_period: 100_000,
                    cpu_quota: 200_000,
                    cpu_shares: 2048,
                    memory_limit_in_bytes: 1 << 30,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        sandbox_config: None,
    }
    .encode_to_vec()
}

impl Live {
    pub fn reserved(&self, uid: &str) -> bool {
        self.placer.registry().pods().contains_key(uid)
    }

    pub fn sandbox_of(&self, uid: &str) -> Option<String> {
        self.placer
            .registry()
            .pods()
            .get(uid)
            .and_then(|p| p.sandbox_id.clone())
    }

    /// Waits until `done` holds, up to `limit`.
    pub async fn until(&self, limit: Duration, done: impl Fn(&Self) -> bool) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if done(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done(self)
    }
}

//! `PlacementHook`: the relay hook that admits pods, places containers and releases them.
//!
//! Each call takes the registry lock only to decide or record (pure, microseconds), releases it,
//! then persists the checkpoint and wakes the pool updater. Nothing here waits on the runtime
//! while holding a lock: the relay forwards between `before` and `after`.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tonic::{Code, Status};
use tracing::{info, warn};

use super::registry::{inferred_sandbox_spec, ContainerDecision, Registry, Source};
use super::store::Store;
use crate::cpuset::CpuSet;
use crate::inspect::{admission_allocations, container_assignments};
use crate::knowledge::infer::{self, CriResources};
use crate::knowledge::Knowledge;
use crate::placement::config::TopologyScope;
use crate::placement::node::Isolation;
use crate::placement::{AdmissionError, PodSpec};
use crate::proto::cri::v1 as cri;
use crate::relay::{CriRequest, CriResponse, Decision, Hook, Outcome, Patch, ResourcesPatch};
use crate::telemetry::{self, Metrics, ResourceName};

/// Annotation numa-shim adds to containers it placed: the cpuset it decided.
pub const CPUS_ANNOTATION: &str = "numa-shim.io/cpus";
/// Annotation on containers with an exclusive slice ("true"/"false").
pub const EXCLUSIVE_ANNOTATION: &str = "numa-shim.io/exclusive";
/// Annotation numa-shim adds to sandboxes it admitted: the pod spec it admitted, as JSON.
pub const POD_ANNOTATION: &str = "numa-shim.io/pod";
/// Annotation with the container's isolation level ("host", "pod", "container").
pub const ISOLATION_ANNOTATION: &str = "numa-shim.io/isolation";

/// Everything the hook, the pool updater and recovery share.
#[derive(Debug)]
pub struct Placer {
    registry: Mutex<Registry>,
    /// Bumped on every mutable use of the registry (readers such as PodResources cache by it).
    epoch: AtomicU64,
    store: Store,
    knowledge: Knowledge,
    pool_changed: Notify,
    metrics: Arc<Metrics>,
}

impl Placer {
    pub fn new(
        registry: Registry,
        store: Store,
        knowledge: Knowledge,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            registry: Mutex::new(registry),
            epoch: AtomicU64::new(0),
            store,
            knowledge,
            pool_changed: Notify::new(),
            metrics,
        }
    }

    /// The registry, for a short critical section. Never hold the guard across an `.await`.
    pub fn registry(&self) -> RegistryGuard<'_> {
        // A panic while holding the lock cannot leave the registry half-changed (every
        // registry method is all-or-nothing), so a poisoned lock is still usable.
        let guard = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        RegistryGuard {
            guard,
            epoch: &self.epoch,
        }
    }

    /// Changes whenever the registry may have changed: every mutable use bumps it (under the
    /// lock), so an unchanged epoch means an unchanged registry.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Writes the current state to the checkpoint (newest wins under concurrency).
    pub async fn persist(&self) {
        let (seq, snapshot) = {
            let registry = self.registry();
            (self.store.next_seq(), registry.snapshot())
        };
        let ok = self.store.write(seq, snapshot).await;
        self.metrics.checkpoint_write(ok);
    }

    /// Wakes the pool updater: holdings changed. Takes the registry lock: never call it while
    /// holding the guard.
    pub fn pool_changed(&self) {
        self.publish_pools();
        self.pool_changed.notify_one();
    }

    /// Sets the per-NUMA pool gauges from the registry.
    pub fn publish_pools(&self) {
        // Published before the guard drops, so that concurrent calls publish in the order they
        // counted and the newest counts stay.
        let registry = self.registry();
        let pools = crate::inspect::pool_counts(&registry);
        crate::inspect::publish_pool_counts(&pools, &self.metrics);
        drop(registry);
    }

    /// Counts an admission: its exclusive allocations, or one allocation error.
    fn count_admission(
        &self,
        spec: &PodSpec,
        allocations: Option<Vec<(ResourceName, telemetry::Source)>>,
    ) {
        match allocations {
            Some(allocations) => {
                for (resource, source) in allocations {
                    self.metrics.allocation(resource, source, true);
                }
            }
            None => {
                let source = if spec.resources.is_some() {
                    telemetry::Source::Pod
                } else {
                    telemetry::Source::Node
                };
                self.metrics.allocation(ResourceName::Cpu, source, false);
            }
        }
    }

    /// Waits until holdings change.
    pub async fn wait_pool_changed(&self) {
        self.pool_changed.notified().await;
    }
}

/// The locked registry; any mutable use bumps the placer's epoch.
#[derive(Debug)]
pub struct RegistryGuard<'a> {
    guard: MutexGuard<'a, Registry>,
    epoch: &'a AtomicU64,
}

impl Deref for RegistryGuard<'_> {
    type Target = Registry;

    fn deref(&self) -> &Registry {
        &self.guard
    }
}

impl DerefMut for RegistryGuard<'_> {
    fn deref_mut(&mut self) -> &mut Registry {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        &mut self.guard
    }
}

/// The relay hook.
#[derive(Debug, Clone)]
pub struct PlacementHook {
    placer: Arc<Placer>,
}

impl PlacementHook {
    pub fn new(placer: Arc<Placer>) -> Self {
        Self { placer }
    }

    async fn run_pod_sandbox(&self, req: &cri::RunPodSandboxRequest) -> Decision {
        let Some(meta) = req.config.as_ref().and_then(|c| c.metadata.as_ref()) else {
            return Decision::Continue;
        };
        let sandbox = cri_resources(
            req.config
                .as_ref()
                .and_then(|c| c.linux.as_ref())
                .and_then(|l| l.resources.as_ref()),
        );
        let (spec, source) = match self.placer.knowledge.pod(&meta.uid).await {
            Some(spec) => (spec, Source::Spec),
            None => {
                let pod = infer::pod_from_sandbox(&meta.uid, &meta.namespace, &meta.name, &sandbox);
                // The stand-in container only matters for the pod scope's bubble; in container
                // scope it would be a container without requests, which the Static memory
                // manager refuses, so every inferred Guaranteed pod would be rejected.
                let pod_scope =
                    self.placer.registry().node().config().topology_scope == TopologyScope::Pod;
                let spec = if pod_scope {
                    inferred_sandbox_spec(pod)
                } else {
                    pod
                };
                (spec, Source::Inferred)
            }
        };
        let (result, allocations, changed) = {
            let mut registry = self.placer.registry();
            let fresh = !registry.pods().contains_key(&spec.uid);
            let before = registry.last_revision();
            let result = registry.admit(spec.clone(), source);
            let allocations = match &result {
                Ok(()) if fresh => Some(admission_allocations(registry.node(), &spec.uid)),
                Ok(()) => Some(Vec::new()),
                Err(_) => None,
            };
            (result, allocations, registry.last_revision() != before)
        };
        self.placer.count_admission(&spec, allocations);
        match result {
            Ok(()) => {
                info!(pod = %meta.uid, namespace = %meta.namespace, name = %meta.name, ?source, "admitted");
                // A pod already admitted (a sandbox re-created) keeps what it has: nothing to
                // write or to move.
                if changed {
                    self.placer.persist().await;
                    self.placer.pool_changed();
                }
                Decision::Patch(Patch {
                    annotations: [(POD_ANNOTATION.to_string(), pod_annotation(&spec, source))]
                        .into(),
                    ..Patch::default()
                })
            }
            Err(err) => {
                warn!(pod = %meta.uid, reason = err.reason(), message = %err, "rejected");
                Decision::Reject(admission_status(&err))
            }
        }
    }

    fn create_container(&self, req: &cri::CreateContainerRequest) -> Decision {
        let Some(config) = req.config.as_ref() else {
            return Decision::Continue;
        };
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let own = cri_resources(config.linux.as_ref().and_then(|l| l.resources.as_ref()));
        let (decided, pool_moved) = {
            let mut registry = self.placer.registry();
            let before = registry.node().shared_cpus();
            let decided = registry.decide_container(&req.pod_sandbox_id, &name, |pod| {
                infer::container(pod, &name, &own)
            });
            (decided, registry.node().shared_cpus() != before)
        };
        // Extending an inferred pod re-admits it, which can move its bubble: running
        // containers on the node shared pool must follow.
        if pool_moved {
            self.placer.pool_changed();
        }
        match decided {
            Ok(Some(decision)) => Decision::Patch(patch(&decision)),
            Ok(None) => Decision::Continue,
            Err(err) => {
                warn!(sandbox = %req.pod_sandbox_id, container = %name, reason = err.reason(), message = %err, "container rejected");
                Decision::Reject(admission_status(&err))
            }
        }
    }

    fn update_container_resources(&self, req: &cri::UpdateContainerResourcesRequest) -> Decision {
        let Some(record) = self.placer.registry().applied(&req.container_id).cloned() else {
            return Decision::Continue;
        };
        // Only the resources: numa-shim's annotations were set when the container was created.
        Decision::Patch(Patch {
            resources: resources_patch(&record.cpus, record.mems, record.exclusive.then_some(-1)),
            ..Patch::default()
        })
    }

    /// Records what the runtime did; returns whether the registry changed (so the checkpoint
    /// must be written) and whether running containers may need new cpusets.
    fn record(
        &self,
        request: &CriRequest,
        response: Option<&CriResponse>,
        ok: bool,
    ) -> (bool, bool) {
        let mut registry = self.placer.registry();
        let before = registry.last_revision();
        let pools = match (request, response) {
            (CriRequest::RunPodSandbox(req), Some(CriResponse::RunPodSandbox(resp))) if ok => {
                if let Some(meta) = req.config.as_ref().and_then(|c| c.metadata.as_ref()) {
                    registry.commit_sandbox(&meta.uid, &resp.pod_sandbox_id);
                }
                false
            }
            (CriRequest::RunPodSandbox(req), _) => {
                if let Some(meta) = req.config.as_ref().and_then(|c| c.metadata.as_ref()) {
                    registry.abort_sandbox(&meta.uid);
                }
                true
            }
            (CriRequest::CreateContainer(req), Some(CriResponse::CreateContainer(resp))) if ok => {
                if let Some(decision) = applied_decision(req) {
                    let name = req
                        .config
                        .as_ref()
                        .and_then(|c| c.metadata.as_ref())
                        .map(|m| m.name.as_str())
                        .unwrap_or("");
                    registry.commit_container(
                        &resp.container_id,
                        &req.pod_sandbox_id,
                        name,
                        &decision,
                    );
                    let pod = registry.containers().get(&resp.container_id);
                    let assignments = pod.map_or_else(Vec::new, |c| {
                        container_assignments(registry.node(), &c.pod_uid, name)
                    });
                    for (resource, kind) in assignments {
                        self.placer.metrics.container_assignment(resource, kind);
                    }
                }
                // The pool may have changed while the call was in flight (another pod admitted
                // or released), or this container took a slice out of its pod's shared pool
                // (an inferred pod): running containers whose cpuset is now stale must be
                // updated, or they keep it until the next drift tick.
                registry.has_pending_updates()
            }
            (CriRequest::RemoveContainer(req), _) if ok => {
                registry.remove_container(&req.container_id);
                true
            }
            (CriRequest::StopPodSandbox(req), _) if ok => {
                registry.stop_sandbox(&req.pod_sandbox_id);
                true
            }
            (CriRequest::RemovePodSandbox(req), _) if ok => {
                registry.remove_sandbox(&req.pod_sandbox_id);
                true
            }
            _ => false,
        };
        let changed = registry.last_revision() != before;
        // Releases of ids numa-shim does not know change nothing; a stale cpuset found after
        // CreateContainer counts even if this call changed nothing itself.
        let creates = matches!(request, CriRequest::CreateContainer(_));
        (changed, pools && (changed || creates))
    }
}

impl Hook for PlacementHook {
    async fn before(&self, request: &CriRequest) -> Decision {
        match request {
            CriRequest::RunPodSandbox(req) => self.run_pod_sandbox(req).await,
            CriRequest::CreateContainer(req) => self.create_container(req),
            CriRequest::UpdateContainerResources(req) => self.update_container_resources(req),
            _ => Decision::Continue,
        }
    }

    async fn after(&self, request: &CriRequest, outcome: &Outcome) {
        let ok = outcome.status.code() == Code::Ok;
        let (changed, pools) = self.record(request, outcome.response.as_ref(), ok);
        if changed {
            self.placer.persist().await;
        }
        if pools {
            self.placer.pool_changed();
        }
    }
}

/// The gRPC status a rejected pod gets: the kubelet's reason and message, as its event shows.
pub fn admission_status(err: &AdmissionError) -> Status {
    Status::new(Code::FailedPrecondition, format!("{}: {err}", err.reason()))
}

fn cri_resources(r: Option<&cri::LinuxContainerResources>) -> CriResources {
    r.map(|r| CriResources {
        cpu_period: r.cpu_period,
        cpu_quota: r.cpu_quota,
        cpu_shares: r.cpu_shares,
        memory_limit_in_bytes: r.memory_limit_in_bytes,
    })
    .unwrap_or_default()
}

fn patch(decision: &ContainerDecision) -> Patch {
    let resources = resources_patch(&decision.cpus, decision.mems.clone(), decision.cpu_quota);
    let annotations = [
        (CPUS_ANNOTATION.to_string(), decision.cpus.to_string()),
        (
            EXCLUSIVE_ANNOTATION.to_string(),
            decision.exclusive.to_string(),
        ),
        (
            ISOLATION_ANNOTATION.to_string(),
            isolation_name(decision.isolation).to_string(),
        ),
    ]
    .into();
    Patch {
        resources,
        annotations,
    }
}

/// The resource fields numa-shim sets for a container with `cpus`.
fn resources_patch(cpus: &CpuSet, mems: Option<String>, cpu_quota: Option<i64>) -> ResourcesPatch {
    // An empty set would mean "every CPU" to the runtime: leave the field as the kubelet sent it.
    ResourcesPatch {
        cpuset_cpus: (!cpus.is_empty()).then(|| cpus.to_string()),
        cpuset_mems: mems,
        cpu_quota,
        ..Default::default()
    }
}

/// The decision numa-shim patched into a forwarded CreateContainer, read back from its
/// annotations (absent when numa-shim did not place the container).
fn applied_decision(req: &cri::CreateContainerRequest) -> Option<ContainerDecision> {
    let config = req.config.as_ref()?;
    let resources = config.linux.as_ref().and_then(|l| l.resources.as_ref());
    let mems = resources.map(|r| r.cpuset_mems.as_str());
    decision_from_annotations(&config.annotations, mems)
}

/// A decision as numa-shim annotated it on a container (CreateContainer, ListContainers).
pub fn decision_from_annotations(
    annotations: &std::collections::HashMap<String, String>,
    mems: Option<&str>,
) -> Option<ContainerDecision> {
    let cpus = CpuSet::parse(annotations.get(CPUS_ANNOTATION)?).ok()?;
    let exclusive = annotations
        .get(EXCLUSIVE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let isolation = annotations
        .get(ISOLATION_ANNOTATION)
        .and_then(|v| parse_isolation(v))
        .unwrap_or(Isolation::Host);
    Some(ContainerDecision {
        cpus,
        mems: mems.filter(|m| !m.is_empty()).map(str::to_string),
        cpu_quota: exclusive.then_some(-1),
        exclusive,
        isolation,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PodAnnotation {
    source: Source,
    spec: PodSpec,
}

/// The sandbox annotation value for an admitted pod.
pub fn pod_annotation(spec: &PodSpec, source: Source) -> String {
    let value = PodAnnotation {
        source,
        spec: spec.clone(),
    };
    serde_json::to_string(&value).unwrap_or_default()
}

/// Reads a sandbox annotation written by [`pod_annotation`].
pub fn parse_pod_annotation(value: &str) -> Option<(PodSpec, Source)> {
    let parsed: PodAnnotation = serde_json::from_str(value).ok()?;
    Some((parsed.spec, parsed.source))
}

/// The annotation value of an isolation level.
pub fn isolation_name(isolation: Isolation) -> &'static str {
    match isolation {
        Isolation::Host => "host",
        Isolation::Pod => "pod",
        Isolation::Container => "container",
    }
}

/// Reads an isolation annotation value.
pub fn parse_isolation(value: &str) -> Option<Isolation> {
    match value {
        "host" => Some(Isolation::Host),
        "pod" => Some(Isolation::Pod),
        "container" => Some(Isolation::Container),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_admission_error_maps_to_failed_precondition_with_reason() {
        let errors = [
            AdmissionError::TopologyAffinity,
            AdmissionError::EmptyPodSharedPool {
                message: "pod rejected, x".into(),
            },
            AdmissionError::SmtAlignment {
                requested_cpus: 3,
                cpus_per_core: 2,
                available_physical_cpus: 0,
                caused_by_physical_cpus: false,
            },
            AdmissionError::Unexpected("not enough cpus".into()),
        ];
        for err in errors {
            let status = admission_status(&err);
            assert_eq!(status.code(), Code::FailedPrecondition);
            assert!(
                status.message().starts_with(err.reason()),
                "{}",
                status.message()
            );
            assert!(
                status.message().ends_with(&err.to_string()),
                "{}",
                status.message()
            );
        }
    }
}

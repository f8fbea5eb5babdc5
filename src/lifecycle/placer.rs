//! The [`Placer`]: the pod lifecycle's side of placement (the decision core is
//! `crate::placement`; the `Placer` asks it and keeps what it answered). Everything the hook, the
//! pool updater and recovery share — the registry behind a short lock, the checkpoint store and
//! whether the newest state is on disk, where pod specs come from, the pool gauges, the refused
//! pods and refusal reports — and what the intercepted calls decide and record on it:
//!
//! - `admit`: RunPodSandbox, the pod admitted and its reservation on disk;
//! - `place`: CreateContainer, where the container runs; the cpuset kept at an
//!   UpdateContainerResources that changes nothing;
//! - `record`: what the runtime did with a forwarded call (commit, roll back, release);
//! - `refused`: the pods refused now, whose retries replay the answer;
//! - `decide`: how a decision runs, on a copy of the registry off the relay's workers;
//! - `checkpoint`: the state on disk (group commit, the state writer);
//! - `error`: why a call is answered by numa-shim ([`PlacementError`]).
//!
//! A decision is made once, in the hook's `before`, and handed to `after` as a value; nothing
//! here reads numa-shim's annotations. Every decision that changes the registry is on disk
//! before the call is forwarded; one that cannot be written is rolled back and refused
//! ([`PlacementError::State`]). What the runtime then did (a sandbox's or container's id, a
//! stop, a removal) is recorded in memory before the answer goes back and written by the state
//! writer afterwards, off the call's path: recovery reads it back from the runtime (a
//! reservation whose sandbox exists, containers adopted from their annotations, records of what
//! is gone dropped) if numa-shim stops before that write. So a pod start waits for one durable
//! write, the reservation. A refusal is remembered (`refused`): the kubelet's retry of the same
//! pod while nothing changed is answered the same without deciding again
//! ([`PlacementError::Again`]). The registry lock is held only to decide or record, never
//! across an `.await`.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore};

mod admit;
mod checkpoint;
mod decide;
mod error;
mod place;
mod record;
mod refused;

pub use admit::AdmittedPod;
pub use decide::DecideError;
#[cfg(any(test, feature = "testing"))]
pub use decide::DecisionHook;
#[cfg(any(test, feature = "testing"))]
use decide::HookSlot;
use error::again;
pub use error::PlacementError;
pub use place::PlacedContainer;
pub use record::{Outcome, ResizeAnswer};

use super::gauges;
use super::refusals::Refusals;
use super::registry::Registry;
use super::store::Store;
use crate::knowledge::infer::CriResources;
use crate::knowledge::Knowledge;
use crate::placement::PodSpec;
use crate::proto::cri::v1 as cri;
use crate::report::{Refusal, Reporter, Stage};
use crate::telemetry::{self, Metrics, ResourceName};

/// Everything the hook, the pool updater and recovery share.
#[derive(Debug)]
pub struct Placer {
    registry: Mutex<Registry>,
    /// Bumped on every mutable use of the registry (readers such as PodResources cache by it).
    epoch: AtomicU64,
    store: Store,
    knowledge: Knowledge,
    pool_changed: Notify,
    /// Woken when a checkpoint write fails or a change waits to be written, so that the state
    /// writer ([`Placer::keep_state`]) writes it.
    state_behind: Notify,
    metrics: Arc<Metrics>,
    /// Where refusals go to become Events and pod status (`None`: only the log).
    reporter: Option<Reporter>,
    /// Pods refused now, which the kubelet keeps retrying.
    refusals: Mutex<Refusals>,
    /// One placement decision runs at a time, on a blocking thread ([`Placer::decide`]); the
    /// permit goes with the thread, so a decision whose caller gave up still counts until it
    /// ends.
    deciding: Arc<Semaphore>,
    /// Test-only: runs at the start of every decision, on its thread (to make one slow or
    /// panic on purpose).
    #[cfg(any(test, feature = "testing"))]
    decision_hook: HookSlot,
    /// What the kubelet's device manager holds (`None`: decisions without devices).
    devices: Option<Arc<dyn super::devices::DeviceSource>>,
    /// Where the pods' DRA claims are read (`None`: decisions without claims).
    claims: Option<Arc<dyn super::claims::ClaimSource>>,
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
            state_behind: Notify::new(),
            metrics,
            reporter: None,
            devices: None,
            claims: None,
            refusals: Mutex::new(Refusals::default()),
            deciding: Arc::new(Semaphore::new(1)),
            #[cfg(any(test, feature = "testing"))]
            decision_hook: HookSlot::default(),
        }
    }

    /// Asks `source` for the kubelet's devices before each admission.
    pub fn with_devices(mut self, source: Arc<dyn super::devices::DeviceSource>) -> Self {
        self.devices = Some(source);
        self
    }

    /// The kubelet's devices for the decision about `pod_uid`, read before any lock is taken.
    /// `None` without a source or when it fails (logged; the decision keeps the devices known
    /// before, none of them as given to this pod).
    pub async fn device_facts(
        &self,
        pod: &crate::placement::PodSpec,
    ) -> Option<crate::placement::device::DeviceFacts> {
        let source = self.devices.as_ref()?;
        match source.facts(pod).await {
            Ok(facts) => Some(facts),
            Err(err) => {
                tracing::debug!(pod = %pod.uid, error = %err, "the kubelet's devices could not be read; deciding with the devices known before");
                None
            }
        }
    }

    /// Asks `source` for each pod's DRA claims before its admission.
    pub fn with_claims(mut self, source: Arc<dyn super::claims::ClaimSource>) -> Self {
        self.claims = Some(source);
        self
    }

    /// The pod's DRA claims for its decision, read before any lock is taken; no claims without
    /// a source or when it fails (logged).
    pub async fn claim_facts(
        &self,
        pod: &crate::placement::PodSpec,
    ) -> crate::placement::device::claims::ClaimFacts {
        match &self.claims {
            Some(source) => super::claims::read(source.as_ref(), pod).await,
            None => crate::placement::device::claims::ClaimFacts::default(),
        }
    }

    /// Reports refused pods to the API server through `reporter`.
    pub fn with_reporter(mut self, reporter: Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// Where refusals are reported, if anywhere.
    pub(super) fn reporter(&self) -> Option<&Reporter> {
        self.reporter.as_ref()
    }

    /// Hands a refusal (the kubelet's reason and message) to the reporter, if any (never
    /// waits). Replayed refusals are handed over too: the reporter bumps the Event's count.
    pub fn refused(
        &self,
        meta: Option<&cri::PodSandboxMetadata>,
        reason: &str,
        message: &str,
        stage: Stage,
    ) {
        if let (Some(reporter), Some(meta)) = (&self.reporter, meta) {
            reporter.refused(Refusal {
                uid: meta.uid.clone(),
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                reason: reason.to_string(),
                message: message.to_string(),
                stage,
            });
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

    /// Where pod specs come from.
    pub fn knowledge(&self) -> &Knowledge {
        &self.knowledge
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
        let pools = gauges::pool_counts(&registry);
        gauges::publish_pool_counts(&pools, &self.metrics);
        gauges::publish_pods_by_source(&registry, &self.metrics);
        drop(registry);
    }

    /// Counts an admission: its exclusive allocations, or one allocation error.
    pub(super) fn count_admission(
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

/// The CFS and memory fields inference reads from CRI resources.
pub(super) fn cri_resources(r: Option<&cri::LinuxContainerResources>) -> CriResources {
    r.map(|r| CriResources {
        cpu_period: r.cpu_period,
        cpu_quota: r.cpu_quota,
        cpu_shares: r.cpu_shares,
        memory_limit_in_bytes: r.memory_limit_in_bytes,
    })
    .unwrap_or_default()
}

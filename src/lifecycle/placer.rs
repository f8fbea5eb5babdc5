//! The [`Placer`]: everything the hook, the pool updater and recovery share — the registry
//! behind a short lock, the checkpoint store and whether the newest state is on disk, where pod
//! specs come from, the pool gauges, the refused pods (`refused`) and refusal reports. Decides nothing itself (`placing`
//! does); never holds the lock across an `.await`.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore};
use tracing::{info, warn};

mod admit;
mod refused;

pub(super) use admit::cri_resources;
pub use admit::{Admission, Decided, Placement, PlacementError};

use super::gauges;
use super::refusals::Refusals;
use super::registry::Registry;
use super::store::{Durable, Store, StoreError};
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

/// Where the test-only decision hook is kept.
#[cfg(any(test, feature = "testing"))]
#[derive(Default)]
struct HookSlot(Mutex<Option<DecisionHook>>);

#[cfg(any(test, feature = "testing"))]
impl std::fmt::Debug for HookSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSlot")
    }
}

/// What a test runs at the start of each decision: gets the method (`RunPodSandbox` or
/// `CreateContainer`).
#[cfg(any(test, feature = "testing"))]
pub type DecisionHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Why a decision did not come back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// The decision panicked or its thread was lost: nothing was changed.
    #[error("the placement decision failed ({reason}); nothing was placed")]
    Failed { reason: String },
    /// The registry changed under every attempt: nothing was placed, a retry may succeed.
    #[error("the placement state changed during the decision {attempts} times; nothing was placed, retry")]
    Busy { attempts: u32 },
}

/// Slow attempts of one decision before it is refused as [`DecideError::Busy`].
const DECIDE_ATTEMPTS: u32 = 3;
/// A decision attempt quicker than this is made again under the registry lock when the
/// registry changed under it.
const INLINE_MAX: std::time::Duration = std::time::Duration::from_millis(5);

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

    /// Test-only: runs `hook` at the start of every placement decision, on its thread.
    #[cfg(any(test, feature = "testing"))]
    pub fn set_decision_hook(&self, hook: Option<DecisionHook>) {
        *self
            .decision_hook
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
    }

    /// Runs a placement decision off the relay's workers: `decide` works on a copy of the
    /// registry on a blocking thread (one decision at a time), and the copy replaces the
    /// registry only if nothing changed it meanwhile (the epoch). If something did (another
    /// call's record), the decision is made again: under the lock, on the worker, when the
    /// attempt took less than [`INLINE_MAX`] (it cannot stall anything longer than that, and
    /// cannot be overtaken again); on a fresh copy otherwise, [`DECIDE_ATTEMPTS`] times at most.
    /// So a slow decision never holds the registry lock or a worker: PodResources, the pool
    /// updater and the other calls' records never wait for it. Dropping the returned future
    /// (the caller's deadline) abandons the decision: its copy is thrown away and nothing is
    /// held. A decision that panics is [`DecideError::Failed`] and changes nothing.
    pub(super) async fn decide<T, F>(&self, what: &'static str, decide: F) -> Result<T, DecideError>
    where
        T: Send + 'static,
        F: Fn(&mut Registry) -> T + Send + Sync + 'static,
    {
        let decide = Arc::new(decide);
        for attempt in 1..=DECIDE_ATTEMPTS {
            let permit = self.permit().await?;
            let (mut copy, epoch) = {
                let registry = self.registry();
                (registry.clone(), self.epoch())
            };
            let job = decide.clone();
            let hook = self.hook();
            let task = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let started = std::time::Instant::now();
                hook(what);
                let out = job(&mut copy);
                (copy, out, started.elapsed())
            });
            let (copy, out, took) = task.await.map_err(|e| {
                let reason = if e.is_panic() {
                    panic_message(e.into_panic())
                } else {
                    e.to_string()
                };
                self.failed(what, reason)
            })?;
            let mut registry = self.registry();
            if self.epoch() == epoch {
                *registry = copy;
                return Ok(out);
            }
            drop(registry);
            info!(
                what,
                attempt,
                took_us = took.as_micros(),
                "registry changed during the decision; deciding again"
            );
            if took < INLINE_MAX {
                return self.decide_locked(what, decide.as_ref()).await;
            }
        }
        Err(DecideError::Busy {
            attempts: DECIDE_ATTEMPTS,
        })
    }

    /// A decision shown to be quick, made under the registry lock (on a copy, so that a panic
    /// changes nothing).
    async fn decide_locked<T>(
        &self,
        what: &'static str,
        decide: &(dyn Fn(&mut Registry) -> T + Send + Sync),
    ) -> Result<T, DecideError> {
        let _permit = self.permit().await?;
        let hook = self.hook();
        let mut registry = self.registry();
        let mut copy = registry.clone();
        let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            hook(what);
            decide(&mut copy)
        }));
        match decided {
            Ok(out) => {
                *registry = copy;
                Ok(out)
            }
            Err(payload) => {
                drop(registry);
                Err(self.failed(what, panic_message(payload)))
            }
        }
    }

    /// The one decision permit.
    async fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, DecideError> {
        self.deciding
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| DecideError::Failed {
                reason: e.to_string(),
            })
    }

    /// Logs and counts a decision that did not come back.
    fn failed(&self, what: &str, reason: String) -> DecideError {
        warn!(what, %reason, "placement decision failed");
        self.metrics.decision_failed(what, "panicked");
        DecideError::Failed { reason }
    }

    /// What runs at the start of each decision: the test hook, if any, or nothing.
    fn hook(&self) -> impl Fn(&str) + Send + 'static {
        #[cfg(any(test, feature = "testing"))]
        let hook = self
            .decision_hook
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        move |_what: &str| {
            #[cfg(any(test, feature = "testing"))]
            if let Some(hook) = &hook {
                hook(_what);
            }
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
    pub(super) fn refused(
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

    /// Puts the current state on disk and waits until it is there. Callers that wait at the
    /// same time share one write (group commit): the write snapshots the registry when it
    /// starts. A failure is counted, makes [`Placer::state_problem`] say why and wakes the
    /// state writer.
    pub async fn persist(&self) -> Result<(), StoreError> {
        let want = self.store.next_seq();
        let result = self
            .store
            .write_covering(want, || {
                let registry = self.registry();
                (self.store.next_seq(), registry.snapshot())
            })
            .await;
        match &result {
            Ok(Durable::Wrote) => self.metrics.checkpoint_write(true),
            Ok(Durable::Covered) => {}
            Err(_) => {
                self.metrics.checkpoint_write(false);
                self.state_behind.notify_one();
            }
        }
        result.map(|_| ())
    }

    /// Has the state writer put the current state on disk soon, without waiting for it: for
    /// what the runtime already did (commits and releases), which recovery reads back from the
    /// runtime if numa-shim stops before the write.
    pub fn persist_soon(&self) {
        self.store.want(self.store.next_seq());
        self.state_behind.notify_one();
    }

    /// Writes what [`Placer::persist_soon`] left pending or a failed write left behind, if
    /// anything (at shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        if self.store.behind() || self.store.problem().is_some() {
            return self.persist().await;
        }
        Ok(())
    }

    /// `Ok` when the newest state is on disk; otherwise tries to write it now (a placement
    /// must not be decided on top of a state that cannot be recorded).
    pub async fn durable(&self) -> Result<(), StoreError> {
        if self.store.problem().is_none() {
            return Ok(());
        }
        self.persist().await
    }

    /// Why the newest state is not on disk (for `/readyz`), or `None` when it is.
    pub fn state_problem(&self) -> Option<String> {
        self.store
            .problem()
            .map(|reason| format!("placement state cannot be written: {reason}"))
    }

    /// The state writer: writes what [`Placer::persist_soon`] left pending `lag` after it was
    /// asked (everything pending in one write, and nothing if a decision's write covered it
    /// meanwhile: so that decisions rarely wait behind it), and rewrites the checkpoint every
    /// `period` while writes fail, until one succeeds, so that readiness comes back by itself
    /// when the disk does. Runs until dropped.
    pub async fn keep_state(&self, period: std::time::Duration, lag: std::time::Duration) {
        loop {
            if self.store.problem().is_some() {
                tokio::time::sleep(period).await;
                if self.persist().await.is_ok() {
                    info!("placement state on disk again");
                }
            } else if self.store.behind() {
                tokio::time::sleep(lag).await;
                if self.store.behind() {
                    // A failure is counted and marks the store failing: the branch above
                    // retries.
                    let _ = self.persist().await;
                }
            } else {
                self.state_behind.notified().await;
            }
        }
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

/// The words of a panic's payload.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string());
    format!("panicked: {text}")
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

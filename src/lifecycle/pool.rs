//! Keeps running containers' cpusets right: pushes pool changes (UpdateContainerResources of
//! numa-shim's own, with retries) and periodically checks what the kernel applied (drift:
//! `cpuset.cpus`, `cpuset.mems`, the lifted CFS quota), restoring and counting what others
//! changed.
//!
//! Each round snapshots what to do under the registry lock, releases it, then talks to the
//! runtime; results are recorded under a fresh, short lock.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::placer::Placer;
use super::registry::CpusetUpdate;
use super::runtime::{pid_of, Runtime};
use crate::cgroup::{Host, Reading};
use crate::cpuset::CpuSet;
use crate::telemetry::ResourceName;

/// Attempts per cpuset update before waiting for the next round.
const ATTEMPTS: u32 = 3;

/// Pool updater and drift checker settings.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// How often the drift check runs (and pending updates are retried).
    pub drift_period: Duration,
    /// Pause between attempts of one update.
    pub retry_backoff: Duration,
    /// Where cgroup and proc filesystems are.
    pub host: Host,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            drift_period: Duration::from_secs(10),
            retry_backoff: Duration::from_millis(200),
            host: Host::default(),
        }
    }
}

/// Runs until `shutdown` resolves.
pub async fn run(
    placer: Arc<Placer>,
    runtime: Runtime,
    settings: PoolSettings,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(settings.drift_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let drift = tokio::select! {
            () = &mut shutdown => return,
            () = placer.wait_pool_changed() => false,
            _ = tick.tick() => true,
        };
        apply_pending(&placer, &runtime, &settings).await;
        if drift {
            check_drift(&placer, &runtime, &settings).await;
        }
    }
}

/// Pushes every pending cpuset change; returns how many were applied.
pub async fn apply_pending(placer: &Placer, runtime: &Runtime, settings: &PoolSettings) -> usize {
    let updates = placer.registry().pending_updates();
    let mut applied = 0;
    for update in updates {
        match push(runtime, &update, settings).await {
            // An exited container never runs again (a restart is a new container): its record
            // takes the cpuset as containerd's answer for it would have it, so that it is not
            // pushed again every round.
            Pushed::Applied | Pushed::Exited => {
                placer
                    .registry()
                    .mark_applied(&update.container_id, &update.cpus);
                applied += 1;
            }
            Pushed::Gone | Pushed::Failed => {}
        }
    }
    if applied > 0 {
        // A failure is counted and retried by the state writer; the cpusets are applied.
        let _ = placer.persist().await;
    }
    applied
}

/// What became of one cpuset update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    Applied,
    /// The container has exited: there is nothing to apply.
    Exited,
    /// The runtime no longer has the container.
    Gone,
    /// Every attempt failed; the next round tries again.
    Failed,
}

async fn push(runtime: &Runtime, update: &CpusetUpdate, settings: &PoolSettings) -> Pushed {
    let cpus = update.cpus.to_string();
    for attempt in 1..=ATTEMPTS {
        let err = match runtime
            .update_cpuset(
                &update.container_id,
                &cpus,
                update.mems.as_deref(),
                update.cpu_quota,
            )
            .await
        {
            Ok(()) => {
                info!(container = %update.container_id, cpus = %cpus, "cpuset updated");
                return Pushed::Applied;
            }
            Err(err) => err,
        };
        // containerd answers NotFound for a removed container and accepts a stopped one's
        // cpuset; CRI-O refuses both with Unknown. Its ContainerStatus tells them apart.
        let gone = match err.code() {
            tonic::Code::NotFound => Some(Pushed::Gone),
            tonic::Code::Unavailable => None,
            _ => not_running(runtime, &update.container_id).await,
        };
        if let Some(gone) = gone {
            debug!(container = %update.container_id, ?gone, error = %err, "container not running; update dropped");
            return gone;
        }
        warn!(container = %update.container_id, attempt, error = %err, "cpuset update failed");
        tokio::time::sleep(settings.retry_backoff * attempt).await;
    }
    Pushed::Failed
}

/// After a refused update: whether the runtime says the container has exited or is gone.
async fn not_running(runtime: &Runtime, container_id: &str) -> Option<Pushed> {
    match runtime.container_status(container_id).await {
        Err(err) if err.code() == tonic::Code::NotFound => Some(Pushed::Gone),
        Err(_) => None,
        Ok(status) => status
            .status
            .is_some_and(|s| {
                s.state == crate::proto::cri::v1::ContainerState::ContainerExited as i32
            })
            .then_some(Pushed::Exited),
    }
}

/// Reads the real cpuset (cpus, mems) and CFS quota of every recorded running container and
/// restores the ones that differ from what numa-shim decided ([`drifts`]): cpus always, mems
/// where numa-shim set them, the quota where it lifted it. Returns how many were corrected.
pub async fn check_drift(placer: &Placer, runtime: &Runtime, settings: &PoolSettings) -> usize {
    let records: Vec<CpusetUpdate> = placer
        .registry()
        .containers()
        .iter()
        .map(|(id, c)| CpusetUpdate {
            container_id: id.clone(),
            cpus: c.cpus.clone(),
            mems: c.mems.clone(),
            cpu_quota: c.cpu_quota(),
        })
        .collect();
    let mut corrected = 0;
    for record in records {
        let Ok(status) = runtime.container_status(&record.container_id).await else {
            continue;
        };
        let running = status.status.as_ref().is_some_and(|s| {
            s.state == crate::proto::cri::v1::ContainerState::ContainerRunning as i32
        });
        let Some(pid) = pid_of(&status).filter(|_| running) else {
            continue;
        };
        // cgroupfs and /proc reads block: not on the worker thread that relays CRI calls.
        let host = settings.host.clone();
        let read = tokio::task::spawn_blocking(move || host.read_pid(pid)).await;
        let reading = match read {
            Ok(Ok(reading)) => reading,
            Ok(Err(err)) => {
                debug!(container = %record.container_id, error = %err, "cgroup not readable");
                continue;
            }
            Err(err) => {
                debug!(container = %record.container_id, error = %err, "cgroup read failed");
                continue;
            }
        };
        let drifted = drifts(&record, &reading);
        if drifted.is_empty() {
            continue;
        }
        let what: Vec<&str> = drifted.iter().map(|d| d.field()).collect();
        warn!(
            container = %record.container_id,
            drifted = ?what,
            want_cpus = %record.cpus,
            found_cpus = %reading.cpus,
            want_mems = record.mems.as_deref().unwrap_or("-"),
            found_mems = %reading.mems,
            want_quota = record.cpu_quota.unwrap_or(0),
            found_quota = reading.cfs_quota,
            "placement drifted; restoring"
        );
        // Counted once per resource per container (cpus and quota are both `cpu`).
        for resource in [ResourceName::Cpu, ResourceName::Memory] {
            if drifted.iter().any(|d| d.resource() == resource) {
                placer.metrics().drift_correction(resource);
            }
        }
        if push(runtime, &record, settings).await == Pushed::Applied {
            corrected += 1;
        }
    }
    corrected
}

/// What of a container's placement the kernel no longer has as numa-shim decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// `cpuset.cpus`.
    Cpus,
    /// `cpuset.mems` (only where numa-shim set them).
    Mems,
    /// The CFS quota (only where numa-shim decided one: the lifted quota of an exclusive slice).
    Quota,
}

impl Drift {
    /// The cgroup value as logs name it.
    pub fn field(self) -> &'static str {
        match self {
            Self::Cpus => "cpuset.cpus",
            Self::Mems => "cpuset.mems",
            Self::Quota => "cfs_quota",
        }
    }

    /// The `resource_name` of `numa_shim_drift_corrections_total`.
    pub fn resource(self) -> ResourceName {
        match self {
            Self::Cpus | Self::Quota => ResourceName::Cpu,
            Self::Mems => ResourceName::Memory,
        }
    }
}

/// Where `found` (what the kernel applied) differs from `want` (what numa-shim decided), in the
/// order cpus, mems, quota. Mems are compared only when numa-shim set them and the quota only
/// when it decided one; everything else is the kubelet's and the runtime's.
pub fn drifts(want: &CpusetUpdate, found: &Reading) -> Vec<Drift> {
    let mut drifted = Vec::new();
    if found.cpus != want.cpus {
        drifted.push(Drift::Cpus);
    }
    // What numa-shim sent is the kubelet's list form ("0,1"); the kernel writes ranges ("0-1").
    let mems = want.mems.as_deref().and_then(|m| CpuSet::parse(m).ok());
    if mems.is_some_and(|mems| found.mems != mems) {
        drifted.push(Drift::Mems);
    }
    if want.cpu_quota.is_some_and(|quota| found.cfs_quota != quota) {
        drifted.push(Drift::Quota);
    }
    drifted
}

#[cfg(test)]
mod tests;

//! Start-up recovery: load the checkpoint, then reconcile it with what the runtime really has
//! before the relay accepts a call. Never re-admits, moves or rejects a pod that is running.
//!
//! With the checkpoint restored, what it lost is adopted from the annotations numa-shim put on
//! its containers. Without a usable one (missing, corrupt, or refused as a whole) every running
//! pod is put back where it runs, whole (`rebuild`). Where a container runs is read from the
//! kernel (`observe`): the create-time annotation is stale once its pool has moved.

mod observe;
mod rebuild;

use tracing::{info, warn};

use self::observe::{observe, Seen};
use super::annotations::{parse_pod_annotation, POD_ANNOTATION};
use super::registry::Registry;
use super::runtime::Runtime;
use super::store::Store;
use crate::cgroup::Host;
use crate::proto::cri::v1 as cri;

/// What recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The checkpoint was present and valid.
    pub from_checkpoint: bool,
    /// Why the checkpoint was not used, if it was not.
    pub checkpoint_problem: Option<String>,
    /// Records dropped because the runtime no longer has their sandbox or container.
    pub dropped: usize,
    /// Sandboxes found stopped whose holdings were released.
    pub released: usize,
    /// Containers adopted from the runtime (whole pods and held containers).
    pub adopted: usize,
    /// Pods put back whole without the checkpoint (spec, budget, memory and containers).
    pub rebuilt: usize,
    /// Containers whose pod could not be put back whole: their CPUs are held until they go.
    pub held: usize,
    /// Sandboxes without containers yet, admitted again from their annotation (nothing ran, so
    /// nothing moves).
    pub readmitted: usize,
    /// Containers that could not be adopted, with the reason.
    pub problems: Vec<String>,
}

/// Loads and reconciles; the runtime must answer (the caller retries while it is down). `host`
/// is where the kernel's cgroup and proc filesystems are.
pub async fn recover(
    registry: &mut Registry,
    store: &Store,
    runtime: &Runtime,
    host: &Host,
) -> Result<Recovery, super::runtime::RuntimeError> {
    let mut report = Recovery::default();
    let mut refused = None;
    match store.read() {
        Ok(Some(snapshot)) => match registry.restore(snapshot.clone()) {
            Ok(()) => report.from_checkpoint = true,
            Err(err) => {
                report.checkpoint_problem = Some(err.to_string());
                refused = Some(snapshot);
            }
        },
        Ok(None) => report.checkpoint_problem = Some("no checkpoint".to_string()),
        Err(err) => report.checkpoint_problem = Some(err.to_string()),
    }
    if let Some(problem) = &report.checkpoint_problem {
        warn!(problem = %problem, "rebuilding state from the runtime");
    }

    let sandboxes = runtime.sandboxes().await?;
    let containers = runtime.containers().await?;
    let seen = observe(runtime, host, &containers).await;
    if report.from_checkpoint {
        reconcile(registry, &sandboxes, &containers, &seen, &mut report);
    } else {
        rebuild::rebuild(
            registry,
            refused,
            &sandboxes,
            &containers,
            &seen,
            &mut report,
        );
    }
    readmit(registry, &sandboxes, &mut report);
    let stale = registry.release_unheld();
    if !stale.is_empty() {
        warn!(cpus = %stale, "cpus held for containers that are gone released");
    }
    info!(
        from_checkpoint = report.from_checkpoint,
        rebuilt = report.rebuilt,
        adopted = report.adopted,
        held = report.held,
        readmitted = report.readmitted,
        dropped = report.dropped,
        released = report.released,
        problems = report.problems.len(),
        "recovered"
    );
    for problem in &report.problems {
        warn!(problem = %problem, "recovery");
    }
    Ok(report)
}

/// A restored checkpoint against the runtime: reservations whose sandbox the runtime finished,
/// records of what is gone, stopped sandboxes, and containers the checkpoint does not know.
fn reconcile(
    registry: &mut Registry,
    sandboxes: &[cri::PodSandbox],
    containers: &[cri::Container],
    seen: &[Seen],
    report: &mut Recovery,
) {
    let sandbox_ids: Vec<String> = sandboxes.iter().map(|s| s.id.clone()).collect();
    let container_ids: Vec<String> = containers.iter().map(|c| c.id.clone()).collect();
    // A reservation whose RunPodSandbox was in flight when numa-shim stopped: the sandbox exists
    // if the runtime finished it.
    for sandbox in sandboxes {
        let Some(uid) = sandbox.metadata.as_ref().map(|m| m.uid.clone()) else {
            continue;
        };
        if registry
            .pods()
            .get(&uid)
            .is_some_and(|p| p.sandbox_id.is_none())
        {
            registry.commit_sandbox(&uid, &sandbox.id);
        }
    }
    report.dropped = registry.retain_known(&sandbox_ids, &container_ids);

    for sandbox in sandboxes
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxNotready as i32)
    {
        let held = registry
            .pods()
            .values()
            .any(|p| p.active && p.sandbox_id.as_deref() == Some(sandbox.id.as_str()));
        if held {
            registry.stop_sandbox(&sandbox.id);
            report.released += 1;
        }
    }

    let exclusive_all = rebuild::exclusive_cpus(seen);
    for s in seen {
        if registry.containers().contains_key(&s.container.id) {
            continue;
        }
        let Some(sandbox) = sandboxes
            .iter()
            .find(|sb| sb.id == s.container.pod_sandbox_id)
            .filter(|sb| sb.state == cri::PodSandboxState::SandboxReady as i32)
        else {
            continue;
        };
        rebuild::hold(registry, sandbox, s, &exclusive_all, report);
    }
}

/// Sandboxes without containers yet, admitted again from their annotation: nothing ran, so
/// nothing moves.
fn readmit(registry: &mut Registry, sandboxes: &[cri::PodSandbox], report: &mut Recovery) {
    for sandbox in sandboxes
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
    {
        let known = registry
            .pods()
            .values()
            .any(|p| p.sandbox_id.as_deref() == Some(sandbox.id.as_str()));
        let Some((spec, source)) = sandbox
            .annotations
            .get(POD_ANNOTATION)
            .and_then(|v| parse_pod_annotation(v))
        else {
            continue;
        };
        if known || registry.pods().contains_key(&spec.uid) {
            continue;
        }
        let uid = spec.uid.clone();
        match registry.admit(spec, source) {
            Ok(()) => {
                registry.commit_sandbox(&uid, &sandbox.id);
                report.readmitted += 1;
            }
            Err(err) => {
                report
                    .problems
                    .push(format!("sandbox {}: {}: {err}", sandbox.id, err.reason()))
            }
        }
    }
}

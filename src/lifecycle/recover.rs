//! Start-up recovery: load the checkpoint, then reconcile it with what the runtime really has
//! before the relay accepts a call. Never re-admits, moves or rejects a pod that is running:
//! what the checkpoint lost is adopted from the annotations numa-shim put on its containers.

use tracing::{info, warn};

use super::hook::{decision_from_annotations, parse_pod_annotation, POD_ANNOTATION};
use super::registry::{Adoption, Registry};
use super::runtime::Runtime;
use super::store::Store;
use crate::placement::node::Isolation;
use crate::placement::PodSpec;
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
    /// Containers adopted from their annotations.
    pub adopted: usize,
    /// Sandboxes without containers yet, admitted again from their annotation (nothing ran, so
    /// nothing moves).
    pub readmitted: usize,
    /// Containers that could not be adopted, with the reason.
    pub problems: Vec<String>,
}

/// Loads and reconciles; the runtime must answer (the caller retries while it is down).
pub async fn recover(
    registry: &mut Registry,
    store: &Store,
    runtime: &Runtime,
) -> Result<Recovery, tonic::Status> {
    let mut report = Recovery::default();
    match store.read() {
        Ok(Some(snapshot)) => match registry.restore(snapshot) {
            Ok(()) => report.from_checkpoint = true,
            Err(err) => report.checkpoint_problem = Some(err.to_string()),
        },
        Ok(None) => report.checkpoint_problem = Some("no checkpoint".to_string()),
        Err(err) => report.checkpoint_problem = Some(err.to_string()),
    }
    if let Some(problem) = &report.checkpoint_problem {
        warn!(problem = %problem, "rebuilding state from the runtime");
    }

    let sandboxes = runtime.sandboxes().await?;
    let containers = runtime.containers().await?;
    let sandbox_ids: Vec<String> = sandboxes.iter().map(|s| s.id.clone()).collect();
    let container_ids: Vec<String> = containers.iter().map(|c| c.id.clone()).collect();
    // A reservation whose RunPodSandbox was in flight when numa-shim stopped: the sandbox exists
    // if the runtime finished it.
    for sandbox in &sandboxes {
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

    for container in &containers {
        if registry.containers().contains_key(&container.id)
            || container.state == cri::ContainerState::ContainerExited as i32
        {
            continue;
        }
        let Some(decision) = decision_from_annotations(&container.annotations, None) else {
            continue;
        };
        let Some(sandbox) = sandboxes.iter().find(|s| s.id == container.pod_sandbox_id) else {
            continue;
        };
        if sandbox.state != cri::PodSandboxState::SandboxReady as i32 {
            continue;
        }
        let meta = sandbox.metadata.clone().unwrap_or_default();
        let found = Adoption {
            container_id: container.id.clone(),
            sandbox_id: sandbox.id.clone(),
            pod: PodSpec {
                uid: meta.uid,
                namespace: meta.namespace,
                name: meta.name,
                resources: None,
                init_containers: vec![],
                containers: vec![],
            },
            name: container
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            pinned: decision.isolation != Isolation::Host,
            cpus: decision.cpus,
            mems: decision.mems,
            exclusive: decision.exclusive,
        };
        match registry.adopt_container(found) {
            Ok(()) => report.adopted += 1,
            Err(err) => report
                .problems
                .push(format!("container {}: {err}", container.id)),
        }
    }
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
    info!(
        readmitted = report.readmitted,
        from_checkpoint = report.from_checkpoint,
        dropped = report.dropped,
        released = report.released,
        adopted = report.adopted,
        problems = report.problems.len(),
        "recovered"
    );
    Ok(report)
}

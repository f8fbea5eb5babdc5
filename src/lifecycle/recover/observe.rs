//! What recovery reads about each container numa-shim placed: the decision annotated on it
//! and where it runs now — from the kernel (cgroupfs through the container's pid), else from the
//! runtime's status, else (a container not started yet) the annotation itself. The create-time
//! annotation is stale once the pool has moved, so it is the last resort, never the first.

use tracing::debug;

use crate::cgroup::Host;
use crate::cpuset::CpuSet;
use crate::lifecycle::annotations::decision_from_annotations;
use crate::lifecycle::registry::ContainerDecision;
use crate::lifecycle::runtime::{pid_of, Runtime};
use crate::proto::cri::v1 as cri;

/// Where a container's current cpuset was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadFrom {
    Kernel,
    Runtime,
    Annotation,
}

/// One container numa-shim placed, as found.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) container: cri::Container,
    /// What numa-shim decided when it created the container.
    pub(super) decision: ContainerDecision,
    /// The cpuset it runs on now.
    pub(super) cpus: CpuSet,
    /// `cpuset.mems` now (kubelet format, "0,1"), when it could be read.
    pub(super) mems: Option<String>,
}

impl Seen {
    pub(super) fn name(&self) -> &str {
        self.container
            .metadata
            .as_ref()
            .map_or("", |m| m.name.as_str())
    }
}

/// Every container that is not exited and carries numa-shim's decision annotations.
pub(super) async fn observe(
    runtime: &Runtime,
    host: &Host,
    containers: &[cri::Container],
) -> Vec<Seen> {
    let mut seen = Vec::new();
    for c in containers {
        if c.state == cri::ContainerState::ContainerExited as i32 {
            continue;
        }
        let Some(decision) = decision_from_annotations(&c.annotations, None) else {
            continue;
        };
        let (cpus, mems, from) = match current(runtime, host, &c.id).await {
            Some((cpus, mems, from)) => (cpus, mems, from),
            None => (decision.cpus.clone(), None, ReadFrom::Annotation),
        };
        debug!(container = %c.id, cpus = %cpus, ?from, "found");
        seen.push(Seen {
            container: c.clone(),
            decision,
            cpus,
            mems,
        });
    }
    seen
}

/// The container's cpuset and mems now, from the kernel or else the runtime's status.
async fn current(
    runtime: &Runtime,
    host: &Host,
    id: &str,
) -> Option<(CpuSet, Option<String>, ReadFrom)> {
    let status = runtime.container_status(id).await.ok()?;
    if let Some(pid) = pid_of(&status) {
        let host = host.clone();
        let read = tokio::task::spawn_blocking(move || host.read_pid(pid)).await;
        match read {
            Ok(Ok(r)) if !r.cpus.is_empty() => {
                return Some((r.cpus, mems_list(&r.mems), ReadFrom::Kernel));
            }
            Ok(Ok(_)) => {}
            Ok(Err(err)) => debug!(container = %id, error = %err, "cgroup not readable"),
            Err(err) => debug!(container = %id, error = %err, "cgroup read failed"),
        }
    }
    let linux = status.status?.resources?.linux?;
    let cpus = CpuSet::parse(&linux.cpuset_cpus)
        .ok()
        .filter(|c| !c.is_empty())?;
    let mems = CpuSet::parse(&linux.cpuset_mems)
        .ok()
        .and_then(|m| mems_list(&m));
    Some((cpus, mems, ReadFrom::Runtime))
}

/// A mems set as CRI `cpuset_mems` (ids, comma separated), `None` when empty.
fn mems_list(mems: &CpuSet) -> Option<String> {
    let ids: Vec<String> = mems.iter().map(|id| id.to_string()).collect();
    (!ids.is_empty()).then(|| ids.join(","))
}

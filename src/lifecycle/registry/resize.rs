//! In-place resize on the registry (docs/resize.md): the CRI values of an
//! `UpdateContainerResources` or `UpdatePodSandboxResources` read as the container's or the pod
//! budget's new resources, applied through the decision core (`Node::resize_container`,
//! `Node::resize_pod`: promised CPUs kept, all-or-nothing), and undone when the runtime then
//! refuses the call.
//!
//! A resize is applied before the call is forwarded (the CPUs a grow takes are held while the
//! runtime works) and kept as a [`ResizeUndo`] until the runtime has answered. Undoing puts the
//! node back exactly as it was when nothing else changed it meanwhile; otherwise the core
//! resizes back to the old resources by its own rules (a shrink's CPUs may have gone to another
//! pod: the container then keeps what the core gives it, never a CPU held by another).

use crate::knowledge::infer::{self, CriResources};
use crate::placement::node::{NodeSnapshot, ResizeError};
use crate::placement::{PodSpec, Resources};

use super::{decision, ContainerDecision, ContainerRecord, Registry, Source};

/// What a resize is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeTarget {
    /// One running container (UpdateContainerResources).
    Container { id: String, name: String },
    /// The pod-level budget, `spec.resources` (UpdatePodSandboxResources).
    Pod { sandbox_id: String },
}

/// A resize the registry applied (or found nothing to change for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    pub pod_uid: String,
    /// `namespace/name` of the pod, for messages.
    pub pod: String,
    pub target: ResizeTarget,
    /// The container's placement now (container resizes of containers the core lists).
    pub decision: Option<ContainerDecision>,
    /// How to put things back if the runtime refuses the call; `None`: nothing changed.
    pub undo: Option<Box<ResizeUndo>>,
}

impl Resized {
    /// A resize that asks for what the target already has: nothing moves, nothing to undo.
    fn unchanged(pod_uid: String, pod: String, target: ResizeTarget) -> Self {
        Self {
            pod_uid,
            pod,
            target,
            decision: None,
            undo: None,
        }
    }
}

/// What [`Registry::undo_resize`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeUndo {
    before: NodeSnapshot,
    after: NodeSnapshot,
    spec: PodSpec,
    /// The resized container's record before (container resizes).
    record: Option<(String, ContainerRecord)>,
    /// The resources before: what the core resizes back to when the node moved meanwhile.
    old: Resources,
    /// The target holds every CPU it held before (and maybe more): kept when the runtime's
    /// answer is unknown (see [`ResizeUndo::keep_unanswered`]).
    grows: bool,
}

impl ResizeUndo {
    /// Whether a resize whose runtime call was cut off (the caller's deadline passed or it hung
    /// up, so the runtime may or may not have applied it) is kept rather than undone: the
    /// side that holds more CPUs is kept, so whatever the runtime did, the container's CPUs
    /// are numa-shim's — a grow stays (the kubelet retries the call and finds it applied), a
    /// shrink is undone (its retry applies it again).
    pub fn keep_unanswered(&self) -> bool {
        self.grows
    }
}

/// How an undo went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undone {
    /// The node is exactly as before the resize.
    Exact,
    /// Others changed the node meanwhile: the core resized back to the old resources.
    Reversed,
    /// Resizing back was refused (the CPUs a shrink gave back went elsewhere): the resized
    /// state stays, consistent; the kubelet's retry of the resize finds it applied.
    Kept(ResizeError),
}

/// A refused resize: what was asked, why not, and what the container or pod keeps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("numa-shim cannot resize {what} of pod {pod} ({asked}): {error}; it keeps {keeps}")]
pub struct ResizeRefused {
    pub what: String,
    pub pod: String,
    pub asked: String,
    pub error: Box<ResizeError>,
    pub keeps: String,
}

impl Registry {
    /// Applies the resources of an UpdateContainerResources to container `container_id`.
    /// `None`: not a container numa-shim resizes (unknown, adopted, its pod stopped).
    pub fn resize_container(
        &mut self,
        container_id: &str,
        cri: &CriResources,
    ) -> Result<Option<Resized>, ResizeRefused> {
        let Some(record) = self.containers.get(container_id).cloned() else {
            return Ok(None);
        };
        let Some(pod) = self.pods.get(&record.pod_uid) else {
            return Ok(None);
        };
        if record.pinned || !pod.active || pod.source == Source::Adopted {
            return Ok(None);
        }
        let Some(current) = super::containers_of(&pod.spec)
            .find(|c| c.name == record.name)
            .map(|c| c.resources.clone())
        else {
            return Ok(None);
        };
        let uid = record.pod_uid.clone();
        let label = format!("{}/{}", pod.spec.namespace, pod.spec.name);
        let target = ResizeTarget::Container {
            id: container_id.to_string(),
            name: record.name.clone(),
        };
        // Rule C2 (docs/pod-knowledge.md): a container of a pod-level budget sent exactly the
        // budget's limits declared none of its own, and keeps following the budget: the kubelet
        // sends it the budget's limits on a resize, the new ones before the pod cgroup's on a
        // shrink (containers first, then UpdatePodSandboxResources: docs/resize.md §1.2), so
        // they may differ from the budget numa-shim holds. The budget is resized by
        // UpdatePodSandboxResources only. A container that holds devices was given its own
        // resources at creation (rule C4), so one whose current resources are none holds none.
        let own_none = current == Resources::default() && pod.spec.resources.is_some();
        let new = if own_none {
            current.clone()
        } else {
            infer::resized(&current, cri)
        };
        if new == current {
            return Ok(Some(Resized::unchanged(uid, label, target)));
        }
        let before = self.node.snapshot();
        let spec = pod.spec.clone();
        if let Err(error) = self.node.resize_container(&uid, &record.name, &new) {
            return Err(ResizeRefused {
                what: format!("container {:?}", record.name),
                pod: label,
                asked: describe(&current, &new),
                error: Box::new(error),
                keeps: format!("cpus {}", record.cpus),
            });
        }
        let placed = self
            .node
            .container(&uid, &record.name)
            .map(|p| decision(&p));
        if let Some(p) = self.pods.get_mut(&uid) {
            set_container_resources(&mut p.spec, &record.name, &new);
        }
        if let (Some(placed), Some(r)) = (&placed, self.containers.get_mut(container_id)) {
            r.cpus = placed.cpus.clone();
            r.mems = placed.mems.clone();
            r.exclusive = placed.exclusive;
        }
        self.touch(&uid);
        let after = self.node.snapshot();
        let grows = placed
            .as_ref()
            .is_some_and(|p| record.cpus.is_subset(&p.cpus));
        Ok(Some(Resized {
            pod_uid: uid,
            pod: label,
            target,
            decision: placed,
            undo: Some(Box::new(ResizeUndo {
                before,
                after,
                spec,
                record: Some((container_id.to_string(), record)),
                old: current,
                grows,
            })),
        }))
    }

    /// Applies the pod cgroup resources of an UpdatePodSandboxResources to the pod's budget
    /// (`spec.resources`). `None`: a sandbox numa-shim does not know, or a pod without a
    /// pod-level budget (the kubelet announces every pod cgroup change; only budgets resize).
    pub fn resize_sandbox(
        &mut self,
        sandbox_id: &str,
        cri: &CriResources,
    ) -> Result<Option<Resized>, ResizeRefused> {
        let Some(uid) = self.uid_of_sandbox(sandbox_id) else {
            return Ok(None);
        };
        let Some(pod) = self.pods.get(&uid) else {
            return Ok(None);
        };
        if !pod.active || pod.source == Source::Adopted {
            return Ok(None);
        }
        let Some(current) = pod.spec.resources.clone() else {
            return Ok(None);
        };
        let label = format!("{}/{}", pod.spec.namespace, pod.spec.name);
        let target = ResizeTarget::Pod {
            sandbox_id: sandbox_id.to_string(),
        };
        let new = keep_cpu_guaranteed(&current, infer::resized(&current, cri));
        if new == current {
            return Ok(Some(Resized::unchanged(uid, label, target)));
        }
        let before = self.node.snapshot();
        let spec = pod.spec.clone();
        if let Err(error) = self.node.resize_pod(&uid, &new) {
            let keeps = self
                .node
                .pod_cpus(&uid)
                .map_or_else(|| "its budget".to_string(), |c| format!("cpus {c}"));
            return Err(ResizeRefused {
                what: "the pod-level budget".to_string(),
                pod: label,
                asked: describe(&current, &new),
                error: Box::new(error),
                keeps,
            });
        }
        let grows = new.requests.cpu_milli >= current.requests.cpu_milli;
        if let Some(p) = self.pods.get_mut(&uid) {
            p.spec.resources = Some(new);
        }
        self.touch(&uid);
        let after = self.node.snapshot();
        Ok(Some(Resized {
            pod_uid: uid,
            pod: label,
            target,
            decision: None,
            undo: Some(Box::new(ResizeUndo {
                before,
                after,
                spec,
                record: None,
                grows,
                old: current,
            })),
        }))
    }

    /// The runtime refused the resized call: puts the pod back (see [`Undone`]).
    pub fn undo_resize(&mut self, resized: &Resized, undo: &ResizeUndo) -> Undone {
        let uid = &resized.pod_uid;
        if !self.pods.get(uid).is_some_and(|p| p.active) {
            // Stopped meanwhile: everything it held is back already.
            return Undone::Exact;
        }
        let how = if self.node.snapshot() == undo.after
            && self.node.restore(undo.before.clone()).is_ok()
        {
            Undone::Exact
        } else {
            let back = match &resized.target {
                ResizeTarget::Container { name, .. } => {
                    self.node.resize_container(uid, name, &undo.old)
                }
                ResizeTarget::Pod { .. } => self.node.resize_pod(uid, &undo.old),
            };
            match back {
                Ok(_) => Undone::Reversed,
                Err(e) => return Undone::Kept(e),
            }
        };
        if let Some(p) = self.pods.get_mut(uid) {
            p.spec = undo.spec.clone();
        }
        if let Some((id, old)) = &undo.record {
            if let Some(r) = self.containers.get_mut(id) {
                // What the kernel still has; a different cpuset the core chose goes out as a
                // pool update.
                r.cpus = old.cpus.clone();
                r.mems = old.mems.clone();
                r.exclusive = self
                    .node
                    .container(uid, &old.name)
                    .map_or(old.exclusive, |p| p.exclusive);
            }
        }
        self.touch(uid);
        how
    }
}

/// The kubelet writes a pod cgroup's CPU limit and request one at a time, each announced with
/// its own UpdatePodSandboxResources (limit first on growth, request first on shrink:
/// `doPodResizeAction`, docs/resize.md §1.2), so a Guaranteed budget's first call says
/// requests ≠ limits. A resize never changes the QoS class (the API server refuses one that
/// would), so for a budget whose CPU request equals its limit the value that moved is the new
/// CPU of both: the budget is resized once, at the first call, and the second finds it done.
fn keep_cpu_guaranteed(current: &Resources, mut new: Resources) -> Resources {
    let (req, lim) = (current.requests.cpu_milli, current.limits.cpu_milli);
    if req.is_none() || req != lim {
        return new;
    }
    match (new.requests.cpu_milli != req, new.limits.cpu_milli != lim) {
        (true, false) => new.limits.cpu_milli = new.requests.cpu_milli,
        (false, true) => new.requests.cpu_milli = new.limits.cpu_milli,
        _ => {}
    }
    new
}

/// `cpu 2 → 4, memory 2Gi → 4Gi` (requests), the parts that change.
fn describe(old: &Resources, new: &Resources) -> String {
    let mut parts = Vec::new();
    let cpu = |r: &Resources| r.requests.cpu_milli.or(r.limits.cpu_milli);
    if cpu(old) != cpu(new) {
        parts.push(format!("cpu {} → {}", milli(cpu(old)), milli(cpu(new))));
    }
    let mem = |r: &Resources| r.requests.memory.or(r.limits.memory);
    if mem(old) != mem(new) {
        parts.push(format!("memory {} → {}", bytes(mem(old)), bytes(mem(new))));
    }
    if parts.is_empty() {
        "resources changed".to_string()
    } else {
        parts.join(", ")
    }
}

fn milli(v: Option<u64>) -> String {
    match v {
        None => "none".to_string(),
        Some(m) if m % 1000 == 0 => (m / 1000).to_string(),
        Some(m) => format!("{m}m"),
    }
}

fn bytes(v: Option<u64>) -> String {
    match v {
        None => "none".to_string(),
        Some(b) if b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        Some(b) if b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        Some(b) => b.to_string(),
    }
}

fn set_container_resources(spec: &mut PodSpec, name: &str, resources: &Resources) {
    if let Some(c) = spec
        .init_containers
        .iter_mut()
        .chain(spec.containers.iter_mut())
        .find(|c| c.name == name)
    {
        c.resources = resources.clone();
    }
}

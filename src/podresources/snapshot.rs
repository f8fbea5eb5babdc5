//! The immutable copy of what numa-shim applied that every answer is built from. Captured under
//! the registry lock (pure copying, no allocation beyond the copy, no I/O); everything after
//! runs without the lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use crate::cpuset::CpuSet;
use crate::lifecycle::registry::{ContainerRecord, PodRecord, PLACEHOLDER};
use crate::lifecycle::{Placer, Registry};
use crate::placement::memory::Block;
use crate::placement::node::Node;
use crate::placement::qos::is_container_equivalent_guaranteed;
use crate::placement::ContainerRole;

/// Everything PodResources answers with, as of one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Active pods, by UID.
    pub pods: Vec<PodEntry>,
    /// `GetAllocatableResources` CPUs.
    pub allocatable_cpus: CpuSet,
    /// `GetAllocatableResources` memory: one single-node block per NUMA node and type.
    pub allocatable_memory: Vec<Block>,
}

/// One pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEntry {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The pod-scope CPU bubble (PLRM); `None` in container scope or without a bubble.
    pub cpus: Option<CpuSet>,
    /// The pod-scope memory bubble blocks; empty without one.
    pub memory: Vec<Block>,
    /// Sidecars then app containers in spec order, then recorded containers the spec lacks.
    pub containers: Vec<ContainerEntry>,
}

/// One container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEntry {
    pub name: String,
    /// The exclusive slice; `None` for containers on a shared pool (pod or node).
    pub exclusive_cpus: Option<CpuSet>,
    /// The Memory Manager's blocks for the container.
    pub memory: Vec<Block>,
}

/// Anything that can lend the registry for a short, synchronous look.
pub trait RegistrySource: Send + Sync + 'static {
    /// Runs `f` with the registry borrowed; `f` must only copy.
    fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R;

    /// A counter that changes whenever the registry may have changed; `None` if unknown (then
    /// every answer captures afresh).
    fn epoch(&self) -> Option<u64> {
        None
    }

    /// The active pods and the epoch they belong to, both read under the same lock; only the
    /// pods `known` lacks at their current revision are copied (see
    /// [`Snapshot::capture_changed`]).
    fn capture_changed(&self, known: &dyn Fn(&str, u64) -> bool) -> (Option<u64>, Vec<Revised>) {
        (
            None,
            self.with_registry(|r| Snapshot::capture_changed(r, known)),
        )
    }
}

/// An active pod at its registry revision, copied only if the caller did not have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revised {
    pub uid: String,
    pub revision: u64,
    /// `None`: the caller already holds the pod at this revision.
    pub entry: Option<PodEntry>,
}

impl RegistrySource for Placer {
    fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        f(&self.registry())
    }

    fn epoch(&self) -> Option<u64> {
        Some(Placer::epoch(self))
    }

    fn capture_changed(&self, known: &dyn Fn(&str, u64) -> bool) -> (Option<u64>, Vec<Revised>) {
        let registry = self.registry();
        // Read under the lock: no mutation can run between the epoch and the copy.
        let epoch = Placer::epoch(self);
        (Some(epoch), Snapshot::capture_changed(&registry, known))
    }
}

impl RegistrySource for Mutex<Registry> {
    fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        let guard = self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&guard)
    }
}

impl<T: RegistrySource> RegistrySource for std::sync::Arc<T> {
    fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        (**self).with_registry(f)
    }

    fn epoch(&self) -> Option<u64> {
        (**self).epoch()
    }

    fn capture_changed(&self, known: &dyn Fn(&str, u64) -> bool) -> (Option<u64>, Vec<Revised>) {
        (**self).capture_changed(known)
    }
}

impl Snapshot {
    /// Copies every active pod and the allocatable resources out of the registry.
    pub fn capture(registry: &Registry) -> Self {
        let pods = Self::capture_changed(registry, &|_, _| false)
            .into_iter()
            .filter_map(|pod| pod.entry)
            .collect();
        Self {
            pods,
            allocatable_cpus: registry.node().allocatable_cpus(),
            allocatable_memory: registry.node().allocatable_memory(),
        }
    }

    /// Every active pod in UID order (the order of [`capture`](Self::capture)) with its
    /// revision; only pods `known(uid, revision)` refuses are copied. After a change to one pod
    /// this copies one pod and reads each container record once, instead of copying them all.
    pub fn capture_changed(registry: &Registry, known: &dyn Fn(&str, u64) -> bool) -> Vec<Revised> {
        let mut pods: Vec<(&PodRecord, Revised)> = registry
            .pods()
            .iter()
            .filter(|(_, p)| p.active)
            .map(|(uid, p)| {
                let revision = registry.revision(uid);
                let revised = Revised {
                    uid: uid.clone(),
                    revision,
                    entry: None,
                };
                (p, revised)
            })
            .collect();
        let mut changed: HashMap<&str, Vec<&ContainerRecord>> = pods
            .iter()
            .filter(|(_, r)| !known(&r.uid, r.revision))
            .map(|(p, _)| (p.spec.uid.as_str(), Vec::new()))
            .collect();
        if changed.is_empty() {
            return pods.into_iter().map(|(_, r)| r).collect();
        }
        for record in registry.containers().values() {
            if let Some(list) = changed.get_mut(record.pod_uid.as_str()) {
                list.push(record);
            }
        }
        for (record, revised) in &mut pods {
            if let Some(recorded) = changed.get(record.spec.uid.as_str()) {
                revised.entry = Some(PodEntry::capture(registry, record, recorded));
            }
        }
        pods.into_iter().map(|(_, r)| r).collect()
    }

    /// Copies the active pod `namespace`/`name`, if numa-shim knows it.
    pub fn capture_pod(registry: &Registry, namespace: &str, name: &str) -> Option<PodEntry> {
        let record = registry
            .pods()
            .values()
            .find(|p| p.active && p.spec.namespace == namespace && p.spec.name == name)?;
        let recorded: Vec<&ContainerRecord> = registry
            .containers()
            .values()
            .filter(|c| c.pod_uid == record.spec.uid)
            .collect();
        Some(PodEntry::capture(registry, record, &recorded))
    }
}

impl PodEntry {
    /// `recorded`: the container records of this pod, in container-id order. Only direct
    /// lookups (no placement computation) for containers numa-shim created: this runs under
    /// the registry lock.
    fn capture(registry: &Registry, record: &PodRecord, recorded: &[&ContainerRecord]) -> Self {
        let spec = &record.spec;
        let node = registry.node();
        let memory = node.memory_manager();
        let mut containers = Vec::new();
        let mut listed = BTreeSet::new();
        let listable = spec
            .init_containers
            .iter()
            .filter(|c| c.role == ContainerRole::Sidecar)
            .chain(&spec.containers)
            .filter(|c| c.name != PLACEHOLDER);
        // The kubelet reports a container's memory only when it is the container's own
        // (isolation level `container`): a pod-pool container's is the pod's, listed once.
        let pod_level = spec.resources.is_some() && node.config().gates.pod_level_resource_managers;
        for c in listable {
            listed.insert(c.name.as_str());
            let applied = recorded.iter().rev().find(|r| r.name == c.name).copied();
            let own_memory = !pod_level || is_container_equivalent_guaranteed(c);
            let blocks = memory
                .container_blocks(&spec.uid, &c.name)
                .filter(|_| own_memory);
            containers.push(spec_container(node, &spec.uid, &c.name, applied, blocks));
        }
        // Regular init containers are not listed (kubelet), neither are they "extra".
        let init: BTreeSet<&str> = spec
            .init_containers
            .iter()
            .filter(|c| c.role == ContainerRole::Init)
            .map(|c| c.name.as_str())
            .collect();
        for r in recorded {
            if listed.contains(r.name.as_str()) || init.contains(r.name.as_str()) {
                continue;
            }
            listed.insert(r.name.as_str());
            containers.push(ContainerEntry {
                name: r.name.clone(),
                exclusive_cpus: r.exclusive.then(|| r.cpus.clone()),
                memory: Vec::new(),
            });
        }
        Self {
            uid: spec.uid.clone(),
            namespace: spec.namespace.clone(),
            name: spec.name.clone(),
            cpus: node.pod_cpus(&spec.uid),
            memory: memory
                .pod_blocks(&spec.uid)
                .map(<[Block]>::to_vec)
                .unwrap_or_default(),
            containers,
        }
    }
}

/// A container of the spec: the cpuset numa-shim applied when it created the container, else
/// (not created yet) the Node's placement; the Memory Manager's blocks.
fn spec_container(
    node: &Node,
    pod_uid: &str,
    name: &str,
    applied: Option<&ContainerRecord>,
    blocks: Option<&[Block]>,
) -> ContainerEntry {
    let exclusive_cpus = match applied {
        Some(r) => r.exclusive.then(|| r.cpus.clone()),
        None => node
            .container(pod_uid, name)
            .filter(|p| p.exclusive)
            .map(|p| p.cpus),
    };
    ContainerEntry {
        name: name.to_string(),
        exclusive_cpus,
        memory: blocks.map(<[Block]>::to_vec).unwrap_or_default(),
    }
}

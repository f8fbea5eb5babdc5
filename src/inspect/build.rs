//! Building the view: per-CPU owners from sets and maps (shared with `simulate`), and the whole
//! live view from a registry.

use std::collections::BTreeMap;

use super::PodView;
use super::{ContainerRef, ContainerView, CpuView, MemoryView, NumaView, Owner, PlacementView};
use crate::cpuset::CpuSet;
use crate::lifecycle::Registry;
use crate::placement::memory::MEMORY;
use crate::placement::node::{Isolation, Node};
use crate::topology::Topology;

/// Who holds each CPU of `topology`, NUMA node by NUMA node (ascending), CPUs in topology order.
/// `exclusive` maps a CPU to the containers holding it, `pod_pool` to the pod whose budget it
/// is in; CPUs in neither are reserved, shared, or else unavailable. Memory is left empty.
pub fn numa_nodes(
    topology: &Topology,
    reserved: &CpuSet,
    shared: &CpuSet,
    exclusive: &BTreeMap<u32, Vec<ContainerRef>>,
    pod_pool: &BTreeMap<u32, String>,
) -> Vec<NumaView> {
    let mut ids: Vec<u32> = topology.cpus.iter().map(|c| c.numa).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|numa| NumaView {
            id: numa,
            cpus: topology
                .cpus
                .iter()
                .filter(|c| c.numa == numa)
                .map(|c| CpuView {
                    id: c.id,
                    core: c.core,
                    socket: c.socket,
                    owner: owner(c.id, reserved, shared, exclusive, pod_pool),
                })
                .collect(),
            memory_total: topology
                .numa
                .iter()
                .find(|n| n.id == numa)
                .map_or(0, |n| n.memory),
            memory: Vec::new(),
            devices: Vec::new(),
        })
        .collect()
}

fn owner(
    cpu: u32,
    reserved: &CpuSet,
    shared: &CpuSet,
    exclusive: &BTreeMap<u32, Vec<ContainerRef>>,
    pod_pool: &BTreeMap<u32, String>,
) -> Owner {
    if let Some(containers) = exclusive.get(&cpu) {
        Owner::Exclusive {
            containers: containers.clone(),
            in_pod_budget: pod_pool.contains_key(&cpu),
        }
    } else if let Some(pod) = pod_pool.get(&cpu) {
        Owner::PodPool { pod: pod.clone() }
    } else if reserved.contains(cpu) {
        Owner::Reserved
    } else if shared.contains(cpu) {
        Owner::Shared
    } else {
        Owner::Unavailable
    }
}

impl PlacementView {
    /// The view of what `registry` holds now. Call under the registry lock, then drop it.
    pub fn from_registry(registry: &Registry) -> Self {
        let node = registry.node();
        let ids: BTreeMap<(&str, &str), &str> = registry
            .containers()
            .iter()
            .map(|(id, c)| ((c.pod_uid.as_str(), c.name.as_str()), id.as_str()))
            .collect();
        let mut exclusive: BTreeMap<u32, Vec<ContainerRef>> = BTreeMap::new();
        let mut pod_pool = BTreeMap::new();
        let mut pods = Vec::new();
        for (uid, record) in registry.pods().iter().filter(|(_, r)| r.active) {
            let key = format!("{}/{}", record.spec.namespace, record.spec.name);
            let placement = node.placement(uid);
            let mut containers = Vec::new();
            for c in placement.iter().flat_map(|p| &p.containers) {
                if c.exclusive {
                    for cpu in c.cpus.iter() {
                        exclusive.entry(cpu).or_default().push(ContainerRef {
                            pod: key.clone(),
                            container: c.name.clone(),
                        });
                    }
                }
                containers.push(ContainerView {
                    name: c.name.clone(),
                    id: ids
                        .get(&(uid.as_str(), c.name.as_str()))
                        .map(|s| s.to_string()),
                    cpus: c.cpus.to_list(),
                    pool: pool_name(c.isolation).to_string(),
                    memory_nodes: c.cpuset_mems(),
                    devices: Vec::new(),
                });
            }
            // Containers the decision core does not list (held after a restart without their
            // pod's spec, or not in the spec at all): as recorded, where they should run now.
            let listed: Vec<String> = containers.iter().map(|c| c.name.clone()).collect();
            for (id, c) in registry
                .containers()
                .iter()
                .filter(|(_, c)| &c.pod_uid == uid && !listed.contains(&c.name))
            {
                let cpus = registry.desired(c).unwrap_or_else(|| c.cpus.clone());
                if c.exclusive {
                    for cpu in cpus.iter() {
                        exclusive.entry(cpu).or_default().push(ContainerRef {
                            pod: key.clone(),
                            container: c.name.clone(),
                        });
                    }
                }
                let pool = match (c.exclusive, c.pinned) {
                    (true, _) => Isolation::Container,
                    (false, true) => Isolation::Pod,
                    (false, false) => Isolation::Host,
                };
                containers.push(ContainerView {
                    name: c.name.clone(),
                    id: Some(id.clone()),
                    cpus: cpus.to_list(),
                    pool: pool_name(pool).to_string(),
                    memory_nodes: c.mems.clone(),
                    devices: Vec::new(),
                });
            }
            let bubble = placement.as_ref().and_then(|p| p.cpus.clone());
            for cpu in bubble.iter().flat_map(CpuSet::iter) {
                pod_pool.insert(cpu, key.clone());
            }
            let memory_nodes: CpuSet = placement
                .iter()
                .flat_map(|p| &p.memory)
                .flat_map(|b| b.numa.iter().copied())
                .collect();
            pods.push(PodView {
                uid: uid.clone(),
                namespace: record.spec.namespace.clone(),
                name: record.spec.name.clone(),
                source: record.source_name().to_string(),
                sandbox_id: record.sandbox_id.clone(),
                cpus: bubble.as_ref().map(CpuSet::to_list),
                memory_nodes: (!memory_nodes.is_empty()).then(|| memory_nodes.to_list()),
                containers,
            });
        }
        let reserved = node.reserved_cpus();
        let shared = node.unpinned_cpus();
        let mut numa = numa_nodes(node.topology(), &reserved, &shared, &exclusive, &pod_pool);
        for n in &mut numa {
            n.memory = memory(node, n.id);
        }
        Self {
            reserved_cpus: reserved.to_list(),
            shared_cpus: shared.to_list(),
            numa_nodes: numa,
            pods,
            refused: Vec::new(),
            pod_knowledge: Vec::new(),
            devices_without_numa: Vec::new(),
        }
    }
}

/// Memory accounting on NUMA node `id`: the Memory Manager's table, with the assigned bytes
/// split into pod budgets and the rest. Blocks spanning several nodes count evenly on each.
pub(super) fn memory(node: &Node, id: u32) -> Vec<MemoryView> {
    let state = node.memory_manager().state();
    let Some(numa) = state.machine.get(&id) else {
        return Vec::new();
    };
    numa.memory
        .iter()
        .map(|(resource, table)| {
            let pod: u64 = state
                .pods
                .values()
                .flatten()
                .filter(|b| &b.resource == resource && b.numa.contains(&id))
                .map(|b| b.size / b.numa.len().max(1) as u64)
                .sum();
            let pod = pod.min(table.reserved);
            MemoryView {
                resource: resource.clone(),
                total: table.total,
                system_reserved: table.system_reserved,
                pod,
                exclusive: table.reserved - pod,
                free: table.free,
            }
        })
        .collect()
}

/// Whether the accounting is of regular memory (the pool gauges report only that).
pub(super) fn is_memory(view: &MemoryView) -> bool {
    view.resource == MEMORY
}

fn pool_name(isolation: Isolation) -> &'static str {
    match isolation {
        Isolation::Container => "exclusive",
        Isolation::Pod => "pod-shared",
        Isolation::Host => "node-shared",
    }
}

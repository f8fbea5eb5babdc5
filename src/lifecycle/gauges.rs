//! What placement means for the metrics, counted by the lifecycle that changes it: pool sizes
//! per NUMA node for the pool gauges, read straight from the registry (no view, no names or
//! strings, so publishing after every admission or release holds the registry lock briefly),
//! the pods held by where their spec came from, and the kubelet's labels for an admission's
//! allocations and a container's assignments.
//!
//! Label meaning (the kubelet's metric names; `source` read as where the exclusive resources
//! are held): a pod CPU or memory budget (pod scope) counts one allocation with `source=pod`; an
//! exclusive CPU slice or memory pinning of a container outside any pod budget counts one with
//! `source=node`. The pool classification is the placement view's (`inspect`), which
//! tests/podresources/pool_gauges.rs checks CPU by CPU and byte by byte.

use std::collections::BTreeMap;

use super::Registry;
use crate::cpuset::CpuSet;
use crate::placement::memory::MEMORY;
use crate::placement::node::{Isolation, Node};
use crate::telemetry::{AssignmentType, Metrics, Pool, ResourceName, Source};

/// One NUMA node's pools: CPUs per pool, and regular memory bytes per pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaPools {
    pub id: u32,
    /// CPUs by [`POOLS`] order: reserved, shared, exclusive, pod.
    pub cpus: [u64; 4],
    /// Memory bytes by [`POOLS`] order, when the Memory Manager accounts this node.
    pub memory: Option<[u64; 4]>,
}

/// The pools in the order of [`NumaPools`]' arrays.
pub const POOLS: [Pool; 4] = [Pool::Reserved, Pool::Shared, Pool::Exclusive, Pool::Pod];

/// The index of `pool` in [`NumaPools`]' arrays.
pub fn pool_index(pool: Pool) -> usize {
    match pool {
        Pool::Reserved => 0,
        Pool::Shared => 1,
        Pool::Exclusive => 2,
        Pool::Pod => 3,
    }
}

/// The pools of every NUMA node as `registry` holds them now. Call under the registry lock.
pub fn pool_counts(registry: &Registry) -> Vec<NumaPools> {
    let node = registry.node();
    let mut exclusive = CpuSet::new();
    let mut pods = CpuSet::new();
    for uid in registry
        .pods()
        .iter()
        .filter(|(_, r)| r.active)
        .map(|(u, _)| u)
    {
        exclusive = exclusive.union(&node.exclusive_cpus(uid));
        if let Some(bubble) = node.pod_cpus(uid) {
            pods = pods.union(&bubble);
        }
    }
    let reserved = node.reserved_cpus();
    let shared = node.unpinned_cpus();
    let mut out: BTreeMap<u32, NumaPools> = node
        .topology()
        .cpus
        .iter()
        .map(|c| {
            let pools = NumaPools {
                id: c.numa,
                ..NumaPools::default()
            };
            (c.numa, pools)
        })
        .collect();
    for cpu in &node.topology().cpus {
        let pool = if exclusive.contains(cpu.id) && !pods.contains(cpu.id) {
            Pool::Exclusive
        } else if exclusive.contains(cpu.id) || pods.contains(cpu.id) {
            Pool::Pod
        } else if reserved.contains(cpu.id) {
            Pool::Reserved
        } else if shared.contains(cpu.id) {
            Pool::Shared
        } else {
            continue; // held by others (unavailable): in no pool
        };
        if let Some(n) = out.get_mut(&cpu.numa) {
            n.cpus[pool_index(pool)] += 1;
        }
    }
    for n in out.values_mut() {
        n.memory = memory_pools(node, n.id);
    }
    out.into_values().collect()
}

/// Regular memory on NUMA node `id` by [`POOLS`] order: `reservedMemory`, free, held outside
/// pod budgets, held by pod budgets (blocks spanning several nodes count evenly on each).
fn memory_pools(node: &Node, id: u32) -> Option<[u64; 4]> {
    let state = node.memory_manager().state();
    let table = state.machine.get(&id)?.memory.get(MEMORY)?;
    let pod: u64 = state
        .pods
        .values()
        .flatten()
        .filter(|b| b.resource == MEMORY && b.numa.contains(&id))
        .map(|b| b.size / b.numa.len().max(1) as u64)
        .sum();
    let pod = pod.min(table.reserved);
    Some([table.system_reserved, table.free, table.reserved - pod, pod])
}

/// Replaces every pool gauge with `pools` (see [`pool_counts`]).
pub fn publish_pool_counts(pools: &[NumaPools], metrics: &Metrics) {
    let mut cpus = Vec::new();
    let mut memory = Vec::new();
    for n in pools {
        cpus.extend(
            POOLS
                .into_iter()
                .zip(n.cpus)
                .map(|(pool, c)| (n.id, pool, c)),
        );
        if let Some(bytes) = n.memory {
            memory.extend(
                POOLS
                    .into_iter()
                    .zip(bytes)
                    .map(|(pool, b)| (n.id, pool, b)),
            );
        }
    }
    metrics.replace_pools(&cpus, &memory);
}

/// The exclusive allocations an admitted pod got: its budgets (`pod`) and the exclusive
/// Sets the pods-by-source gauge (`numa_shim_pods{source}`) from the registry's active pods.
pub fn publish_pods_by_source(registry: &Registry, metrics: &Metrics) {
    let mut sources: BTreeMap<&str, u64> = BTreeMap::new();
    for record in registry.pods().values().filter(|r| r.active) {
        *sources.entry(record.source_name()).or_default() += 1;
    }
    let rows: Vec<(&str, u64)> = sources.into_iter().collect();
    metrics.set_pods_by_source(&rows);
}

/// resources of containers outside a budget (`node`).
pub fn admission_allocations(node: &Node, pod_uid: &str) -> Vec<(ResourceName, Source)> {
    let Some(p) = node.placement(pod_uid) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if p.cpus.is_some() {
        out.push((ResourceName::Cpu, Source::Pod));
    }
    if !p.memory.is_empty() {
        out.push((ResourceName::Memory, Source::Pod));
    }
    for c in &p.containers {
        if c.exclusive && p.cpus.is_none() {
            out.push((ResourceName::Cpu, Source::Node));
        }
        if !c.memory.is_empty() && p.memory.is_empty() {
            out.push((ResourceName::Memory, Source::Node));
        }
    }
    out
}

/// The assignments of one created container: exclusive CPUs from the node pool or from the
/// pod budget, or the pod shared pool; memory pinned on its own or within the pod budget.
pub fn container_assignments(
    node: &Node,
    pod_uid: &str,
    name: &str,
) -> Vec<(ResourceName, AssignmentType)> {
    // Only the container's placement is built; of the pod, whether it has budgets.
    let Some(c) = node.container(pod_uid, name) else {
        return Vec::new();
    };
    let pod_memory = node
        .memory_manager()
        .pod_blocks(pod_uid)
        .is_some_and(|blocks| !blocks.is_empty());
    let mut out = Vec::new();
    match (c.isolation, node.pod_cpus(pod_uid).is_some()) {
        (Isolation::Container, true) => out.push((ResourceName::Cpu, AssignmentType::PodExclusive)),
        (Isolation::Container, false) => {
            out.push((ResourceName::Cpu, AssignmentType::NodeExclusive))
        }
        (Isolation::Pod, _) => out.push((ResourceName::Cpu, AssignmentType::PodShared)),
        (Isolation::Host, _) => {}
    }
    match (!c.memory.is_empty(), pod_memory) {
        (true, true) => out.push((ResourceName::Memory, AssignmentType::PodExclusive)),
        (true, false) => out.push((ResourceName::Memory, AssignmentType::NodeExclusive)),
        (false, true) if c.memory_nodes.is_some() => {
            out.push((ResourceName::Memory, AssignmentType::PodShared))
        }
        _ => {}
    }
    out
}

//! Pool sizes per NUMA node for the gauges, read straight from the registry: the same
//! classification as the view's CPU owners (see `build`), without building the view (no
//! per-pod placement, no names or strings), so that publishing the gauges after every admission
//! or release holds the registry lock briefly even with many pods.

use std::collections::BTreeMap;

use super::build::{is_memory, memory};
use super::{MemoryView, NumaView, Owner, PlacementView};
use crate::cpuset::CpuSet;
use crate::lifecycle::Registry;
use crate::telemetry::Pool;

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

fn index(pool: Pool) -> usize {
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
    let shared = node.shared_cpus();
    let mut out: BTreeMap<u32, NumaPools> = node
        .topology()
        .cpus
        .iter()
        .map(|c| {
            (
                c.numa,
                NumaPools {
                    id: c.numa,
                    ..NumaPools::default()
                },
            )
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
            n.cpus[index(pool)] += 1;
        }
    }
    for n in out.values_mut() {
        n.memory = memory_pools(&memory(node, n.id));
    }
    out.into_values().collect()
}

/// Regular memory by [`POOLS`] order, if the node has an accounting for it.
fn memory_pools(views: &[MemoryView]) -> Option<[u64; 4]> {
    views
        .iter()
        .find(|m| is_memory(m))
        .map(|m| [m.system_reserved, m.free, m.exclusive, m.pod])
}

/// The same counts from a built view (tests compare the two).
pub fn view_pool_counts(view: &PlacementView) -> Vec<NumaPools> {
    view.numa_nodes.iter().map(numa_pools).collect()
}

fn numa_pools(n: &NumaView) -> NumaPools {
    let mut cpus = [0u64; 4];
    for c in &n.cpus {
        let pool = match &c.owner {
            Owner::Reserved => Pool::Reserved,
            Owner::Shared => Pool::Shared,
            Owner::Exclusive {
                in_pod_budget: false,
                ..
            } => Pool::Exclusive,
            Owner::Exclusive { .. } | Owner::PodPool { .. } => Pool::Pod,
            Owner::Unavailable => continue,
        };
        cpus[index(pool)] += 1;
    }
    NumaPools {
        id: n.id,
        cpus,
        memory: memory_pools(&n.memory),
    }
}

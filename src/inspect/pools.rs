//! Pool sizes per NUMA node counted from a built view, CPU owner by CPU owner: the view's side
//! of the pool gauges, which the lifecycle counts straight from the registry
//! (`lifecycle::gauges`); tests/podresources/pool_gauges.rs checks that the two agree.

use super::build::is_memory;
use super::{MemoryView, NumaView, Owner, PlacementView};
use crate::lifecycle::gauges::{pool_index, NumaPools};
use crate::telemetry::Pool;

/// The pools of every NUMA node of `view`.
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
        cpus[pool_index(pool)] += 1;
    }
    NumaPools {
        id: n.id,
        cpus,
        memory: memory_pools(&n.memory),
    }
}

/// Regular memory by pool order, if the node has an accounting for it.
fn memory_pools(views: &[MemoryView]) -> Option<[u64; 4]> {
    views
        .iter()
        .find(|m| is_memory(m))
        .map(|m| [m.system_reserved, m.free, m.exclusive, m.pod])
}

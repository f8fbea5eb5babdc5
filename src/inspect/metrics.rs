//! What the view and the decision core mean for the metrics: pool sizes per NUMA node, and the
//! kubelet's labels for an admission's allocations and a container's assignments. Pure: the
//! callers (the lifecycle hook) report the answers to `Metrics`.
//!
//! Label meaning (the kubelet's metric names; `source` read as where the exclusive resources
//! are held): a pod CPU or memory budget (pod scope) counts one allocation with `source=pod`; an
//! exclusive CPU slice or memory pinning of a container outside any pod budget counts one with
//! `source=node`.

use super::build::is_memory;
use super::{Owner, PlacementView};
use crate::placement::node::{Isolation, Node};
use crate::telemetry::{AssignmentType, Metrics, Pool, ResourceName, Source};

/// Replaces every pool gauge with the counts of `view`.
pub fn publish_pools(view: &PlacementView, metrics: &Metrics) {
    metrics.clear_pools();
    for n in &view.numa_nodes {
        let mut counts = [0u64; 4];
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
            counts[index(pool)] += 1;
        }
        for pool in POOLS {
            metrics.set_pool_cpus(n.id, pool, counts[index(pool)]);
        }
        for m in n.memory.iter().filter(|m| is_memory(m)) {
            metrics.set_pool_memory_bytes(n.id, Pool::Reserved, m.system_reserved);
            metrics.set_pool_memory_bytes(n.id, Pool::Shared, m.free);
            metrics.set_pool_memory_bytes(n.id, Pool::Exclusive, m.exclusive);
            metrics.set_pool_memory_bytes(n.id, Pool::Pod, m.pod);
        }
    }
}

const POOLS: [Pool; 4] = [Pool::Reserved, Pool::Shared, Pool::Exclusive, Pool::Pod];

fn index(pool: Pool) -> usize {
    match pool {
        Pool::Reserved => 0,
        Pool::Shared => 1,
        Pool::Exclusive => 2,
        Pool::Pod => 3,
    }
}

/// The exclusive allocations an admitted pod got: its budgets (`pod`) and the exclusive
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
    let (Some(pod), Some(c)) = (node.placement(pod_uid), node.container(pod_uid, name)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match (c.isolation, pod.cpus.is_some()) {
        (Isolation::Container, true) => out.push((ResourceName::Cpu, AssignmentType::PodExclusive)),
        (Isolation::Container, false) => {
            out.push((ResourceName::Cpu, AssignmentType::NodeExclusive))
        }
        (Isolation::Pod, _) => out.push((ResourceName::Cpu, AssignmentType::PodShared)),
        (Isolation::Host, _) => {}
    }
    let pod_memory = !pod.memory.is_empty();
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

//! What the view and the decision core mean for the metrics: pool sizes per NUMA node, and the
//! kubelet's labels for an admission's allocations and a container's assignments. Pure: the
//! callers (the lifecycle hook) report the answers to `Metrics`.
//!
//! Label meaning (the kubelet's metric names; `source` read as where the exclusive resources
//! are held): a pod CPU or memory budget (pod scope) counts one allocation with `source=pod`; an
//! exclusive CPU slice or memory pinning of a container outside any pod budget counts one with
//! `source=node`.

use super::pools::{NumaPools, POOLS};
use crate::placement::node::{Isolation, Node};
use crate::telemetry::{AssignmentType, Metrics, ResourceName, Source};

/// Replaces every pool gauge with `pools` (see [`pool_counts`](super::pool_counts)).
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

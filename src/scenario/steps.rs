//! The per-step answer (`simulate --output steps`): after every step, each pod's admission, the
//! CPUs and memory blocks it and its containers hold, and the node's shared CPUs and memory
//! state — the answer format of kubelet-oracle (integration/kubelet-oracle/PROTOCOL.md), so the
//! two can be compared field by field. The types deserialize too: the differential suite reads
//! the oracle's answers into them.

use super::report::{Book, State, Stopped};
use crate::cpuset::CpuSet;
use crate::placement::memory::Block;
use crate::placement::node::{Isolation, Node};
use crate::placement::PodSpec;

/// The whole answer for one scenario.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepsReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Why the kubelet would refuse to start with these settings (then there are no steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    #[serde(default)]
    pub steps: Vec<StepSnapshot>,
}

/// The state after one step.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct StepSnapshot {
    /// Every pod admitted or refused so far and not removed, in order of first arrival.
    #[serde(default)]
    pub pods: Vec<PodState>,
    #[serde(default)]
    pub node: NodeState,
}

/// One pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodState {
    pub namespace: String,
    pub name: String,
    pub admitted: bool,
    /// The kubelet's pod status reason when the node refused the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why the API server would refuse the pod (it never reached the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_error: Option<String>,
    /// The pod-level CPU set (pod scope with pod-level resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// The pod-level memory blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<BlockState>,
    /// Containers not removed, init containers first, in spec order.
    #[serde(default)]
    pub containers: Vec<ContainerState>,
}

/// One container.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    pub name: String,
    /// Its CPU Manager assignment, else the node's default (shared) set.
    pub cpus: String,
    /// `container` (exclusive), `pod` (pod shared pool) or `host` (node shared pool).
    pub isolation: String,
    /// The NUMA nodes the Memory Manager pins it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<BlockState>,
    /// Device plugin devices held: resource → ids ascending (PodResources' devices).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub devices: std::collections::BTreeMap<String, Vec<String>>,
}

/// A memory block: `size` bytes of `type` on the `numa` nodes.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
pub struct BlockState {
    #[serde(rename = "type")]
    pub resource: String,
    pub size: u64,
    pub numa: String,
}

/// The node.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    /// The CPU Manager's default set.
    #[serde(rename = "sharedCPUs")]
    pub shared_cpus: String,
    /// The Memory Manager's machine state (Static memory policy only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<NodeMemory>,
}

/// One NUMA node's table for one memory type.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
pub struct NodeMemory {
    pub numa: u32,
    #[serde(rename = "type")]
    pub resource: String,
    pub allocatable: u64,
    pub free: u64,
    pub reserved: u64,
}

impl StepsReport {
    /// The answer when the kubelet would not start with the settings.
    pub(super) fn refused(id: Option<String>, error: &super::ScenarioError) -> Self {
        let message = match error {
            super::ScenarioError::Kubelet { source, .. } => source.to_string(),
            super::ScenarioError::Node { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        Self {
            id,
            config_error: Some(message),
            steps: Vec::new(),
        }
    }
}

pub(super) fn snapshot(book: &Book, node: &Node, stopped: &Stopped) -> StepSnapshot {
    let pods = book
        .entries()
        .iter()
        .filter_map(|e| {
            let mut p = PodState {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                ..PodState::default()
            };
            match (&e.state, &e.pod) {
                (State::Removed, _) => return None,
                (State::Rejected(err), _) => {
                    p.reason = Some(err.reason().to_string());
                    p.message = Some(err.to_string());
                }
                (State::Refused(msg), _) => p.api_error = Some(msg.clone()),
                (State::Admitted, Some(pod)) => admitted(&mut p, node, pod, stopped),
                (State::Admitted, None) => return None,
            }
            Some(p)
        })
        .collect();
    let mut memory: Vec<NodeMemory> = node
        .memory_manager()
        .state()
        .machine
        .iter()
        .flat_map(|(&numa, state)| {
            state.memory.iter().map(move |(resource, t)| NodeMemory {
                numa,
                resource: resource.clone(),
                allocatable: t.allocatable,
                free: t.free,
                reserved: t.reserved,
            })
        })
        .collect();
    memory.sort();
    StepSnapshot {
        pods,
        node: NodeState {
            shared_cpus: node.shared_cpus().to_list(),
            memory,
        },
    }
}

fn admitted(p: &mut PodState, node: &Node, pod: &PodSpec, stopped: &Stopped) {
    p.admitted = true;
    let Some(placement) = node.placement(&pod.uid) else {
        return;
    };
    let gone = stopped.get(&pod.uid);
    p.cpus = placement.cpus.as_ref().map(CpuSet::to_list);
    p.memory = blocks(&placement.memory);
    p.containers = placement
        .containers
        .iter()
        .filter(|c| gone.is_none_or(|g| !g.contains(&c.name)))
        .map(|c| ContainerState {
            name: c.name.clone(),
            cpus: c.cpus.to_list(),
            isolation: isolation(c.isolation).to_string(),
            memory_nodes: c
                .memory_nodes
                .map(|m| m.ids().collect::<CpuSet>().to_list()),
            memory: blocks(&c.memory),
            devices: c.devices.clone(),
        })
        .collect();
}

/// Blocks sorted by type then NUMA nodes (the kubelet's order comes from a Go map).
pub fn blocks(blocks: &[Block]) -> Vec<BlockState> {
    let mut out: Vec<BlockState> = blocks
        .iter()
        .map(|b| BlockState {
            resource: b.resource.clone(),
            size: b.size,
            numa: b.numa.iter().copied().collect::<CpuSet>().to_list(),
        })
        .collect();
    out.sort();
    out
}

/// The kubelet's `ResourceIsolationLevel` names.
pub fn isolation(i: Isolation) -> &'static str {
    match i {
        Isolation::Host => "host",
        Isolation::Pod => "pod",
        Isolation::Container => "container",
    }
}

#[cfg(test)]
mod tests;

//! The Memory Manager with the `Static` policy: a per-NUMA table for regular memory and every
//! hugepage size, NUMA hints ("groups"), per-container and per-pod (PLRM) memory blocks.
//!
//! It owns the memory accounting only. It never picks CPUs, never touches cgroups and never
//! changes memory limits; it pins NUMA nodes (`cpuset.mems`) and accounts, as the kubelet does.

mod alloc;
mod hints;
mod pod;
mod qos;
mod table;

use std::collections::BTreeMap;

use super::config::{Config, FeatureGates, MemoryPolicy};
use super::provider::spelled_out;
use super::topology_manager::{Budget, Exhausted};
use super::{
    AdmissionError, ContainerRole, ContainerSpec, HintProvider, HintSets, NumaMask, PodSpec,
    ResourceHints, TopologyHint,
};
use crate::topology::Topology;
use hints::Requests;

/// Resource name of regular memory.
pub const MEMORY: &str = "memory";

/// Why the Memory Manager cannot start with this configuration or restore this state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    #[error("[memorymanager] you should specify the system reserved memory")]
    NoSystemReserved,
    #[error("the reserved memory configuration references a NUMA node {0} that does not exist on this machine")]
    UnknownNumaNode(u32),
    #[error(
        "reserved {reserved} bytes of {resource} on NUMA node {node} exceed its {total} bytes"
    )]
    ReservedExceedsTotal {
        node: u32,
        resource: String,
        reserved: u64,
        total: u64,
    },
    #[error("[memorymanager] machine state can not be empty when it has memory assignments")]
    EmptyMachineState,
    #[error("[memorymanager] (pod: {pod}, container: {container}) the memory assignment uses the NUMA that does not exist")]
    UnknownAssignmentNode { pod: String, container: String },
    #[error("[memorymanager] (pod: {pod}, container: {container}) the memory assignment uses memory resource that does not exist")]
    UnknownAssignmentResource { pod: String, container: String },
    #[error("[memorymanager] the expected machine state is different from the real one")]
    MachineStateMismatch,
}

/// kubelet `MemoryTable` (bytes).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct MemoryTable {
    pub total: u64,
    pub system_reserved: u64,
    pub allocatable: u64,
    pub reserved: u64,
    pub free: u64,
}

/// kubelet `NUMANodeState`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct NumaState {
    pub assignments: u64,
    /// The group this node belongs to (itself when single).
    pub cells: Vec<u32>,
    /// Resource name (`memory`, `hugepages-2Mi`, …) → table.
    pub memory: BTreeMap<String, MemoryTable>,
}

/// kubelet `state.Block`: `size` bytes of `resource` on the `numa` nodes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Block {
    pub numa: Vec<u32>,
    pub resource: String,
    pub size: u64,
}

/// The NUMA nodes `blocks` lie on (their union).
pub fn block_nodes(blocks: &[Block]) -> NumaMask {
    NumaMask::from_ids(blocks.iter().flat_map(|b| b.numa.iter().copied()))
}

/// Everything the kubelet checkpoints (`memory_manager_state`), plus nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct MemoryState {
    pub machine: BTreeMap<u32, NumaState>,
    /// Pod UID → container name → blocks.
    pub containers: BTreeMap<String, BTreeMap<String, Vec<Block>>>,
    /// Pod UID → pod-level (PLRM) blocks.
    pub pods: BTreeMap<String, Vec<Block>>,
}

/// Pod UID → NUMA mask → resource → reusable bytes of finished regular init containers.
type Reusable = BTreeMap<String, BTreeMap<NumaMask, BTreeMap<String, u64>>>;

/// Saved by [`MemoryManager::undo_point`] before an admission.
#[derive(Debug, Clone, Default)]
pub struct MemoryUndo {
    reusable: Reusable,
}

/// The Memory Manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryManager {
    policy: MemoryPolicy,
    gates: FeatureGates,
    /// The machine state with nothing allocated.
    default_machine: BTreeMap<u32, NumaState>,
    state: MemoryState,
    reusable: Reusable,
}

impl MemoryManager {
    /// Builds the default machine state from the topology minus `reservedMemory`.
    pub fn new(topology: &Topology, config: &Config) -> Result<Self, MemoryError> {
        let machine = if config.memory_policy == MemoryPolicy::Static {
            table::default_machine_state(topology, &config.reserved_memory)?
        } else {
            BTreeMap::new()
        };
        Ok(Self {
            policy: config.memory_policy,
            gates: config.gates,
            default_machine: machine.clone(),
            state: MemoryState {
                machine,
                ..MemoryState::default()
            },
            reusable: Reusable::new(),
        })
    }

    /// The checkpointed state.
    pub fn state(&self) -> &MemoryState {
        &self.state
    }

    /// Replaces the state (restore after restart) after kubelet's `validateState`: the machine
    /// state must equal the default one charged with every stored block. An empty machine state
    /// without assignments keeps the fresh state. Init-container reuse bookkeeping starts empty.
    ///
    /// Deviation: a NUMA node's memory total may move while the machine runs (a VM's balloon,
    /// memory hotplug); the kubelet then refuses its own checkpoint. Here a state consistent with
    /// the tables it was taken on, whose every block still fits today's memory, is kept: the
    /// blocks stand and today's tables are charged with them.
    pub fn restore(&mut self, state: MemoryState) -> Result<(), MemoryError> {
        if state.machine.is_empty() {
            if !state.containers.is_empty() {
                return Err(MemoryError::EmptyMachineState);
            }
            self.state = MemoryState {
                machine: self.default_machine.clone(),
                ..MemoryState::default()
            };
        } else {
            match table::validate_state(&self.default_machine, &state, self.gates) {
                Ok(()) => self.state = state,
                Err(MemoryError::MachineStateMismatch) => {
                    let machine =
                        table::recharge_resized(&self.default_machine, &state, self.gates)
                            .map_err(|_| MemoryError::MachineStateMismatch)?;
                    tracing::info!(
                        "memory size changed since the checkpoint; every block still fits"
                    );
                    self.state = MemoryState { machine, ..state };
                }
                Err(err) => return Err(err),
            }
        }
        self.reusable.clear();
        Ok(())
    }

    /// kubelet `GetAllocatableMemory`: one single-node block per NUMA node and resource with
    /// non-zero allocatable, ascending by node then resource name.
    pub fn allocatable(&self) -> Vec<Block> {
        let mut out = Vec::new();
        for (&id, node) in &self.state.machine {
            for (name, t) in &node.memory {
                if t.allocatable > 0 {
                    out.push(Block {
                        numa: vec![id],
                        resource: name.clone(),
                        size: t.allocatable,
                    });
                }
            }
        }
        out
    }

    /// The container's blocks, if it has any.
    pub fn container_blocks(&self, pod_uid: &str, container: &str) -> Option<&[Block]> {
        self.state
            .containers
            .get(pod_uid)?
            .get(container)
            .map(Vec::as_slice)
    }

    /// The pod-level (PLRM) blocks, if the pod has a memory bubble.
    pub fn pod_blocks(&self, pod_uid: &str) -> Option<&[Block]> {
        self.state.pods.get(pod_uid).map(Vec::as_slice)
    }

    /// The hints of a pod whose budget already holds memory: its blocks' NUMA nodes, as the
    /// kubelet regenerates a container's (a fractional budget resized to whole CPUs gets its
    /// bubble beside them). `None` without a pod budget's blocks.
    pub(crate) fn held_pod_hint_sets(&self, pod: &PodSpec) -> Option<HintSets> {
        let blocks = self.pod_blocks(&pod.uid)?;
        let reqs = hints::pod_requests(pod, self.gates);
        Some(spelled_out(hints::regenerate(blocks, &reqs)))
    }

    /// kubelet `GetMemoryNUMANodes`: the union of the container's block nodes; `None` when the
    /// container has no blocks (cpuset.mems is then left alone).
    pub fn memory_nodes(&self, pod_uid: &str, container: &str) -> Option<NumaMask> {
        let mask = block_nodes(self.container_blocks(pod_uid, container)?);
        (!mask.is_empty()).then_some(mask)
    }

    /// Whether the manager holds anything for the pod (blocks or reusable memory).
    pub fn holds_pod(&self, pod_uid: &str) -> bool {
        self.state.containers.contains_key(pod_uid)
            || self.state.pods.contains_key(pod_uid)
            || self.reusable.contains_key(pod_uid)
    }

    /// What [`MemoryManager::undo_pod`] needs: the init-container reuse map (at most one pod's
    /// entry).
    pub fn undo_point(&self) -> MemoryUndo {
        MemoryUndo {
            reusable: self.reusable.clone(),
        }
    }

    /// Undoes a failed admission of a pod that held nothing before it, as the kubelet does: its
    /// stale-state sweep removes the refused pod's containers through the policy's
    /// `RemoveContainer`. What goes back into a multi-NUMA group goes to the group's lowest node
    /// with memory reserved, which is not always the node the allocation charged: the node's
    /// decisions are as before, the group's per-node split may differ, exactly as in the kubelet.
    pub fn undo_pod(&mut self, pod_uid: &str, undo: MemoryUndo) {
        self.remove_pod(pod_uid);
        self.reusable = undo.reusable;
    }

    /// kubelet `AddContainer` (called in `PreStartContainer`, once the runtime has created the
    /// container and before it starts): the regular init containers listed before `container`
    /// (all of them for an app container) have finished, so what they hold goes back by the
    /// rules of removing them. Sidecars keep theirs. Unknown pods and containers are ignored.
    pub fn start_container(&mut self, pod: &PodSpec, container: &str) {
        for init in &pod.init_containers {
            if init.name == container {
                break;
            }
            if init.role == ContainerRole::Sidecar {
                continue;
            }
            alloc::remove_container(self, &pod.uid, &init.name);
        }
    }

    /// In-place resize of a pod-level (PLRM) budget: the pod's memory bubble and its containers'
    /// blocks allocated again for `pod`'s new budget, with the NUMA nodes the bubble has now as
    /// the affinity (the kubelet's allocation extends it when they cannot hold the budget: the
    /// caller checks). Containers that had no blocks any more (regular init containers that
    /// finished) get none back. The caller puts the manager back when this fails; `Err` says why.
    pub fn reallocate_pod(&mut self, pod: &PodSpec) -> Result<(), String> {
        let Some(blocks) = self.pod_blocks(&pod.uid) else {
            return Ok(());
        };
        let nodes = block_nodes(blocks);
        let had: Vec<String> = self
            .state
            .containers
            .get(&pod.uid)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let reusable = self.reusable.remove(&pod.uid);
        self.remove_pod(&pod.uid);
        let hint = TopologyHint {
            affinity: Some(nodes),
            preferred: true,
        };
        pod::allocate_pod(self, pod, &hint).map_err(|e| e.to_string())?;
        if let Some(r) = reusable {
            self.reusable.insert(pod.uid.clone(), r);
        }
        if let Some(entries) = self.state.containers.get_mut(&pod.uid) {
            entries.retain(|name, _| had.contains(name));
        }
        Ok(())
    }

    /// Releases every container of the pod (and its bubble).
    pub fn remove_pod(&mut self, pod_uid: &str) {
        let names: Vec<String> = self
            .state
            .containers
            .get(pod_uid)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for name in names {
            self.remove_container(pod_uid, &name);
        }
        if let Some(blocks) = self.state.pods.remove(pod_uid) {
            alloc::release(&mut self.state.machine, &blocks);
        }
        self.reusable.remove(pod_uid);
    }
}

impl MemoryManager {
    /// `GetTopologyHints`: `Ok(None)` = the regenerated or empty answer is already in `early`.
    fn container_hint_inputs(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<Requests, ResourceHints> {
        if self.policy != MemoryPolicy::Static || !qos::is_guaranteed(pod, self.gates) {
            return Err(ResourceHints::new());
        }
        let reqs = hints::container_requests(pod, container, self.gates);
        if qos::skipped_by_gates(pod, self.gates) {
            return Err(ResourceHints::new());
        }
        if let Some(blocks) = self.container_blocks(&pod.uid, &container.name) {
            return Err(hints::regenerate(blocks, &reqs));
        }
        Ok(reqs)
    }

    /// `GetPodTopologyHints` up to `calculateHints`.
    fn pod_hint_inputs(&self, pod: &PodSpec) -> Result<Requests, ResourceHints> {
        if self.policy != MemoryPolicy::Static || !qos::is_guaranteed(pod, self.gates) {
            return Err(ResourceHints::new());
        }
        let reqs = hints::pod_requests(pod, self.gates);
        if qos::skipped_by_gates(pod, self.gates) {
            return Err(ResourceHints::new());
        }
        if qos::plrm(pod, self.gates) && pod::validate_pod_scope(pod, self.gates).is_err() {
            return Err(reqs.keys().map(|k| (k.clone(), Some(Vec::new()))).collect());
        }
        if reqs.is_empty() {
            return Err(ResourceHints::new());
        }
        for c in pod.init_containers.iter().chain(&pod.containers) {
            if let Some(blocks) = self.container_blocks(&pod.uid, &c.name) {
                return Err(hints::regenerate(blocks, &reqs));
            }
        }
        Ok(reqs)
    }

    fn sets(
        &self,
        pod_uid: &str,
        inputs: Result<Requests, ResourceHints>,
    ) -> Result<HintSets, Exhausted> {
        match inputs {
            Err(early) => Ok(spelled_out(early)),
            Ok(reqs) => hints::calculate_sets(
                &self.state.machine,
                &self.reusable,
                pod_uid,
                &reqs,
                &Budget::new(Budget::DEFAULT),
            ),
        }
    }
}

impl HintProvider for MemoryManager {
    fn container_hints(&self, pod: &PodSpec, container: &ContainerSpec) -> ResourceHints {
        match self.container_hint_inputs(pod, container) {
            Err(early) => early,
            Ok(reqs) => hints::calculate(&self.state.machine, &self.reusable, &pod.uid, &reqs),
        }
    }

    fn pod_hints(&self, pod: &PodSpec) -> ResourceHints {
        match self.pod_hint_inputs(pod) {
            Err(early) => early,
            Ok(reqs) => hints::calculate(&self.state.machine, &self.reusable, &pod.uid, &reqs),
        }
    }

    fn container_hint_sets(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<HintSets, Exhausted> {
        self.sets(&pod.uid, self.container_hint_inputs(pod, container))
    }

    fn pod_hint_sets(&self, pod: &PodSpec) -> Result<HintSets, Exhausted> {
        self.sets(&pod.uid, self.pod_hint_inputs(pod))
    }

    fn allocate(
        &mut self,
        pod: &PodSpec,
        container: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        if self.policy != MemoryPolicy::Static {
            return Ok(());
        }
        alloc::allocate(self, pod, container, hint)
    }

    fn allocate_pod(&mut self, pod: &PodSpec, hint: &TopologyHint) -> Result<(), AdmissionError> {
        if self.policy != MemoryPolicy::Static {
            return Ok(());
        }
        pod::allocate_pod(self, pod, hint)
    }

    fn remove_container(&mut self, pod_uid: &str, container: &str) {
        alloc::remove_container(self, pod_uid, container);
    }
}

/// kubelet's hugepage resource name for a page size in bytes (`hugepages-2Mi`, `hugepages-1Gi`).
pub fn hugepage_resource_name(size: u64) -> String {
    format!("hugepages-{}", crate::quantity::format_binary(size))
}

#[cfg(test)]
mod tests;

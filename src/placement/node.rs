//! `Node`: one machine's resource managers driven the kubelet's way. Owns the topology, the
//! config, the device manager, the CPU Manager, the Memory Manager and the Topology Manager;
//! admits pods atomically (scope, policy, providers in kubelet order: devices, CPU, memory) and
//! answers placement queries. What the kubelet's device manager holds comes in per decision
//! ([`Node::set_devices`]).
//!
//! It never does I/O and never talks CRI: the shell asks it and carries the answers out.

mod adopt;
mod cpus;
mod placement;
mod resize;

use std::collections::{BTreeMap, BTreeSet};

pub use adopt::{AdoptError, Found};
pub use placement::{ContainerPlacement, CpuQuota, Isolation, PodPlacement};
pub use resize::ResizeError;

use self::cpus::CpuBackend;
use super::config::{Config, TopologyPolicy, TopologyScope};
use super::cpu::{CpuError, CpuState, CpuUndo};
use super::device::claims::{self, ClaimFacts};
use super::device::{DeviceFacts, DeviceManager, Ledger};
use super::error::RefusingScope;
use super::memory::{Block, MemoryError, MemoryManager, MemoryState, MemoryUndo};
use super::qos::IsolationLevel;
use super::topology_manager::{TopologyManager, TopologyManagerError};
use super::{AdmissionError, ContainerSpec, HintProvider, NumaMask, PodSpec, TopologyHint};
use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// Why a `Node` cannot be built or restored. Config errors name the kubelet field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("reservedSystemCPUs: {reserved} is not inside the machine's CPUs {machine}")]
    ReservedOutsideMachine { reserved: CpuSet, machine: CpuSet },
    #[error("unavailable CPUs {cpus} are not all free non-reserved CPUs ({free})")]
    UnavailableNotFree { cpus: CpuSet, free: CpuSet },
    /// A CPU Manager start or restore error (kubelet's message), with the field it comes from.
    #[error("{field}: {source}")]
    Cpu {
        field: &'static str,
        source: CpuError,
    },
    #[error("kubeReserved.cpu + systemReserved.cpu: [cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")]
    NoReservedCpus,
    #[error("reservedMemory: {0}")]
    Memory(#[from] MemoryError),
    #[error("topologyManagerPolicyOptions: {0}")]
    Topology(#[from] TopologyManagerError),
    #[error("memory_manager_state: {0}")]
    MemoryState(MemoryError),
}

/// One admitted pod as the node remembers it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct AdmittedPod {
    spec: PodSpec,
    /// Container name → the Topology Manager's hint for it.
    hints: BTreeMap<String, StoredHint>,
    /// Containers not removed yet.
    live: BTreeSet<String>,
    /// Containers that started (kubelet `AddContainer`), in start order.
    #[serde(default)]
    started: Vec<String>,
    /// What in-place resizes may never take away (`node::resize`).
    #[serde(default, skip_serializing_if = "resize::Promised::is_empty")]
    promised: resize::Promised,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredHint {
    affinity: Option<u64>,
    preferred: bool,
}

impl From<TopologyHint> for StoredHint {
    fn from(h: TopologyHint) -> Self {
        Self {
            affinity: h.affinity.map(|m| m.0),
            preferred: h.preferred,
        }
    }
}

impl From<StoredHint> for TopologyHint {
    fn from(h: StoredHint) -> Self {
        Self {
            affinity: h.affinity.map(NumaMask),
            preferred: h.preferred,
        }
    }
}

/// Everything a node's decisions depend on besides topology and config; serde-able.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeSnapshot {
    cpu: CpuState,
    memory: MemoryState,
    pods: BTreeMap<String, AdmittedPod>,
    /// Devices held per pod and container.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    devices: Ledger,
}

/// How [`Node::admit`] puts the managers back when an admission fails.
enum Rollback {
    /// The pod held something before: the whole state as it was.
    Copy(Box<(CpuBackend, MemoryManager)>),
    /// The pod held nothing: give back what it got, then put back the small tables.
    Undo(CpuUndo, MemoryUndo),
}

/// The machine's resource managers.
#[derive(Debug, Clone)]
pub struct Node {
    topology: Topology,
    config: Config,
    devices: DeviceManager,
    /// The DRA claims of the pod decided next (`set_claims`); used for that pod only.
    claims: ClaimFacts,
    cpu: CpuBackend,
    memory: MemoryManager,
    topology_manager: TopologyManager,
    pods: BTreeMap<String, AdmittedPod>,
}

impl Node {
    /// Builds the managers; fails like the kubelet would refuse to start.
    pub fn new(topology: Topology, config: Config) -> Result<Self, NodeError> {
        let topology_manager =
            TopologyManager::new(&topology, config.topology_policy, config.topology_options)?;
        let cpu = CpuBackend::new(&topology, &config)?;
        let memory = MemoryManager::new(&topology, &config)?;
        let devices = DeviceManager::new(topology_manager.numa_nodes().to_vec());
        Ok(Self {
            topology,
            config,
            devices,
            claims: ClaimFacts::default(),
            cpu,
            memory,
            topology_manager,
            pods: BTreeMap::new(),
        })
    }

    /// Marks CPUs as held by others (pods that predate the shim): removed from the shared pool
    /// and never granted.
    pub fn mark_unavailable(&mut self, cpus: &CpuSet) -> Result<(), NodeError> {
        self.cpu.mark_unavailable(cpus)
    }

    /// Gives CPUs marked unavailable back to the shared pool (their holder is gone).
    /// CPUs that were not marked are ignored.
    pub fn release_unavailable(&mut self, cpus: &CpuSet) {
        self.cpu.release_unavailable(cpus);
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn memory_manager(&self) -> &MemoryManager {
        &self.memory
    }

    /// What the kubelet's device manager holds now (allocatable devices, devices of other
    /// pods), and the devices it already gave to the containers of the pod decided next.
    /// Kept until replaced; `allocated` passes to the next pod admitted.
    pub fn set_devices(&mut self, facts: DeviceFacts) {
        self.devices.set_facts(facts);
    }

    /// The DRA claims of the pod decided next, with their devices' NUMA nodes (docs/devices.md,
    /// "DRA claims"). They count for the pod named in them only; kept until replaced.
    pub fn set_claims(&mut self, claims: ClaimFacts) {
        self.claims = claims;
    }

    pub fn claims(&self) -> &ClaimFacts {
        &self.claims
    }

    pub fn device_manager(&self) -> &DeviceManager {
        &self.devices
    }

    /// [`Node::set_devices`] then [`Node::admit`].
    pub fn admit_with_devices(
        &mut self,
        pod: &PodSpec,
        facts: DeviceFacts,
    ) -> Result<PodPlacement, AdmissionError> {
        self.set_devices(facts);
        self.admit(pod)
    }

    /// kubelet admission for the pod, including allocation for every container; atomic: on
    /// error nothing changes. Admitting an already admitted pod returns its placement.
    pub fn admit(&mut self, pod: &PodSpec) -> Result<PodPlacement, AdmissionError> {
        if self.pods.contains_key(&pod.uid) {
            self.devices.admitted(pod);
            return self
                .placement(&pod.uid)
                .ok_or_else(|| AdmissionError::Unexpected(format!("pod {} lost", pod.uid)));
        }
        // A pod that holds nothing yet is undone by giving back what it got plus the small
        // per-node tables saved here (their size does not grow with the pods on the node).
        // Anything else (e.g. a bubble restored from a checkpoint) is undone from a copy.
        let rollback = if self.cpu.holds_pod(&pod.uid) || self.memory.holds_pod(&pod.uid) {
            Rollback::Copy(Box::new((self.cpu.clone(), self.memory.clone())))
        } else {
            Rollback::Undo(self.cpu.undo_point(), self.memory.undo_point())
        };
        let devices_before = self.devices.pod_record(&pod.uid);
        match self.admit_inner(pod) {
            Ok(hints) => {
                self.devices.admitted(pod);
                let live = containers(pod).map(|c| c.name.clone()).collect();
                let record = AdmittedPod {
                    spec: pod.clone(),
                    hints,
                    live,
                    started: Vec::new(),
                    promised: Default::default(),
                };
                self.pods.insert(pod.uid.clone(), record);
                tracing::debug!(pod = %pod.uid, "admitted");
                self.placement(&pod.uid)
                    .ok_or_else(|| AdmissionError::Unexpected(format!("pod {} lost", pod.uid)))
            }
            Err(e) => {
                match rollback {
                    Rollback::Copy(saved) => (self.cpu, self.memory) = *saved,
                    Rollback::Undo(cpu, memory) => {
                        self.cpu.undo_pod(&pod.uid, cpu);
                        self.memory.undo_pod(&pod.uid, memory);
                    }
                }
                self.devices.put_back(&pod.uid, devices_before);
                tracing::debug!(pod = %pod.uid, reason = e.reason(), "rejected");
                Err(e)
            }
        }
    }

    #[allow(clippy::needless_pass_by_value)]
    fn admit_inner(
        &mut self,
        pod: &PodSpec,
    ) -> Result<BTreeMap<String, StoredHint>, AdmissionError> {
        let mut stored = BTreeMap::new();
        if self.config.topology_policy == TopologyPolicy::None {
            let hint = TopologyHint {
                affinity: None,
                preferred: false,
            };
            for c in containers(pod) {
                self.allocate_container(pod, c, &hint)?;
            }
            return Ok(stored);
        }
        match self.config.topology_scope {
            TopologyScope::Container => {
                for c in containers(pod) {
                    let claimed = self.claims.container_hints(pod, c, self.numa_nodes());
                    let mut hints = [
                        self.devices.container_hint_sets(pod, c).map_err(too_wide)?,
                        self.cpu.container_hint_sets(pod, c).map_err(too_wide)?,
                        self.memory.container_hint_sets(pod, c).map_err(too_wide)?,
                    ];
                    let (hint, admit) = self.merge_with_claims(&mut hints, &claimed)?;
                    if !admit {
                        return Err(self.refusal(pod, RefusingScope::Container, &hints, &claimed));
                    }
                    stored.insert(c.name.clone(), hint.into());
                    self.allocate_container(pod, c, &hint)?;
                }
            }
            TopologyScope::Pod => {
                let claimed = self.claims.pod_hints(pod, self.numa_nodes());
                let mut hints = [
                    self.devices.pod_hint_sets(pod).map_err(too_wide)?,
                    self.cpu.pod_hint_sets(pod).map_err(too_wide)?,
                    self.memory.pod_hint_sets(pod).map_err(too_wide)?,
                ];
                let (hint, admit) = self.merge_with_claims(&mut hints, &claimed)?;
                if !admit {
                    return Err(self.refusal(pod, RefusingScope::Pod, &hints, &claimed));
                }
                for c in containers(pod) {
                    stored.insert(c.name.clone(), hint.into());
                }
                if super::qos::pod_level_managed(pod, &self.config.gates) {
                    // The device manager's AllocatePod does nothing: the kubelet gives these
                    // pods their devices when each container starts (`start_container`).
                    self.devices.allocate_pod(pod, &hint)?;
                    self.cpu.allocate_pod(pod, &hint)?;
                    self.memory.allocate_pod(pod, &hint)?;
                } else {
                    for c in containers(pod) {
                        self.allocate_container(pod, c, &hint)?;
                    }
                }
            }
        }
        Ok(stored)
    }

    fn numa_nodes(&self) -> &[u32] {
        self.topology_manager.numa_nodes()
    }

    /// The merge with the pod's DRA claims as one more device resource each (`hints[0]` is the
    /// device manager's; the claims are added to it).
    fn merge_with_claims(
        &self,
        hints: &mut [super::HintSets; 3],
        claimed: &super::ResourceHints,
    ) -> Result<(TopologyHint, bool), AdmissionError> {
        hints[0].extend(super::provider::spelled_out(claimed.clone()));
        self.merge(hints)
    }

    /// Why the merge refused: when the pod's DRA claims place something and the merge without
    /// them would have admitted, the claims are the cause and the error names them; else the
    /// Topology Manager's own error.
    fn refusal(
        &self,
        pod: &PodSpec,
        scope: RefusingScope,
        hints: &[super::HintSets; 3],
        claimed: &super::ResourceHints,
    ) -> AdmissionError {
        let placing = self.claims.placing(claimed);
        if !placing.is_empty() {
            let mut without = hints.clone();
            without[0].retain(|res, _| !claimed.contains_key(res));
            if matches!(self.merge(&without), Ok((_, true))) {
                return AdmissionError::ClaimTopologyAffinity {
                    claims: claims::describe(&placing),
                };
            }
        }
        self.affinity_error(pod, scope)
    }

    /// The Topology Manager's refusal: kubelet's `PodLevelTopologyAffinityError` for a pod with
    /// pod-level resources under PodLevelResourceManagers, its `TopologyAffinityError` else.
    fn affinity_error(&self, pod: &PodSpec, scope: RefusingScope) -> AdmissionError {
        if self.config.gates.pod_level_resource_managers
            && super::qos::is_pod_level_resources_set(pod)
        {
            AdmissionError::PodLevelTopologyAffinity { scope }
        } else {
            AdmissionError::TopologyAffinity
        }
    }

    fn allocate_container(
        &mut self,
        pod: &PodSpec,
        c: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        self.devices.allocate(pod, c, hint)?;
        self.cpu.allocate(pod, c, hint)?;
        self.memory.allocate(pod, c, hint)
    }

    /// A live container of an admitted pod starts (the kubelet's `PreStartContainer`: its
    /// managers' `AddContainer`, after the runtime created the container and before it starts
    /// it). The Memory Manager then gives back what the regular init containers before it held.
    /// Returns false for an unknown pod or a container that is not live.
    pub fn start_container(&mut self, pod_uid: &str, name: &str) -> bool {
        let Some(record) = self.pods.get_mut(pod_uid) else {
            return false;
        };
        if !record.live.contains(name) {
            return false;
        }
        // The kubelet's GetDeviceRunContainerOptions: a container without its devices yet (a
        // pod-level pod under the pod scope) gets them now, with the pod's hint.
        if let Some(c) = containers(&record.spec).find(|c| c.name == name) {
            if self.devices.needs_allocation(&record.spec, c) {
                let hint = record
                    .hints
                    .get(name)
                    .copied()
                    .map_or(NO_HINT, TopologyHint::from);
                if let Err(e) = self.devices.allocate(&record.spec, c, &hint) {
                    tracing::debug!(pod = %pod_uid, container = %name, error = %e, "devices not allocated at start");
                    return false;
                }
            }
        }
        if !record.started.iter().any(|s| s == name) {
            record.started.push(name.to_string());
        }
        self.memory.start_container(&record.spec, name);
        tracing::debug!(pod = %pod_uid, container = %name, "started");
        true
    }

    /// Whether the container started (and was not removed since).
    pub fn is_started(&self, pod_uid: &str, name: &str) -> bool {
        self.pods
            .get(pod_uid)
            .is_some_and(|r| r.live.contains(name) && r.started.iter().any(|s| s == name))
    }

    /// Releases one container by the kubelet's rules (PLRM pods: everything goes back with the
    /// last container). Unknown pods/containers are ignored.
    pub fn remove_container(&mut self, pod_uid: &str, name: &str) {
        let Some(record) = self.pods.get_mut(pod_uid) else {
            return;
        };
        if !record.live.remove(name) {
            return;
        }
        self.cpu.remove_container(pod_uid, name);
        self.memory.remove_container(pod_uid, name);
        if record.live.is_empty() {
            self.pods.remove(pod_uid);
            self.memory.remove_pod(pod_uid);
            self.devices.remove_pod(pod_uid);
        }
        tracing::debug!(pod = %pod_uid, container = %name, "removed");
    }

    /// Releases every container of the pod: the started ones in start order, then the others
    /// in spec order.
    pub fn remove_pod(&mut self, pod_uid: &str) {
        let names: Vec<String> = match self.pods.get(pod_uid) {
            Some(r) => {
                let unstarted = containers(&r.spec)
                    .map(|c| &c.name)
                    .filter(|n| !r.started.contains(n));
                r.started
                    .iter()
                    .chain(unstarted)
                    .filter(|n| r.live.contains(*n))
                    .cloned()
                    .collect()
            }
            None => return,
        };
        for name in names {
            self.remove_container(pod_uid, &name);
        }
        // A pod admitted without containers has nothing live whose removal would drop it.
        if self.pods.get(pod_uid).is_some_and(|r| r.live.is_empty()) {
            self.pods.remove(pod_uid);
            self.memory.remove_pod(pod_uid);
            self.devices.remove_pod(pod_uid);
        }
    }

    /// Admitted pod UIDs, sorted.
    pub fn pods(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    /// The pod's current placement (shared containers see the current node pool).
    pub fn placement(&self, pod_uid: &str) -> Option<PodPlacement> {
        let record = self.pods.get(pod_uid)?;
        let pod = &record.spec;
        let containers = containers(pod)
            .filter(|c| record.live.contains(&c.name))
            .filter_map(|c| self.container(pod_uid, &c.name))
            .collect();
        Some(placement::pod_placement(self, pod, containers))
    }

    /// One live container's placement.
    pub fn container(&self, pod_uid: &str, name: &str) -> Option<ContainerPlacement> {
        let record = self.pods.get(pod_uid)?;
        if !record.live.contains(name) {
            return None;
        }
        let c = containers(&record.spec).find(|c| c.name == name)?;
        let hint = record.hints.get(name).copied().map(TopologyHint::from);
        Some(placement::container_placement(self, &record.spec, c, hint))
    }

    /// The CPUs of the pod's live containers that hold exclusive slices: what
    /// [`Node::placement`] marks `exclusive`, without building the placement.
    pub fn exclusive_cpus(&self, pod_uid: &str) -> CpuSet {
        let Some(record) = self.pods.get(pod_uid) else {
            return CpuSet::new();
        };
        containers(&record.spec)
            .filter(|c| record.live.contains(&c.name))
            .filter(|c| self.cpu.isolation(&record.spec, c) == IsolationLevel::Container)
            .filter_map(|c| self.cpu.container_cpus(pod_uid, &c.name))
            .fold(CpuSet::new(), |acc, cpus| acc.union(&cpus))
    }

    /// The pod-level CPU bubble (PLRM pod scope), if the pod has one. Cheaper than
    /// [`Node::placement`] when only the bubble is needed (PodResources).
    pub fn pod_cpus(&self, pod_uid: &str) -> Option<CpuSet> {
        self.cpu.pod_cpus(pod_uid)
    }

    /// The node shared pool (kubelet's default CPU set).
    pub fn shared_cpus(&self) -> CpuSet {
        self.cpu.shared()
    }

    /// The CPUs a container without a cpuset of its own may run on: the node shared pool, or
    /// every CPU when the CPU Manager pins nothing (policy `none`). For views, not decisions.
    pub fn unpinned_cpus(&self) -> CpuSet {
        if self.config.cpu_policy == super::config::CpuPolicy::None {
            return self.topology.cpus.iter().map(|c| c.id).collect();
        }
        self.cpu.shared()
    }

    /// CPUs marked with [`Node::mark_unavailable`].
    pub fn unavailable_cpus(&self) -> CpuSet {
        self.cpu.unavailable()
    }

    /// The CPU Manager's reserved set: empty with `cpuManagerPolicy: none`, which keeps no
    /// reserved set (the configured list then only matters for node allocatable).
    pub fn reserved_cpus(&self) -> CpuSet {
        self.cpu.reserved()
    }

    /// PodResources `GetAllocatableResources` CPUs: all CPUs minus reserved with the static
    /// policy; empty with policy `none` (kubelet's `nonePolicy.GetAllocatableCPUs`).
    pub fn allocatable_cpus(&self) -> CpuSet {
        if self.config.cpu_policy == super::config::CpuPolicy::None {
            return CpuSet::new();
        }
        self.cpu.allocatable()
    }

    /// Per-NUMA allocatable memory blocks (PodResources `GetAllocatableResources`).
    pub fn allocatable_memory(&self) -> Vec<Block> {
        self.memory.allocatable()
    }

    /// The decision state, for checkpoints and equality checks.
    pub fn snapshot(&self) -> NodeSnapshot {
        NodeSnapshot {
            cpu: self.cpu.state(),
            memory: self.memory.state().clone(),
            pods: self.pods.clone(),
            devices: self.devices.ledger().clone(),
        }
    }

    /// Restores a snapshot taken from a node with the same topology and config, after the
    /// kubelet's state validation of both managers; atomic: on error nothing changes.
    pub fn restore(&mut self, snapshot: NodeSnapshot) -> Result<(), NodeError> {
        let mut cpu = self.cpu.clone();
        let mut memory = self.memory.clone();
        cpu.restore(snapshot.cpu)?;
        memory
            .restore(snapshot.memory)
            .map_err(NodeError::MemoryState)?;
        self.cpu = cpu;
        self.memory = memory;
        self.pods = snapshot.pods;
        self.devices.restore(snapshot.devices);
        Ok(())
    }
}

/// No NUMA preference (policy none, or a container without a stored hint).
const NO_HINT: TopologyHint = TopologyHint {
    affinity: None,
    preferred: false,
};

/// Init containers (regular and sidecar) in spec order, then app containers: kubelet's order.
fn containers(pod: &PodSpec) -> impl Iterator<Item = &ContainerSpec> {
    pod.init_containers.iter().chain(&pod.containers)
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

/// A hint provider's search ran out of its budget: refused, never approximated.
impl Node {
    /// The Topology Manager's merge of the providers' hints (devices, CPU, memory); in tests,
    /// checked against the kubelet's enumeration on small machines.
    fn merge(&self, hints: &[super::HintSets]) -> Result<(TopologyHint, bool), AdmissionError> {
        let merged = self
            .topology_manager
            .merge_sets(hints)
            .map_err(|e| AdmissionError::Unexpected(e.to_string()))?;
        #[cfg(test)]
        self.topology_manager.assert_reference(hints, merged);
        Ok(merged)
    }
}

fn too_wide(_: super::topology_manager::Exhausted) -> AdmissionError {
    AdmissionError::Unexpected(
        "hint provider: the exact NUMA hint search on this machine exceeds the budget of one decision"
            .to_string(),
    )
}

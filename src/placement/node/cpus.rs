//! The CPU side of a `Node`: a thin adapter over the [`CpuManager`] giving `Node` exactly what it
//! needs (hints, allocation, per-container sets, pools, CPUs held by others).

use crate::cpuset::CpuSet;
use crate::placement::config::{Config, CpuPolicy, ReservedCpus};
use crate::placement::cpu::{CpuError, CpuManager, CpuState, CpuUndo};
use crate::placement::qos::IsolationLevel;
use crate::placement::{
    AdmissionError, ContainerSpec, HintProvider, PodSpec, ResourceHints, TopologyHint,
};
use crate::topology::Topology;

use super::NodeError;

/// Pseudo pod UID under which CPUs held by others are recorded (never a Kubernetes UID).
pub(super) const UNAVAILABLE_POD: &str = "numa-shim/unavailable";

#[derive(Debug, Clone)]
pub(super) struct CpuBackend {
    manager: CpuManager,
}

impl CpuBackend {
    pub(super) fn new(topology: &Topology, config: &Config) -> Result<Self, NodeError> {
        let all: CpuSet = topology.cpus.iter().map(|c| c.id).collect();
        if let ReservedCpus::Explicit(set) = &config.reserved_cpus {
            if !set.is_subset(&all) {
                return Err(NodeError::ReservedOutsideMachine {
                    reserved: set.clone(),
                    machine: all,
                });
            }
        }
        let none_reserved = match &config.reserved_cpus {
            ReservedCpus::Explicit(set) => set.is_empty(),
            ReservedCpus::Count { milli } => *milli == 0,
        };
        if config.cpu_policy == CpuPolicy::Static
            && none_reserved
            && !config.accept_no_reserved_cpus
        {
            return Err(NodeError::NoReservedCpus);
        }
        let manager = CpuManager::new(topology, config).map_err(|e| cpu_error(e, config))?;
        Ok(Self { manager })
    }

    /// Records `cpus` as an exclusive assignment of a pseudo pod, so they leave the shared pool
    /// and are never granted. Reserved CPUs cannot be marked.
    pub(super) fn mark_unavailable(&mut self, cpus: &CpuSet) -> Result<(), NodeError> {
        if !self.manager.is_static() {
            // The none policy grants nothing and keeps no pool to take CPUs out of.
            let all = self.manager.topology().details().cpus();
            if !cpus.is_subset(&all) {
                return Err(NodeError::UnavailableNotFree {
                    cpus: cpus.clone(),
                    free: all,
                });
            }
            return Ok(());
        }
        let free = self.manager.available();
        if !cpus.is_subset(&free) {
            return Err(NodeError::UnavailableNotFree {
                cpus: cpus.clone(),
                free,
            });
        }
        self.manager.hold(UNAVAILABLE_POD, cpus);
        Ok(())
    }

    /// Gives CPUs marked with `mark_unavailable` back to the shared pool (their holder is gone).
    /// CPUs that were not marked are ignored.
    pub(super) fn release_unavailable(&mut self, cpus: &CpuSet) {
        self.manager.release_held(UNAVAILABLE_POD, cpus);
    }

    pub(super) fn adopt_pod(
        &mut self,
        pod: &PodSpec,
        exclusive: &std::collections::BTreeMap<String, CpuSet>,
        budget: &CpuSet,
        pod_level: bool,
        prefer: Option<crate::placement::NumaMask>,
    ) -> Result<(), crate::placement::cpu::AdoptCpuError> {
        self.manager
            .adopt_pod(pod, exclusive, budget, pod_level, prefer)
    }

    pub(super) fn container_cpus(&self, pod_uid: &str, name: &str) -> Option<CpuSet> {
        self.manager.container_cpus(pod_uid, name).map(|(c, _)| c)
    }

    pub(super) fn isolation(&self, pod: &PodSpec, c: &ContainerSpec) -> IsolationLevel {
        self.manager.isolation_level(pod, c)
    }

    pub(super) fn pod_cpus(&self, pod_uid: &str) -> Option<CpuSet> {
        self.manager.pod_cpus(pod_uid).cloned()
    }

    pub(super) fn shared(&self) -> CpuSet {
        self.manager.shared_pool().clone()
    }

    pub(super) fn reserved(&self) -> CpuSet {
        self.manager.reserved().clone()
    }

    pub(super) fn allocatable(&self) -> CpuSet {
        self.manager.allocatable()
    }

    /// CPUs marked unavailable at start.
    pub(super) fn unavailable(&self) -> CpuSet {
        self.container_cpus(UNAVAILABLE_POD, UNAVAILABLE_POD)
            .unwrap_or_default()
    }

    pub(super) fn holds_pod(&self, pod_uid: &str) -> bool {
        self.manager.holds_pod(pod_uid)
    }

    pub(super) fn undo_point(&self) -> CpuUndo {
        self.manager.undo_point()
    }

    pub(super) fn undo_pod(&mut self, pod_uid: &str, undo: CpuUndo) {
        self.manager.undo_pod(pod_uid, undo);
    }

    /// The manager itself, for in-place resize (`node::resize`).
    pub(super) fn manager(&self) -> &CpuManager {
        &self.manager
    }

    pub(super) fn manager_mut(&mut self) -> &mut CpuManager {
        &mut self.manager
    }

    pub(super) fn state(&self) -> CpuState {
        self.manager.snapshot()
    }

    pub(super) fn restore(&mut self, state: CpuState) -> Result<(), NodeError> {
        self.manager.restore(state).map_err(state_error)
    }
}

impl HintProvider for CpuBackend {
    fn container_hints(&self, pod: &PodSpec, container: &ContainerSpec) -> ResourceHints {
        self.manager.container_hints(pod, container)
    }
    fn pod_hints(&self, pod: &PodSpec) -> ResourceHints {
        self.manager.pod_hints(pod)
    }
    fn container_hint_sets(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<crate::placement::HintSets, crate::placement::topology_manager::Exhausted> {
        Ok(self.manager.container_hint_sets(pod, container))
    }
    fn pod_hint_sets(
        &self,
        pod: &PodSpec,
    ) -> Result<crate::placement::HintSets, crate::placement::topology_manager::Exhausted> {
        Ok(self.manager.pod_hint_sets(pod))
    }
    fn allocate(
        &mut self,
        pod: &PodSpec,
        container: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        self.manager.allocate(pod, container, hint)
    }
    fn allocate_pod(&mut self, pod: &PodSpec, hint: &TopologyHint) -> Result<(), AdmissionError> {
        self.manager.allocate_pod(pod, hint)
    }
    fn remove_container(&mut self, pod_uid: &str, container: &str) {
        self.manager.remove_container(pod_uid, container);
    }
}

/// Names the kubelet configuration field a CPU Manager start error comes from.
fn cpu_error(source: CpuError, config: &Config) -> NodeError {
    let field = match &source {
        CpuError::ReserveMismatch { .. } | CpuError::UnknownReservedCpu { .. } => {
            match config.reserved_cpus {
                ReservedCpus::Explicit(_) => "reservedSystemCPUs",
                ReservedCpus::Count { .. } => "kubeReserved.cpu + systemReserved.cpu",
            }
        }
        CpuError::IncompatibleOptions(..) | CpuError::AlignBySocketHardware => {
            "cpuManagerPolicyOptions"
        }
        CpuError::AlignBySocketSingleNuma => "topologyManagerPolicy",
        _ => "cpuManagerPolicy",
    };
    NodeError::Cpu { field, source }
}

fn state_error(source: CpuError) -> NodeError {
    NodeError::Cpu {
        field: "cpu_manager_state",
        source,
    }
}

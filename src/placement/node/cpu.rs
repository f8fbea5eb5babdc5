//! The CPU side of a `Node`: a thin adapter over the CPU Manager giving `Node` exactly what it
//! needs (hints, allocation, per-container sets, pools). Placeholder until the static CPU Manager
//! lands: behaves like `cpuManagerPolicy: none` (every container on the shared pool).

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::placement::config::{Config, ReservedCpus};
use crate::placement::{
    AdmissionError, ContainerSpec, HintProvider, PodSpec, ResourceHints, TopologyHint,
};
use crate::topology::Topology;

use super::NodeError;

/// Checkpointable CPU state.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct CpuState {
    default_set: CpuSet,
    assignments: BTreeMap<String, BTreeMap<String, CpuSet>>,
    pod_sets: BTreeMap<String, CpuSet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CpuBackend {
    all: CpuSet,
    reserved: CpuSet,
    state: CpuState,
}

impl CpuBackend {
    pub(super) fn new(topology: &Topology, config: &Config) -> Result<Self, NodeError> {
        let all: CpuSet = topology.cpus.iter().map(|c| c.id).collect();
        let reserved = match &config.reserved_cpus {
            ReservedCpus::Explicit(set) => {
                if !set.is_subset(&all) {
                    return Err(NodeError::ReservedOutsideMachine {
                        reserved: set.clone(),
                        machine: all,
                    });
                }
                set.clone()
            }
            ReservedCpus::Count { .. } => CpuSet::new(),
        };
        Ok(Self {
            state: CpuState {
                default_set: all.clone(),
                ..CpuState::default()
            },
            all,
            reserved,
        })
    }

    pub(super) fn mark_unavailable(&mut self, cpus: &CpuSet) -> Result<(), NodeError> {
        if !cpus.is_subset(&self.all) {
            return Err(NodeError::UnavailableOutsideMachine {
                cpus: cpus.clone(),
                machine: self.all.clone(),
            });
        }
        self.state.default_set = self.state.default_set.difference(cpus);
        Ok(())
    }

    pub(super) fn container_cpus(&self, pod_uid: &str, name: &str) -> Option<CpuSet> {
        self.state.assignments.get(pod_uid)?.get(name).cloned()
    }

    pub(super) fn pod_cpus(&self, pod_uid: &str) -> Option<CpuSet> {
        self.state.pod_sets.get(pod_uid).cloned()
    }

    pub(super) fn shared(&self) -> CpuSet {
        self.state.default_set.clone()
    }

    pub(super) fn reserved(&self) -> CpuSet {
        self.reserved.clone()
    }

    pub(super) fn allocatable(&self) -> CpuSet {
        self.all.difference(&self.reserved)
    }

    pub(super) fn state(&self) -> CpuState {
        self.state.clone()
    }

    pub(super) fn restore(&mut self, state: CpuState) -> Result<(), NodeError> {
        self.state = state;
        Ok(())
    }
}

impl HintProvider for CpuBackend {
    fn container_hints(&self, _pod: &PodSpec, _container: &ContainerSpec) -> ResourceHints {
        ResourceHints::new()
    }
    fn pod_hints(&self, _pod: &PodSpec) -> ResourceHints {
        ResourceHints::new()
    }
    fn allocate(
        &mut self,
        _pod: &PodSpec,
        _container: &ContainerSpec,
        _hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        Ok(())
    }
    fn allocate_pod(&mut self, _pod: &PodSpec, _hint: &TopologyHint) -> Result<(), AdmissionError> {
        Ok(())
    }
    fn remove_container(&mut self, _pod_uid: &str, _container: &str) {}
}

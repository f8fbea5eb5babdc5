//! A pod put back into the node exactly where it runs (start-up recovery without a usable
//! checkpoint): CPUs as found (`CpuManager::adopt_pod`), memory allocated the kubelet's way on
//! the NUMA nodes its containers are pinned to. Afterwards the pod is like any admitted pod:
//! placement queries, pools, PodResources and release by the kubelet's rules all see it whole.

use std::collections::BTreeMap;

use super::{containers, AdmittedPod, Node, NodeSnapshot, StoredHint};
use crate::cpuset::CpuSet;
use crate::placement::config::{TopologyPolicy, TopologyScope};
use crate::placement::cpu::AdoptCpuError;
use crate::placement::memory::block_nodes;
use crate::placement::{qos, AdmissionError, HintProvider, NumaMask, PodSpec, TopologyHint};

/// Where a running pod was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Exclusive slices by container name, exactly as they run.
    pub exclusive: BTreeMap<String, CpuSet>,
    /// CPUs known to be in the pod's CPU budget besides the slices (where its pod-pool
    /// containers run); empty when unknown or without a budget.
    pub budget: CpuSet,
    /// The NUMA nodes each container's memory is pinned to (`cpuset.mems`), when known.
    pub memory_nodes: BTreeMap<String, NumaMask>,
}

/// Why a pod cannot be put back where it runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptError {
    #[error("pod {0} is already admitted")]
    AlreadyAdmitted(String),
    #[error("cpus: {0}")]
    Cpu(#[from] AdoptCpuError),
    #[error("memory: {0}")]
    Memory(AdmissionError),
}

impl Node {
    /// Records `pod` where `found` says it runs; all-or-nothing.
    pub fn adopt(&mut self, pod: &PodSpec, found: &Found) -> Result<(), AdoptError> {
        if self.pods.contains_key(&pod.uid) {
            return Err(AdoptError::AlreadyAdmitted(pod.uid.clone()));
        }
        let saved = (self.cpu.clone(), self.memory.clone());
        match self.adopt_inner(pod, found) {
            Ok(hints) => {
                let live = containers(pod).map(|c| c.name.clone()).collect();
                let record = AdmittedPod {
                    spec: pod.clone(),
                    hints,
                    live,
                    // Which containers started is not known here (a pod may be found mid-init):
                    // none is marked, so its regular init containers' memory stays held until
                    // a container of it starts again (never given out twice).
                    started: Vec::new(),
                    promised: Default::default(),
                };
                self.pods.insert(pod.uid.clone(), record);
                tracing::debug!(pod = %pod.uid, "adopted");
                Ok(())
            }
            Err(err) => {
                (self.cpu, self.memory) = saved;
                Err(err)
            }
        }
    }

    fn adopt_inner(
        &mut self,
        pod: &PodSpec,
        found: &Found,
    ) -> Result<BTreeMap<String, StoredHint>, AdoptError> {
        let managed = self.config.topology_policy != TopologyPolicy::None;
        let pod_level = managed
            && self.config.topology_scope == TopologyScope::Pod
            && qos::pod_level_managed(pod, &self.config.gates);
        let memory_mask = found
            .memory_nodes
            .values()
            .fold(NumaMask::default(), |acc, m| acc.or(*m));
        let prefer = (!memory_mask.is_empty()).then_some(memory_mask);
        self.cpu
            .adopt_pod(pod, &found.exclusive, &found.budget, pod_level, prefer)?;
        let pod_cpus = self.cpu.pod_cpus(&pod.uid).unwrap_or_default();
        let pod_mask = prefer.or_else(|| self.mask_of(&pod_cpus));
        let mut hints = BTreeMap::new();
        if pod_level {
            let hint = preferred(pod_mask);
            self.memory
                .allocate_pod(pod, &hint)
                .map_err(AdoptError::Memory)?;
            if managed {
                for c in containers(pod) {
                    hints.insert(c.name.clone(), hint.into());
                }
            }
            return Ok(hints);
        }
        for c in containers(pod) {
            let own = found.memory_nodes.get(&c.name).copied().or_else(|| {
                let cpus = self.cpu.container_cpus(&pod.uid, &c.name)?;
                self.mask_of(&cpus)
            });
            let hint = preferred(own.or(pod_mask));
            self.memory
                .allocate(pod, c, &hint)
                .map_err(AdoptError::Memory)?;
            if managed {
                hints.insert(c.name.clone(), hint.into());
            }
        }
        Ok(hints)
    }

    /// The NUMA nodes of `cpus`, `None` for no CPUs.
    fn mask_of(&self, cpus: &CpuSet) -> Option<NumaMask> {
        let mask = NumaMask::from_ids(
            cpus.iter()
                .filter_map(|id| self.topology.cpu(id).map(|c| c.numa)),
        );
        (!mask.is_empty()).then_some(mask)
    }
}

fn preferred(affinity: Option<NumaMask>) -> TopologyHint {
    TopologyHint {
        affinity,
        preferred: true,
    }
}

impl NodeSnapshot {
    /// The pods this snapshot admitted, each with where the snapshot says it runs: what
    /// recovery re-adopts pod by pod when the snapshot as a whole cannot be restored.
    pub fn admitted(&self) -> Vec<(PodSpec, Found)> {
        self.pods
            .iter()
            .map(|(uid, pod)| (pod.spec.clone(), self.found(uid)))
            .collect()
    }

    fn found(&self, uid: &str) -> Found {
        let exclusive = self
            .cpu
            .entries
            .get(uid)
            .into_iter()
            .flatten()
            .filter(|(_, a)| a.isolation == qos::IsolationLevel::Container)
            .map(|(name, a)| (name.clone(), a.cpus.clone()))
            .collect();
        let budget = self.cpu.pod_entries.get(uid).cloned().unwrap_or_default();
        let mut memory_nodes: BTreeMap<String, NumaMask> = self
            .memory
            .containers
            .get(uid)
            .into_iter()
            .flatten()
            .map(|(name, blocks)| (name.clone(), block_nodes(blocks)))
            .filter(|(_, m)| !m.is_empty())
            .collect();
        if let Some(blocks) = self.memory.pods.get(uid) {
            let pod_mask = block_nodes(blocks);
            if !pod_mask.is_empty() {
                if let Some(pod) = self.pods.get(uid) {
                    for c in containers(&pod.spec) {
                        memory_nodes.entry(c.name.clone()).or_insert(pod_mask);
                    }
                }
            }
        }
        Found {
            exclusive,
            budget,
            memory_nodes,
        }
    }
}

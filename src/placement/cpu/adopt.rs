//! Putting a running pod back into the CPU state exactly where it runs (start-up recovery
//! without a usable checkpoint): its exclusive slices stay where they are, its bubble is the
//! CPUs found in it (completed from free CPUs near them if part of it was not found), and the
//! rest is partitioned by the kubelet's rules. Never moves a CPU that was found, never takes one
//! that is not free.

use std::collections::BTreeMap;

use super::manager::CpuManager;
use super::state::ContainerAssignment;
use super::CpuError;
use crate::cpuset::CpuSet;
use crate::placement::hint::NumaMask;
use crate::placement::pod::{ContainerRole, PodSpec};
use crate::placement::qos::IsolationLevel;

/// Why a pod cannot be put back where it runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptCpuError {
    #[error("container {0} runs on exclusive cpus but the pod's spec has no such container")]
    UnknownContainer(String),
    #[error(
        "container {container} runs on exclusive cpus {found}, but its spec gives it {wanted}"
    )]
    SliceMismatch {
        container: String,
        found: CpuSet,
        wanted: usize,
    },
    #[error("cpus {cpus} are not free (free: {free})")]
    NotFree { cpus: CpuSet, free: CpuSet },
    #[error("the pod runs on {found} cpus, more than its budget of {wanted}")]
    BudgetTooLarge { found: usize, wanted: usize },
    #[error("{0}")]
    Cpu(#[from] CpuError),
}

impl CpuManager {
    /// Records `pod` with the exclusive slices `exclusive` (container name → CPUs) and, for a
    /// pod allocated at pod level (`pod_level`), a bubble holding `budget` and the slices.
    /// Containers the spec gives exclusive CPUs that were not found (not created yet) get them
    /// the kubelet's way, preferring the NUMA nodes in `prefer`. All-or-nothing.
    pub fn adopt_pod(
        &mut self,
        pod: &PodSpec,
        exclusive: &BTreeMap<String, CpuSet>,
        budget: &CpuSet,
        pod_level: bool,
        prefer: Option<NumaMask>,
    ) -> Result<(), AdoptCpuError> {
        if !self.static_policy {
            return Ok(());
        }
        let free = self.available();
        let mut found = CpuSet::new();
        for (name, cpus) in exclusive {
            let c = pod
                .init_containers
                .iter()
                .chain(&pod.containers)
                .find(|c| &c.name == name)
                .ok_or_else(|| AdoptCpuError::UnknownContainer(name.clone()))?;
            let wanted = if self.skipped_for_gates(pod) {
                0
            } else {
                self.guaranteed_cpus(pod, c)
            };
            if wanted != cpus.len() {
                return Err(AdoptCpuError::SliceMismatch {
                    container: name.clone(),
                    found: cpus.clone(),
                    wanted,
                });
            }
            if !cpus.is_subset(&free) || !cpus.is_disjoint(&found) {
                return Err(AdoptCpuError::NotFree {
                    cpus: cpus.clone(),
                    free: free.difference(&found),
                });
            }
            found = found.union(cpus);
        }
        let restored: BTreeMap<String, ContainerAssignment> = exclusive
            .iter()
            .map(|(name, cpus)| {
                let a = ContainerAssignment {
                    cpus: cpus.clone(),
                    isolation: IsolationLevel::Container,
                };
                (name.clone(), a)
            })
            .collect();
        let total = self.pod_guaranteed_cpus(pod);
        if pod_level && total > 0 {
            return self.adopt_bubble(pod, &restored, budget.union(&found), total, prefer);
        }
        let mut entries = restored;
        let mut taken = found;
        for c in pod.init_containers.iter().chain(&pod.containers) {
            let n = self.guaranteed_cpus(pod, c);
            // Regular init containers have run already: they get nothing new.
            if n == 0 || entries.contains_key(&c.name) || c.role == ContainerRole::Init {
                continue;
            }
            let cpus = self.take_near(&free.difference(&taken), n, prefer)?;
            taken = taken.union(&cpus);
            let a = ContainerAssignment {
                cpus,
                isolation: IsolationLevel::Container,
            };
            entries.insert(c.name.clone(), a);
        }
        if !entries.is_empty() {
            self.state.default_cpu_set = self.state.default_cpu_set.difference(&taken);
            self.state.entries.insert(pod.uid.clone(), entries);
        }
        Ok(())
    }

    fn adopt_bubble(
        &mut self,
        pod: &PodSpec,
        restored: &BTreeMap<String, ContainerAssignment>,
        known: CpuSet,
        total: usize,
        prefer: Option<NumaMask>,
    ) -> Result<(), AdoptCpuError> {
        let free = self.available();
        if !known.is_subset(&free) {
            return Err(AdoptCpuError::NotFree {
                cpus: known.difference(&free),
                free,
            });
        }
        if known.len() > total {
            return Err(AdoptCpuError::BudgetTooLarge {
                found: known.len(),
                wanted: total,
            });
        }
        let near = prefer.or_else(|| (!known.is_empty()).then(|| self.numa_of(&known)));
        let extra = self.take_near(&free.difference(&known), total - known.len(), near)?;
        let bubble = known.union(&extra);
        let assignments = self.partition(pod, &bubble, restored)?;
        self.state.default_cpu_set = self.state.default_cpu_set.difference(&bubble);
        self.state.pod_entries.insert(pod.uid.clone(), bubble);
        self.state.entries.insert(pod.uid.clone(), assignments);
        Ok(())
    }

    /// `n` CPUs of `from`, those on the NUMA nodes of `prefer` first.
    fn take_near(
        &self,
        from: &CpuSet,
        n: usize,
        prefer: Option<NumaMask>,
    ) -> Result<CpuSet, CpuError> {
        if n == 0 {
            return Ok(CpuSet::new());
        }
        let mut taken = CpuSet::new();
        if let Some(mask) = prefer {
            let numas: Vec<u32> = mask.ids().collect();
            let near = from.intersection(&self.topo.details().cpus_in_numa_nodes(&numas));
            taken = self.take_by_topology(&near, n.min(near.len()))?;
        }
        let rest = self.take_by_topology(&from.difference(&taken), n - taken.len())?;
        Ok(taken.union(&rest))
    }

    /// The NUMA nodes of `cpus`.
    pub fn numa_of(&self, cpus: &CpuSet) -> NumaMask {
        let details = self.topo.details();
        NumaMask::from_ids(
            cpus.iter()
                .filter_map(|id| details.info(id).map(|c| c.numa)),
        )
    }
}

//! Pod-level CPU allocation (Pod-Level Resource Managers, topology scope `pod`): the pod total
//! (`podGuaranteedCPUs`), the empty-shared-pool validation (`validatePodScopeResources`) and
//! `AllocatePod` — one bubble per pod, partitioned into exclusive slices and the pod shared pool.

use std::collections::BTreeMap;

use tracing::debug;

use super::manager::CpuManager;
use super::state::ContainerAssignment;
use crate::cpuset::CpuSet;
use crate::placement::pod::{ContainerRole, PodSpec};
use crate::placement::qos::{self, IsolationLevel, PodQos};
use crate::placement::{AdmissionError, TopologyHint};

impl CpuManager {
    /// `podGuaranteedCPUs`: the pod-level integral CPU request with PLRM and `spec.resources`,
    /// else max(largest regular init + sidecars before it, apps + all sidecars).
    pub fn pod_guaranteed_cpus(&self, pod: &PodSpec) -> usize {
        if self.gates.pod_level_resource_managers && qos::is_pod_level_resources_set(pod) {
            if qos::pod_qos(pod, &self.gates) != PodQos::Guaranteed {
                return 0;
            }
            return match pod.resources.as_ref().and_then(|r| r.requests.cpu_milli) {
                Some(m) if m % 1000 == 0 => (m / 1000) as usize,
                _ => 0,
            };
        }
        let mut by_init = 0;
        let mut by_sidecars = 0;
        for c in &pod.init_containers {
            if c.resources.requests.cpu_milli.is_none() {
                continue;
            }
            let n = self.guaranteed_cpus(pod, c);
            if c.role == ContainerRole::Sidecar {
                by_sidecars += n;
            } else if by_sidecars + n > by_init {
                by_init = by_sidecars + n;
            }
        }
        let by_apps: usize = pod
            .containers
            .iter()
            .filter(|c| c.resources.requests.cpu_milli.is_some())
            .map(|c| self.guaranteed_cpus(pod, c))
            .sum();
        by_init.max(by_apps + by_sidecars)
    }

    /// `validatePodScopeResources`: the pod shared pool must not be empty when a container needs it.
    pub fn validate_pod_scope_resources(&self, pod: &PodSpec) -> Result<(), AdmissionError> {
        let total = self.pod_guaranteed_cpus(pod);
        let reject = |message: String| Err(AdmissionError::EmptyPodSharedPool { message });
        let mut shared_long_running = false;
        let mut exclusive = 0;
        for c in &pod.init_containers {
            let n = self.guaranteed_cpus(pod, c);
            if c.role != ContainerRole::Sidecar {
                if n > 0 {
                    let pool = total as isize - exclusive as isize;
                    if n as isize > pool {
                        return reject(format!("pod rejected, largest exclusive init container requests {n} cpus, but only {pool} available"));
                    }
                } else if exclusive >= total {
                    return reject("pod rejected, pod has shared init containers but no cpus available for them".to_string());
                }
                continue;
            }
            if n == 0 {
                shared_long_running = true;
                continue;
            }
            exclusive += n;
        }
        for c in &pod.containers {
            let n = self.guaranteed_cpus(pod, c);
            if n == 0 {
                shared_long_running = true;
                continue;
            }
            exclusive += n;
        }
        if shared_long_running && exclusive >= total {
            return reject("pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers".to_string());
        }
        Ok(())
    }

    /// kubelet's `AllocatePod`. All-or-nothing here (kubelet could leave a bubble behind if a
    /// partition step failed; it cannot fail after validation). A pod that already has a bubble
    /// (restored state) is left as it is: nothing is re-allocated.
    pub(crate) fn allocate_whole_pod(
        &mut self,
        pod: &PodSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        if !self.static_policy {
            return Ok(());
        }
        let total = self.pod_guaranteed_cpus(pod);
        if total == 0 || self.state.pod_entries.contains_key(&pod.uid) {
            return Ok(());
        }
        self.validate_pod_scope_resources(pod)?;
        self.enforce_smt_alignment(total)?;
        let unexpected = |e: super::CpuError| AdmissionError::Unexpected(e.to_string());
        let saved_default = self.state.default_cpu_set.clone();
        let bubble = self
            .allocate_cpus(total, hint.affinity, &CpuSet::new())
            .map_err(unexpected)?;
        match self.partition(pod, &bubble) {
            Ok(assignments) => {
                debug!(pod = %pod.uid, cpus = %bubble, "allocated pod cpus");
                self.state.pod_entries.insert(pod.uid.clone(), bubble);
                self.state.entries.insert(pod.uid.clone(), assignments);
                Ok(())
            }
            Err(e) => {
                self.state.default_cpu_set = saved_default;
                Err(unexpected(e))
            }
        }
    }

    /// Step 5 of `AllocatePod`: exclusive slices and the pod shared pool, for every container.
    fn partition(
        &self,
        pod: &PodSpec,
        bubble: &CpuSet,
    ) -> Result<BTreeMap<String, ContainerAssignment>, super::CpuError> {
        let exclusive = |cpus| ContainerAssignment {
            cpus,
            isolation: IsolationLevel::Container,
        };
        let mut out = BTreeMap::new();
        let mut sidecars = CpuSet::new();
        for c in &pod.init_containers {
            let n = self.guaranteed_cpus(pod, c);
            if n > 0 {
                let cpus = self.take_by_topology(&bubble.difference(&sidecars), n)?;
                if c.role == ContainerRole::Sidecar {
                    sidecars = sidecars.union(&cpus);
                }
                out.insert(c.name.clone(), exclusive(cpus));
            } else if c.role != ContainerRole::Sidecar {
                let pool = ContainerAssignment {
                    cpus: bubble.difference(&sidecars),
                    isolation: IsolationLevel::Pod,
                };
                out.insert(c.name.clone(), pool);
            }
        }
        let mut pool = bubble.difference(&sidecars);
        for c in &pod.containers {
            let n = self.guaranteed_cpus(pod, c);
            if n > 0 {
                let cpus = self.take_by_topology(&pool, n)?;
                pool = pool.difference(&cpus);
                out.insert(c.name.clone(), exclusive(cpus));
            }
        }
        for c in pod.init_containers.iter().chain(&pod.containers) {
            out.entry(c.name.clone())
                .or_insert_with(|| ContainerAssignment {
                    cpus: pool.clone(),
                    isolation: IsolationLevel::Pod,
                });
        }
        Ok(out)
    }
}

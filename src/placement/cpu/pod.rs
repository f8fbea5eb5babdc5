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

    /// kubelet's `AllocatePod`, with the restore path of kubernetes#141041: a pod whose bubble is
    /// already in the state keeps it and every recorded assignment; only missing assignments
    /// (a spec-order prefix is recorded) are carved out of it. A stale bubble (overlapping the
    /// shared pool, or with assignments that are not a prefix) is dropped and the pod allocated
    /// from scratch. All-or-nothing: a failure leaves the pod holding nothing.
    pub(crate) fn allocate_whole_pod(
        &mut self,
        pod: &PodSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        if !self.static_policy {
            return Ok(());
        }
        let total = self.pod_guaranteed_cpus(pod);
        if total == 0 {
            return Ok(());
        }
        let unexpected = |e: super::CpuError| AdmissionError::Unexpected(e.to_string());
        match self.restorable_bubble(pod) {
            Restore::Held(bubble) => {
                let restored = self
                    .state
                    .entries
                    .get(&pod.uid)
                    .cloned()
                    .unwrap_or_default();
                return match self.partition(pod, &bubble, &restored) {
                    Ok(assignments) => {
                        self.state.entries.insert(pod.uid.clone(), assignments);
                        Ok(())
                    }
                    Err(e) => {
                        self.release_pod(&pod.uid, true);
                        Err(unexpected(e))
                    }
                };
            }
            Restore::Stale { release } => self.release_pod(&pod.uid, release),
            Restore::None => {}
        }
        self.validate_pod_scope_resources(pod)?;
        self.enforce_smt_alignment(total)?;
        let saved_default = self.state.default_cpu_set.clone();
        let bubble = self
            .allocate_cpus(total, hint.affinity, &CpuSet::new())
            .map_err(unexpected)?;
        match self.partition(pod, &bubble, &BTreeMap::new()) {
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

    /// What the state already holds for this pod's bubble.
    pub(crate) fn restorable_bubble(&self, pod: &PodSpec) -> Restore {
        let Some(bubble) = self.state.pod_entries.get(&pod.uid) else {
            return Restore::None;
        };
        if !bubble.is_disjoint(&self.state.default_cpu_set) {
            return Restore::Stale { release: false };
        }
        let recorded = self.state.entries.get(&pod.uid);
        let names: Vec<&str> = pod
            .init_containers
            .iter()
            .chain(&pod.containers)
            .map(|c| c.name.as_str())
            .collect();
        let has = |name: &str| recorded.is_some_and(|r| r.contains_key(name));
        let prefix = names.iter().take_while(|n| has(n)).count();
        let known = recorded.map_or(0, |r| r.len());
        if prefix != known {
            return Restore::Stale { release: true };
        }
        Restore::Held(bubble.clone())
    }

    /// Drops the pod's bubble and assignments; `release` returns the bubble to the shared pool.
    fn release_pod(&mut self, pod_uid: &str, release: bool) {
        if let Some(bubble) = self.state.pod_entries.remove(pod_uid) {
            if release {
                self.state.default_cpu_set = self.state.default_cpu_set.union(&bubble);
            }
        }
        self.state.entries.remove(pod_uid);
    }

    /// Step 5 of `AllocatePod`: exclusive slices and the pod shared pool, for every container;
    /// `restored` assignments are kept as they are and take part in the accounting.
    pub(super) fn partition(
        &self,
        pod: &PodSpec,
        bubble: &CpuSet,
        restored: &BTreeMap<String, ContainerAssignment>,
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
                let a = match restored.get(&c.name) {
                    Some(a) => a.clone(),
                    None => exclusive(self.take_by_topology(&bubble.difference(&sidecars), n)?),
                };
                if c.role == ContainerRole::Sidecar {
                    sidecars = sidecars.union(&a.cpus);
                }
                out.insert(c.name.clone(), a);
            } else if c.role != ContainerRole::Sidecar {
                let a = restored
                    .get(&c.name)
                    .cloned()
                    .unwrap_or(ContainerAssignment {
                        cpus: bubble.difference(&sidecars),
                        isolation: IsolationLevel::Pod,
                    });
                out.insert(c.name.clone(), a);
            }
        }
        let mut pool = bubble.difference(&sidecars);
        for c in &pod.containers {
            let n = self.guaranteed_cpus(pod, c);
            if n > 0 {
                let a = match restored.get(&c.name) {
                    Some(a) => a.clone(),
                    None => exclusive(self.take_by_topology(&pool, n)?),
                };
                pool = pool.difference(&a.cpus);
                out.insert(c.name.clone(), a);
            }
        }
        for c in pod.init_containers.iter().chain(&pod.containers) {
            let a = restored
                .get(&c.name)
                .cloned()
                .unwrap_or(ContainerAssignment {
                    cpus: pool.clone(),
                    isolation: IsolationLevel::Pod,
                });
            out.entry(c.name.clone()).or_insert(a);
        }
        Ok(out)
    }
}

/// The state's view of a pod bubble at (re-)admission.
pub(crate) enum Restore {
    /// No bubble recorded.
    None,
    /// A consistent bubble to keep.
    Held(CpuSet),
    /// Leftovers to drop; `release` = its CPUs are not yet back in the shared pool.
    Stale { release: bool },
}

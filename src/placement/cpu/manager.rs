//! [`CpuManager`]: the static policy state machine (kubelet's `staticPolicy` + the state it
//! keeps): construction, per-container `Allocate`, `RemoveContainer`, the queries the shell needs,
//! snapshot and restore. Hints live in `hints`, pod-level allocation in `pod`.

use std::collections::BTreeMap;

use tracing::debug;

use super::details::CpuTopology;
use super::reserved::reserve_cpus;
use super::state::{ContainerAssignment, CpuState};
use super::{take_by_topology, validate_options, CpuError};
use crate::cpuset::CpuSet;
use crate::placement::config::{Config, CpuPolicy, CpuPolicyOptions, FeatureGates};
use crate::placement::hint::NumaMask;
use crate::placement::pod::{ContainerRole, ContainerSpec, PodSpec};
use crate::placement::qos::{self, IsolationLevel, PodQos};
use crate::placement::{AdmissionError, HintProvider, ResourceHints, TopologyHint};
use crate::topology::Topology;

/// Saved by [`CpuManager::undo_point`] before an admission.
#[derive(Debug, Clone, Default)]
pub struct CpuUndo {
    cpus_to_reuse: BTreeMap<String, CpuSet>,
}

/// The CPU manager with the `static` policy (or inert with policy `none`).
#[derive(Debug, Clone)]
pub struct CpuManager {
    pub(crate) topo: CpuTopology,
    pub(crate) static_policy: bool,
    pub(crate) options: CpuPolicyOptions,
    pub(crate) gates: FeatureGates,
    pub(crate) reserved: CpuSet,
    pub(crate) reserved_physical: CpuSet,
    pub(crate) state: CpuState,
    /// kubelet's `cpusToReuse` (one pod at a time); not checkpointed, as in kubelet.
    pub(crate) cpus_to_reuse: BTreeMap<String, CpuSet>,
}

impl CpuManager {
    /// A manager for `topology` with counters derived from it.
    pub fn new(topology: &Topology, config: &Config) -> Result<Self, CpuError> {
        let topo = CpuTopology::new(topology)
            .with_kubelet_free_test(config.reproduce_kubelet_double_grants);
        Self::with_topology(topo, config)
    }

    /// A manager over an explicit [`CpuTopology`] (e.g. with kubelet fixture header counters).
    pub fn with_topology(topo: CpuTopology, config: &Config) -> Result<Self, CpuError> {
        let static_policy = config.cpu_policy == CpuPolicy::Static;
        let options = config.cpu_options;
        let (reserved, reserved_physical) = if static_policy {
            validate_options(&options, &topo, config.topology_policy)?;
            reserve_cpus(&topo, &options, &config.reserved_cpus)?
        } else {
            (CpuSet::new(), CpuSet::new())
        };
        // The `none` policy never initialises its state: the default set stays empty and
        // containers get no cpuset (kubelet `nonePolicy.Start`, `GetCPUAffinity`).
        let mut default = if static_policy {
            topo.details().cpus()
        } else {
            CpuSet::new()
        };
        if static_policy && options.strict_cpu_reservation {
            default = default.difference(&reserved);
        }
        Ok(Self {
            topo,
            static_policy,
            options,
            gates: config.gates,
            reserved,
            reserved_physical,
            state: CpuState {
                default_cpu_set: default,
                ..CpuState::default()
            },
            cpus_to_reuse: BTreeMap::new(),
        })
    }

    pub fn topology(&self) -> &CpuTopology {
        &self.topo
    }

    /// Whether the policy is `static` (else `none`: nothing is pinned or granted).
    pub fn is_static(&self) -> bool {
        self.static_policy
    }

    /// CPUs never handed out exclusively.
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// All CPUs minus reserved (`GetAllocatableCPUs`).
    pub fn allocatable(&self) -> CpuSet {
        self.topo.details().cpus().difference(&self.reserved)
    }

    /// Default set minus reserved: what exclusive grants come from (`GetAvailableCPUs`).
    pub fn available(&self) -> CpuSet {
        self.state.default_cpu_set.difference(&self.reserved)
    }

    /// Takes `cpus` out of the shared pool as an exclusive assignment of the pseudo pod
    /// `holder` (CPUs held by others), so they are never granted. The caller checks that they
    /// are [`available`](Self::available).
    pub fn hold(&mut self, holder: &str, cpus: &CpuSet) {
        self.state.default_cpu_set = self.state.default_cpu_set.difference(cpus);
        let held = self
            .state
            .entries
            .entry(holder.to_string())
            .or_default()
            .entry(holder.to_string())
            .or_insert_with(|| ContainerAssignment {
                cpus: CpuSet::new(),
                isolation: IsolationLevel::Container,
            });
        held.cpus = held.cpus.union(cpus);
    }

    /// Gives the CPUs of `cpus` that `holder` holds back to the shared pool.
    pub fn release_held(&mut self, holder: &str, cpus: &CpuSet) {
        let Some(held) = self
            .state
            .entries
            .get_mut(holder)
            .and_then(|pod| pod.get_mut(holder))
        else {
            return;
        };
        let back = held.cpus.intersection(cpus);
        held.cpus = held.cpus.difference(&back);
        if held.cpus.is_empty() {
            self.state.entries.remove(holder);
        }
        self.state.default_cpu_set = self.state.default_cpu_set.union(&back);
    }

    /// The node shared pool (the state's default set).
    pub fn shared_pool(&self) -> &CpuSet {
        &self.state.default_cpu_set
    }

    /// The recorded cpuset of a container: an exclusive slice (`Container`) or the pod shared
    /// pool (`Pod`); `None` means it runs on the node shared pool.
    pub fn container_cpus(&self, pod_uid: &str, name: &str) -> Option<(CpuSet, IsolationLevel)> {
        let a = self.state.entries.get(pod_uid)?.get(name)?;
        Some((a.cpus.clone(), a.isolation))
    }

    /// `GetCPUSetOrDefault`: what goes into `cpuset_cpus`.
    pub fn cpuset_or_default(&self, pod_uid: &str, name: &str) -> CpuSet {
        self.container_cpus(pod_uid, name)
            .map(|(c, _)| c)
            .unwrap_or_else(|| self.state.default_cpu_set.clone())
    }

    /// The pod bubble, when the pod was allocated at pod level.
    pub fn pod_cpus(&self, pod_uid: &str) -> Option<&CpuSet> {
        self.state.pod_entries.get(pod_uid)
    }

    /// `GetResourceIsolationLevel`.
    pub fn isolation_level(&self, pod: &PodSpec, container: &ContainerSpec) -> IsolationLevel {
        if self.container_cpus(&pod.uid, &container.name).is_none() {
            return IsolationLevel::Host;
        }
        if self.gates.pod_level_resource_managers
            && qos::is_pod_level_resources_set(pod)
            && !qos::qualifies_for_exclusive_cpus(container)
        {
            return IsolationLevel::Pod;
        }
        IsolationLevel::Container
    }

    /// A copy of the state, for checkpoints.
    pub fn snapshot(&self) -> CpuState {
        self.state.clone()
    }

    /// Replaces the state with a checkpointed one after kubelet's `validateState` checks (see
    /// [`CpuState::validate`] for the one deviation). An empty default set with no assignments
    /// keeps the fresh state. Nothing is re-allocated.
    pub fn restore(&mut self, state: CpuState) -> Result<(), CpuError> {
        let mut all = self.topo.details().cpus();
        if self.options.strict_cpu_reservation {
            all = all.difference(&self.reserved);
        }
        state.validate(&all, &self.reserved, self.options.strict_cpu_reservation)?;
        if !state.default_cpu_set.is_empty() || !state.entries.is_empty() {
            self.state = state;
        }
        self.cpus_to_reuse.clear();
        Ok(())
    }

    /// The policy's `takeByTopology` with the configured options.
    pub fn take_by_topology(&self, available: &CpuSet, n: usize) -> Result<CpuSet, CpuError> {
        take_by_topology(&self.topo, &self.options, available, n)
    }

    /// `guaranteedCPUs`: exclusive CPUs for this container, 0 = shared pool.
    pub fn guaranteed_cpus(&self, pod: &PodSpec, container: &ContainerSpec) -> usize {
        if qos::pod_qos(pod, &self.gates) != PodQos::Guaranteed {
            return 0;
        }
        if self.gates.pod_level_resource_managers
            && qos::is_pod_level_resources_set(pod)
            && !qos::is_container_equivalent_guaranteed(container)
        {
            return 0;
        }
        match container.resources.requests.cpu_milli {
            Some(m) if m % 1000 == 0 => (m / 1000) as usize,
            _ => 0,
        }
    }

    /// Pod-level resources present while a gate is off: the pod is skipped entirely.
    pub(crate) fn skipped_for_gates(&self, pod: &PodSpec) -> bool {
        !(self.gates.pod_level_resource_managers && self.gates.pod_level_resources)
            && qos::is_pod_level_resources_set(pod)
    }

    /// `enforceSMTAlignment`.
    pub(crate) fn enforce_smt_alignment(&self, n: usize) -> Result<(), AdmissionError> {
        if !self.options.full_pcpus_only {
            return Ok(());
        }
        let per_core = self.topo.cpus_per_core();
        if per_core == 0 || !n.is_multiple_of(per_core) {
            return Err(AdmissionError::SmtAlignment {
                requested_cpus: n,
                cpus_per_core: per_core,
                available_physical_cpus: 0,
                caused_by_physical_cpus: false,
            });
        }
        let physical = self
            .state
            .default_cpu_set
            .difference(&self.reserved_physical)
            .len();
        if n > physical {
            return Err(AdmissionError::SmtAlignment {
                requested_cpus: n,
                cpus_per_core: per_core,
                available_physical_cpus: physical,
                caused_by_physical_cpus: true,
            });
        }
        Ok(())
    }

    /// NUMA (or, with align-by-socket, socket) aligned CPUs of `allocatable` (`getAlignedCPUs`).
    fn aligned_cpus(&self, mask: NumaMask, allocatable: &CpuSet) -> CpuSet {
        let d = self.topo.details();
        let numas: Vec<u32> = mask.ids().collect();
        let cpus = if self.options.align_by_socket {
            d.cpus_in_sockets(&d.sockets_in_numa_nodes(&numas).to_vec())
        } else {
            d.cpus_in_numa_nodes(&numas)
        };
        allocatable.intersection(&cpus)
    }

    /// `allocateCPUs`: aligned first, the rest anywhere; removes the result from the default set.
    pub(crate) fn allocate_cpus(
        &mut self,
        n: usize,
        affinity: Option<NumaMask>,
        reusable: &CpuSet,
    ) -> Result<CpuSet, CpuError> {
        let allocatable = self.available().union(reusable);
        let mut result = CpuSet::new();
        if let Some(mask) = affinity {
            let aligned = self.aligned_cpus(mask, &allocatable);
            let count = n.min(aligned.len());
            result = self.take_by_topology(&aligned, count)?;
        }
        let rest = self.take_by_topology(&allocatable.difference(&result), n - result.len())?;
        result = result.union(&rest);
        self.state.default_cpu_set = self.state.default_cpu_set.difference(&result);
        Ok(result)
    }

    /// `updateCPUsToReuse`.
    fn update_cpus_to_reuse(&mut self, pod: &PodSpec, container: &ContainerSpec, cpus: &CpuSet) {
        self.cpus_to_reuse.retain(|uid, _| uid == &pod.uid);
        let entry = self.cpus_to_reuse.entry(pod.uid.clone()).or_default();
        let init = pod
            .init_containers
            .iter()
            .find(|c| c.name == container.name);
        match init {
            Some(c) if c.role == ContainerRole::Init => *entry = entry.union(cpus),
            // Sidecars and app containers: their CPUs are not reusable.
            _ => *entry = entry.difference(cpus),
        }
    }

    /// kubelet's `Allocate` for one container (container scope, or pod scope without PLRM).
    fn allocate_container(
        &mut self,
        pod: &PodSpec,
        container: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        if !self.static_policy {
            return Ok(());
        }
        let n = self.guaranteed_cpus(pod, container);
        if n == 0 || self.skipped_for_gates(pod) {
            return Ok(());
        }
        // Deviation: an existing assignment is honoured before the SMT check, so that replaying
        // admission after a restore never fails on CPUs the pod already holds.
        if let Some((cpus, _)) = self.container_cpus(&pod.uid, &container.name) {
            self.update_cpus_to_reuse(pod, container, &cpus);
            return Ok(());
        }
        self.enforce_smt_alignment(n)?;
        let reusable = self
            .cpus_to_reuse
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default();
        let cpus = self
            .allocate_cpus(n, hint.affinity, &reusable)
            .map_err(|e| AdmissionError::Unexpected(e.to_string()))?;
        debug!(pod = %pod.uid, container = %container.name, cpus = %cpus, "allocated exclusive cpus");
        self.state
            .entries
            .entry(pod.uid.clone())
            .or_default()
            .insert(
                container.name.clone(),
                ContainerAssignment {
                    cpus: cpus.clone(),
                    isolation: IsolationLevel::Container,
                },
            );
        self.update_cpus_to_reuse(pod, container, &cpus);
        Ok(())
    }

    /// Whether the manager holds anything for the pod (an assignment or a bubble).
    pub fn holds_pod(&self, pod_uid: &str) -> bool {
        self.state.entries.contains_key(pod_uid)
            || self.state.pod_entries.contains_key(pod_uid)
            || self.cpus_to_reuse.contains_key(pod_uid)
    }

    /// What [`CpuManager::undo_pod`] needs besides the pod's own holdings: the init-container
    /// reuse map (at most one pod's entry, kubelet's one-pod-at-a-time `cpusToReuse`).
    pub fn undo_point(&self) -> CpuUndo {
        CpuUndo {
            cpus_to_reuse: self.cpus_to_reuse.clone(),
        }
    }

    /// Undoes a failed admission of a pod that held nothing before it: everything it got goes
    /// back by the rules of removing each container (CPU sets come back exactly whatever the
    /// order), a bubble without assignments too, and the reuse map is put back.
    pub fn undo_pod(&mut self, pod_uid: &str, undo: CpuUndo) {
        let names: Vec<String> = self
            .state
            .entries
            .get(pod_uid)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for name in names {
            self.remove(pod_uid, &name);
        }
        if let Some(bubble) = self.state.pod_entries.remove(pod_uid) {
            self.state.default_cpu_set = self.state.default_cpu_set.union(&bubble);
        }
        self.cpus_to_reuse = undo.cpus_to_reuse;
    }

    /// kubelet's `RemoveContainer`.
    fn remove(&mut self, pod_uid: &str, name: &str) {
        let Some(containers) = self.state.entries.get_mut(pod_uid) else {
            return;
        };
        let Some(released) = containers.remove(name) else {
            return;
        };
        let now_empty = containers.is_empty();
        if now_empty {
            self.state.entries.remove(pod_uid);
        }
        if self.gates.pod_level_resource_managers {
            if let Some(bubble) = self.state.pod_entries.get(pod_uid).cloned() {
                if now_empty {
                    self.state.default_cpu_set = self.state.default_cpu_set.union(&bubble);
                    self.state.pod_entries.remove(pod_uid);
                    debug!(pod = %pod_uid, cpus = %bubble, "released pod cpus");
                }
                return;
            }
        }
        let in_use = self
            .state
            .entries
            .get(pod_uid)
            .map(|cs| cs.values().fold(CpuSet::new(), |acc, a| acc.union(&a.cpus)))
            .unwrap_or_default();
        let back = released.cpus.difference(&in_use);
        self.state.default_cpu_set = self.state.default_cpu_set.union(&back);
    }
}

impl HintProvider for CpuManager {
    fn container_hints(&self, pod: &PodSpec, container: &ContainerSpec) -> ResourceHints {
        self.container_topology_hints(pod, container)
    }
    fn container_hint_sets(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<crate::placement::HintSets, crate::placement::topology_manager::Exhausted> {
        Ok(self.container_hint_sets(pod, container))
    }
    fn pod_hint_sets(
        &self,
        pod: &PodSpec,
    ) -> Result<crate::placement::HintSets, crate::placement::topology_manager::Exhausted> {
        Ok(self.pod_hint_sets(pod))
    }

    fn pod_hints(&self, pod: &PodSpec) -> ResourceHints {
        self.pod_topology_hints(pod)
    }

    fn allocate(
        &mut self,
        pod: &PodSpec,
        container: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        self.allocate_container(pod, container, hint)
    }

    fn allocate_pod(&mut self, pod: &PodSpec, hint: &TopologyHint) -> Result<(), AdmissionError> {
        self.allocate_whole_pod(pod, hint)
    }

    fn remove_container(&mut self, pod_uid: &str, container: &str) {
        self.remove(pod_uid, container);
    }
}

//! In-place resize (docs/resize.md §2, after KEP-5554): a running container's or a pod budget's
//! new resources applied to the node without giving up what was promised at admission.
//!
//! * a container that grows keeps every CPU and gets the extra ones from the free CPUs (node
//!   shared pool, or its pod's pool) the kubelet allocator's way, its NUMA nodes first (only
//!   those under `single-numa-node` / `restricted`);
//! * one that shrinks keeps its promised CPUs (those it held before its first resize) and the
//!   best packed of the others, never fewer than the promised ones;
//! * a shared container that becomes exclusive (and back) moves between the pools;
//! * a pod budget grows from the free CPUs and shrinks by its pool only, keeping every slice
//!   and its promised budget;
//! * Static-policy memory is reallocated on the NUMA nodes the container already has.
//!
//! All-or-nothing: a refused resize leaves the node exactly as it was.

use std::collections::BTreeMap;

use super::{containers, Node, PodPlacement};
use crate::cpuset::CpuSet;
use crate::placement::config::{MemoryPolicy, TopologyPolicy};
use crate::placement::cpu::{ContainerAssignment, CpuManager};
use crate::placement::memory::block_nodes;
use crate::placement::qos::{self, IsolationLevel, PodQos};
use crate::placement::{
    AdmissionError, ContainerRole, HintProvider, NumaMask, PodSpec, Resources, TopologyHint,
};

/// What resizes may never take away, recorded at the first resize of each container / budget.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Promised {
    /// Container name → the exclusive CPUs it held before its first resize (empty: none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    containers: BTreeMap<String, CpuSet>,
    /// The pod budget before its first resize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget: Option<CpuSet>,
}

impl Promised {
    pub(crate) fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.budget.is_none()
    }
}

/// Why a resize is refused. Nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResizeError {
    #[error("pod {0} is not admitted on this node")]
    UnknownPod(String),
    #[error("container {container:?} of pod {pod} is not running on this node")]
    UnknownContainer { pod: String, container: String },
    #[error("container {0:?} is a regular init container: only running containers are resized")]
    InitContainer(String),
    #[error("resize would change the pod's QoS class from {from:?} to {to:?}")]
    QosChange { from: PodQos, to: PodQos },
    #[error("pod-level CPU budget cannot become fractional (asked {milli}m): it keeps the {} CPUs it was admitted with ({promised})", promised.len())]
    FractionalBudget { milli: u64, promised: CpuSet },
    #[error("cannot shrink {what} to {requested} exclusive CPUs: it keeps the {} CPUs it was admitted with ({promised})", promised.len())]
    BelowPromised {
        what: String,
        requested: usize,
        promised: CpuSet,
    },
    /// The kubelet allocator's words, plus where the CPUs were looked for.
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available} ({detail})")]
    NotEnoughCpus {
        requested: usize,
        available: usize,
        detail: String,
    },
    #[error("{0}")]
    Admission(#[from] AdmissionError),
    #[error("memory: {0}")]
    Memory(String),
}

impl ResizeError {
    /// Whether the node lacks room (gRPC `ResourceExhausted`), rather than a rule refusing it
    /// (`FailedPrecondition`) or an unknown target (`NotFound`).
    pub fn is_exhausted(&self) -> bool {
        matches!(self, Self::NotEnoughCpus { .. } | Self::Memory(_))
    }
}

impl Node {
    /// Applies new resources to one running container of an admitted pod; all-or-nothing.
    /// Returns the pod's placement after the resize.
    pub fn resize_container(
        &mut self,
        pod_uid: &str,
        name: &str,
        resources: &Resources,
    ) -> Result<PodPlacement, ResizeError> {
        let record = self
            .pods
            .get(pod_uid)
            .ok_or_else(|| ResizeError::UnknownPod(pod_uid.to_string()))?;
        let unknown = || ResizeError::UnknownContainer {
            pod: pod_uid.to_string(),
            container: name.to_string(),
        };
        if !record.live.contains(name) {
            return Err(unknown());
        }
        let old = record.spec.clone();
        let mut new = old.clone();
        let c = new
            .init_containers
            .iter_mut()
            .chain(new.containers.iter_mut())
            .find(|c| c.name == name)
            .ok_or_else(unknown)?;
        if c.role == ContainerRole::Init {
            return Err(ResizeError::InitContainer(name.to_string()));
        }
        c.resources = resources.clone();
        self.apply(&old, new, |node, old, new| {
            node.resize_container_cpus(old, new, name)?;
            node.resize_container_memory(old, new, name)
        })
    }

    /// Applies a new pod-level budget (`spec.resources`); all-or-nothing. Pods without a
    /// pod-level CPU bubble only get their spec updated.
    pub fn resize_pod(
        &mut self,
        pod_uid: &str,
        resources: &Resources,
    ) -> Result<PodPlacement, ResizeError> {
        let record = self
            .pods
            .get(pod_uid)
            .ok_or_else(|| ResizeError::UnknownPod(pod_uid.to_string()))?;
        let old = record.spec.clone();
        let mut new = old.clone();
        new.resources = Some(resources.clone());
        self.apply(&old, new, |node, old, new| node.resize_budget(old, new))
    }

    /// Runs `change` on a copy-protected node; commits the new spec or puts everything back.
    fn apply(
        &mut self,
        old: &PodSpec,
        new: PodSpec,
        change: impl FnOnce(&mut Self, &PodSpec, &PodSpec) -> Result<(), ResizeError>,
    ) -> Result<PodPlacement, ResizeError> {
        let (from, to) = (
            qos::pod_qos(old, &self.config.gates),
            qos::pod_qos(&new, &self.config.gates),
        );
        if from != to {
            return Err(ResizeError::QosChange { from, to });
        }
        if &new != old {
            let saved = (
                self.cpu.clone(),
                self.memory.clone(),
                self.pods.get(&old.uid).cloned(),
            );
            if let Err(e) = change(self, old, &new) {
                let (cpu, memory, record) = saved;
                self.cpu = cpu;
                self.memory = memory;
                if let Some(record) = record {
                    self.pods.insert(old.uid.clone(), record);
                }
                tracing::debug!(pod = %old.uid, reason = %e, "resize refused");
                return Err(e);
            }
            if let Some(record) = self.pods.get_mut(&old.uid) {
                record.spec = new;
            }
            tracing::debug!(pod = %old.uid, "resized");
        }
        self.placement(&old.uid)
            .ok_or_else(|| ResizeError::UnknownPod(old.uid.clone()))
    }

    /// The stored Topology Manager affinity of a container, or of the pod's first container.
    fn stored_affinity(&self, pod_uid: &str, name: Option<&str>) -> Option<NumaMask> {
        let record = self.pods.get(pod_uid)?;
        let hint = match name {
            Some(n) => record.hints.get(n),
            None => record.hints.values().next(),
        };
        hint.and_then(|h| h.affinity).map(NumaMask)
    }

    fn strict(&self) -> bool {
        matches!(
            self.config.topology_policy,
            TopologyPolicy::SingleNumaNode | TopologyPolicy::Restricted
        )
    }

    fn resize_container_cpus(
        &mut self,
        old: &PodSpec,
        new: &PodSpec,
        name: &str,
    ) -> Result<(), ResizeError> {
        let m = self.cpu.manager();
        if !m.is_static() || m.skipped_for_gates(new) {
            return Ok(());
        }
        let find = |p: &PodSpec| containers(p).find(|c| c.name == name).cloned();
        let (Some(c_old), Some(c_new)) = (find(old), find(new)) else {
            return Ok(());
        };
        let (had, want) = (
            m.guaranteed_cpus(old, &c_old),
            m.guaranteed_cpus(new, &c_new),
        );
        let bubble = m.pod_cpus(&old.uid).cloned();
        if had == want {
            return Ok(());
        }
        if bubble.is_none() && qos::pod_level_managed(new, &self.config.gates) && self.plrm_scope()
        {
            // A fractional budget: every container runs on the node shared pool, as admitted
            // (`AllocatePod` gives a budget of 0 guaranteed CPUs nothing); so it stays.
            return Ok(());
        }
        if want > 0 {
            smt_check(m, want)?;
        }
        let current = match m.container_cpus(&old.uid, name) {
            Some((cpus, IsolationLevel::Container)) => cpus,
            _ => CpuSet::new(),
        };
        let promised = self.promise_container(&old.uid, name, &current);
        let affinity = self.stored_affinity(&old.uid, Some(name));
        if let Some(bubble) = &bubble {
            self.cpu
                .manager()
                .validate_pod_scope_resources(new)
                .map_err(ResizeError::Admission)?;
            let pool = current_pool(self.cpu.manager(), new, bubble, name).difference(&current);
            let next = self.next_cpus(&current, &promised, want, &pool, affinity, name)?;
            let pool = pool.union(&current).difference(&next);
            let m = self.cpu.manager_mut();
            set_assignment(m, &old.uid, name, next);
            repartition(m, new, bubble, &pool, Some(name));
        } else {
            let free = self.cpu.manager().available();
            let next = self.next_cpus(&current, &promised, want, &free, affinity, name)?;
            let m = self.cpu.manager_mut();
            let default = m.state.default_cpu_set.union(&current).difference(&next);
            m.state.default_cpu_set = default;
            set_assignment(m, &old.uid, name, next);
        }
        Ok(())
    }

    /// The container's exclusive CPUs after the resize to `want` (empty: shared), taking new
    /// ones from `free`.
    fn next_cpus(
        &self,
        current: &CpuSet,
        promised: &CpuSet,
        want: usize,
        free: &CpuSet,
        affinity: Option<NumaMask>,
        name: &str,
    ) -> Result<CpuSet, ResizeError> {
        let m = self.cpu.manager();
        if want > current.len() {
            let prefer = affinity.or_else(|| (!current.is_empty()).then(|| m.numa_of(current)));
            let extra = self.pick(free, want - current.len(), prefer, affinity.is_some())?;
            return Ok(current.union(&extra));
        }
        if want < promised.len() {
            return Err(ResizeError::BelowPromised {
                what: format!("container {name:?}"),
                requested: want,
                promised: promised.clone(),
            });
        }
        let gained = current.difference(promised);
        let keep = m
            .take_by_topology(&gained, want - promised.len())
            .map_err(|e| ResizeError::Admission(AdmissionError::Unexpected(e.to_string())))?;
        Ok(promised.union(&keep))
    }

    /// `n` CPUs of `free`: those on `prefer`'s NUMA nodes first; only those when the policy is
    /// strict and `restrict` (the mask is the Topology Manager's).
    fn pick(
        &self,
        free: &CpuSet,
        n: usize,
        prefer: Option<NumaMask>,
        restrict: bool,
    ) -> Result<CpuSet, ResizeError> {
        let m = self.cpu.manager();
        let aligned = prefer.map(|mask| aligned_cpus(m, mask, free));
        let short = |available: usize, detail: String| ResizeError::NotEnoughCpus {
            requested: n,
            available,
            detail,
        };
        let take = |from: &CpuSet, k: usize| {
            m.take_by_topology(from, k)
                .map_err(|e| ResizeError::Admission(AdmissionError::Unexpected(e.to_string())))
        };
        match (aligned, prefer) {
            (Some(aligned), Some(mask)) if restrict && self.strict() => {
                if aligned.len() < n {
                    return Err(short(
                        aligned.len(),
                        format!("NUMA node(s) {}: free cpus \"{aligned}\"", mask_list(mask)),
                    ));
                }
                take(&aligned, n)
            }
            (aligned, _) => {
                if free.len() < n {
                    return Err(short(free.len(), format!("free cpus \"{free}\"")));
                }
                let first = match aligned {
                    Some(a) => take(&a, n.min(a.len()))?,
                    None => CpuSet::new(),
                };
                let rest = take(&free.difference(&first), n - first.len())?;
                Ok(first.union(&rest))
            }
        }
    }

    /// The container's promised CPUs, recorded now if this is its first resize.
    fn promise_container(&mut self, pod_uid: &str, name: &str, current: &CpuSet) -> CpuSet {
        let Some(record) = self.pods.get_mut(pod_uid) else {
            return CpuSet::new();
        };
        record
            .promised
            .containers
            .entry(name.to_string())
            .or_insert_with(|| current.clone())
            .clone()
    }

    fn resize_container_memory(
        &mut self,
        old: &PodSpec,
        new: &PodSpec,
        name: &str,
    ) -> Result<(), ResizeError> {
        if self.config.memory_policy != MemoryPolicy::Static {
            return Ok(());
        }
        if qos::pod_level_managed(new, &self.config.gates) && self.plrm_scope() {
            // Its memory is a share of the pod's bubble: the bubble is partitioned again when
            // the container's memory or hugepages change (not for a CPU-only resize).
            let requests = |p: &PodSpec| {
                containers(p).find(|c| c.name == name).map(|c| {
                    let r = &c.resources.requests;
                    (r.memory, r.hugepages.clone())
                })
            };
            if requests(old) != requests(new) {
                self.reallocate_budget_memory(new)?;
            }
            return Ok(());
        }
        let Some(blocks) = self.memory.container_blocks(&new.uid, name) else {
            return Ok(());
        };
        let Some(c) = containers(new).find(|c| c.name == name) else {
            return Ok(());
        };
        let old_nodes = block_nodes(blocks);
        let wanted: u64 = c.resources.requests.memory.unwrap_or(0);
        let held: u64 = blocks
            .iter()
            .filter(|b| b.resource == crate::placement::memory::MEMORY)
            .map(|b| b.size)
            .sum();
        if wanted == held {
            return Ok(());
        }
        self.memory.remove_container(&new.uid, name);
        let hint = TopologyHint {
            affinity: Some(old_nodes),
            preferred: true,
        };
        self.memory
            .allocate(new, c, &hint)
            .map_err(|e| ResizeError::Memory(e.to_string()))?;
        let now = self.memory.memory_nodes(&new.uid, name).unwrap_or_default();
        stays_on(old_nodes, now, || {
            format!("{wanted} bytes for container {name:?}")
        })
    }

    /// The pod's memory bubble (Static policy) allocated again for `new`'s budget, on the NUMA
    /// nodes it has; refused when they cannot hold it. A pod without a bubble is left alone.
    fn reallocate_budget_memory(&mut self, new: &PodSpec) -> Result<(), ResizeError> {
        let Some(before) = self.memory.pod_blocks(&new.uid).map(block_nodes) else {
            return Ok(());
        };
        self.memory
            .reallocate_pod(new)
            .map_err(ResizeError::Memory)?;
        let after = self
            .memory
            .pod_blocks(&new.uid)
            .map(block_nodes)
            .unwrap_or_default();
        stays_on(before, after, || {
            let bytes = new
                .resources
                .as_ref()
                .and_then(|r| r.requests.memory)
                .unwrap_or(0);
            format!("the pod budget's {bytes} bytes")
        })
    }

    fn plrm_scope(&self) -> bool {
        self.config.topology_policy != TopologyPolicy::None
            && self.config.topology_scope == crate::placement::config::TopologyScope::Pod
    }

    fn resize_budget(&mut self, old: &PodSpec, new: &PodSpec) -> Result<(), ResizeError> {
        let (old_mem, new_mem) = (
            old.resources.as_ref().and_then(|r| r.requests.memory),
            new.resources.as_ref().and_then(|r| r.requests.memory),
        );
        if self.config.memory_policy == MemoryPolicy::Static
            && self.memory.pod_blocks(&old.uid).is_some()
            && old_mem != new_mem
        {
            self.reallocate_budget_memory(new)?;
        }
        let m = self.cpu.manager();
        if !m.is_static() {
            return Ok(());
        }
        let want = m.pod_guaranteed_cpus(new);
        let Some(bubble) = m.pod_cpus(&old.uid).cloned() else {
            if want > 0 && qos::pod_level_managed(new, &self.config.gates) && self.plrm_scope() {
                return self.make_budget(old, new, want);
            }
            return Ok(());
        };
        if want == 0 {
            return self.drop_budget(old, new, &bubble);
        }
        m.validate_pod_scope_resources(new)
            .map_err(ResizeError::Admission)?;
        smt_check(m, want)?;
        if want == bubble.len() {
            return Ok(());
        }
        let promised = match self.pods.get_mut(&old.uid) {
            Some(r) => r
                .promised
                .budget
                .get_or_insert_with(|| bubble.clone())
                .clone(),
            None => bubble.clone(),
        };
        let pool = current_pool(self.cpu.manager(), new, &bubble, "");
        let (next, pool) = if want > bubble.len() {
            let free = self.cpu.manager().available();
            let affinity = self.stored_affinity(&old.uid, None);
            let prefer = affinity.or_else(|| Some(self.cpu.manager().numa_of(&bubble)));
            let extra = self.pick(&free, want - bubble.len(), prefer, affinity.is_some())?;
            (bubble.union(&extra), pool.union(&extra))
        } else {
            if want < promised.len() {
                return Err(ResizeError::BelowPromised {
                    what: "the pod budget".into(),
                    requested: want,
                    promised,
                });
            }
            let releasable = pool.difference(&promised);
            let give = bubble.len() - want;
            if releasable.len() < give {
                return Err(ResizeError::BelowPromised {
                    what: "the pod budget".into(),
                    requested: want,
                    promised: bubble.difference(&releasable),
                });
            }
            let keep = self
                .cpu
                .manager()
                .take_by_topology(&releasable, releasable.len() - give)
                .map_err(|e| ResizeError::Admission(AdmissionError::Unexpected(e.to_string())))?;
            let released = releasable.difference(&keep);
            (bubble.difference(&released), pool.difference(&released))
        };
        let m = self.cpu.manager_mut();
        let default = m.state.default_cpu_set.union(&bubble).difference(&next);
        m.state.default_cpu_set = default;
        m.state.pod_entries.insert(old.uid.clone(), next.clone());
        repartition(m, new, &next, &pool, None);
        Ok(())
    }
}

impl Node {
    /// A fractional budget (admitted on the node shared pool) grown to whole CPUs: the pod gets
    /// a bubble as an admission would give it (`GetPodTopologyHints` merged with the pod's
    /// memory and devices where they already are, then `AllocatePod`'s allocation and
    /// partition); its containers leave the node shared pool for their slices and the pod pool.
    /// Under `single-numa-node` / `restricted` a budget no NUMA node can hold is refused with
    /// the free CPUs of each node.
    fn make_budget(
        &mut self,
        old: &PodSpec,
        new: &PodSpec,
        want: usize,
    ) -> Result<(), ResizeError> {
        let claimed = self.claims.pod_hints(new, self.numa_nodes());
        let mut hints = [
            self.devices.pod_hint_sets(new).map_err(super::too_wide)?,
            self.cpu.pod_hint_sets(new).map_err(super::too_wide)?,
            match self.memory.held_pod_hint_sets(new) {
                Some(held) => held,
                None => self.memory.pod_hint_sets(new).map_err(super::too_wide)?,
            },
        ];
        let (hint, admit) = self
            .merge_with_claims(&mut hints, &claimed)
            .map_err(ResizeError::Admission)?;
        if !admit {
            return Err(self.no_node_holds(want, &new.uid));
        }
        let m = self.cpu.manager_mut();
        m.allocate_whole_pod(new, &hint)
            .map_err(ResizeError::Admission)?;
        let Some(record) = self.pods.get_mut(&old.uid) else {
            return Ok(());
        };
        // Containers that already ended (regular init containers) get nothing back.
        if let Some(entries) = self.cpu.manager_mut().state.entries.get_mut(&old.uid) {
            entries.retain(|name, _| record.live.contains(name));
        }
        for stored in record.hints.values_mut() {
            *stored = hint.into();
        }
        // Nothing of the bubble, and no slice of it, was promised at admission: the containers
        // were admitted on the node shared pool. All of it may be given up again.
        record.promised.budget.get_or_insert_with(CpuSet::new);
        for name in &record.live {
            record
                .promised
                .containers
                .entry(name.clone())
                .or_insert_with(CpuSet::new);
        }
        Ok(())
    }

    /// A whole budget shrunk to a fractional one: the bubble goes back to the node shared pool
    /// and every container with it (as a fractional budget is admitted). Only a budget that was
    /// admitted fractional may do so (its containers were admitted on the node shared pool, so
    /// none holds promised CPUs).
    fn drop_budget(
        &mut self,
        old: &PodSpec,
        new: &PodSpec,
        bubble: &CpuSet,
    ) -> Result<(), ResizeError> {
        let milli = new
            .resources
            .as_ref()
            .and_then(|r| r.requests.cpu_milli)
            .unwrap_or(0);
        let promised = self
            .pods
            .get(&old.uid)
            .and_then(|r| r.promised.budget.clone())
            .unwrap_or_else(|| bubble.clone());
        if !promised.is_empty() {
            return Err(ResizeError::FractionalBudget { milli, promised });
        }
        let m = self.cpu.manager_mut();
        m.state.default_cpu_set = m.state.default_cpu_set.union(bubble);
        m.state.pod_entries.remove(&old.uid);
        m.state.entries.remove(&old.uid);
        Ok(())
    }

    /// Why no NUMA node (set) the policy accepts holds `want` CPUs: each node's free CPUs, and
    /// where the pod's memory already is.
    fn no_node_holds(&self, want: usize, pod_uid: &str) -> ResizeError {
        let m = self.cpu.manager();
        let free = m.available();
        let d = m.topology().details();
        let detail = self
            .numa_nodes()
            .iter()
            .map(|&n| {
                let on = free.intersection(&d.cpus_in_numa_nodes(&[n]));
                format!("NUMA node {n}: free cpus \"{on}\"")
            })
            .collect::<Vec<_>>()
            .join(", ");
        let memory = match self.memory.pod_blocks(pod_uid).map(block_nodes) {
            Some(nodes) => format!("; its memory is on NUMA node(s) {}", mask_list(nodes)),
            None => String::new(),
        };
        ResizeError::NotEnoughCpus {
            requested: want,
            available: free.len(),
            detail: format!(
                "{}: no NUMA affinity the policy admits holds them; {detail}{memory}",
                policy_name(self.config.topology_policy)
            ),
        }
    }
}

/// The kubelet's spelling of a Topology Manager policy.
fn policy_name(p: TopologyPolicy) -> &'static str {
    match p {
        TopologyPolicy::None => "none",
        TopologyPolicy::BestEffort => "best-effort",
        TopologyPolicy::Restricted => "restricted",
        TopologyPolicy::SingleNumaNode => "single-numa-node",
    }
}

/// `full-pcpus-only`: exclusive counts are whole cores (kubelet's SMT alignment error).
fn smt_check(m: &CpuManager, n: usize) -> Result<(), ResizeError> {
    let per_core = m.topology().cpus_per_core();
    if m.options.full_pcpus_only && (per_core == 0 || !n.is_multiple_of(per_core)) {
        return Err(ResizeError::Admission(AdmissionError::SmtAlignment {
            requested_cpus: n,
            cpus_per_core: per_core,
            available_physical_cpus: 0,
            caused_by_physical_cpus: false,
        }));
    }
    Ok(())
}

/// NUMA (with align-by-socket: socket) aligned CPUs of `free`.
fn aligned_cpus(m: &CpuManager, mask: NumaMask, free: &CpuSet) -> CpuSet {
    let d = m.topology().details();
    let numas: Vec<u32> = mask.ids().collect();
    let cpus = if m.options.align_by_socket {
        d.cpus_in_sockets(&d.sockets_in_numa_nodes(&numas).to_vec())
    } else {
        d.cpus_in_numa_nodes(&numas)
    };
    free.intersection(&cpus)
}

/// Memory re-allocated for `what` must stay on the NUMA nodes it had.
fn stays_on(
    before: NumaMask,
    after: NumaMask,
    what: impl FnOnce() -> String,
) -> Result<(), ResizeError> {
    if after.or(before) == before {
        return Ok(());
    }
    Err(ResizeError::Memory(format!(
        "{} do not fit on its NUMA node(s) {}",
        what(),
        mask_list(before)
    )))
}

fn mask_list(mask: NumaMask) -> String {
    mask.ids()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The pod pool of a PLRM pod as its shared app/sidecar containers have it; without such a
/// container, the bubble minus the live app and sidecar slices (`except` one container, whose
/// slice is being decided). CPUs of removed containers stay out of the pool, as in the kubelet.
fn current_pool(m: &CpuManager, pod: &PodSpec, bubble: &CpuSet, except: &str) -> CpuSet {
    let of = |c: &crate::placement::ContainerSpec| m.container_cpus(&pod.uid, &c.name);
    let long_running = || containers(pod).filter(|c| c.role != ContainerRole::Init);
    if let Some((cpus, _)) = long_running()
        .filter(|c| c.name != except)
        .filter_map(of)
        .find(|(_, iso)| *iso == IsolationLevel::Pod)
    {
        return cpus;
    }
    let slices = long_running()
        .filter(|c| c.name != except)
        .filter_map(of)
        .filter(|(_, iso)| *iso == IsolationLevel::Container)
        .fold(CpuSet::new(), |acc, (s, _)| acc.union(&s));
    bubble.difference(&slices)
}

/// Records the container's new exclusive set, or drops its slice when `cpus` is empty (a PLRM
/// container then gets the pod pool from [`repartition`]).
fn set_assignment(m: &mut CpuManager, pod_uid: &str, name: &str, cpus: CpuSet) {
    let entries = m.state.entries.entry(pod_uid.to_string()).or_default();
    if cpus.is_empty() {
        entries.remove(name);
    } else {
        entries.insert(
            name.to_string(),
            ContainerAssignment {
                cpus,
                isolation: IsolationLevel::Container,
            },
        );
    }
    if entries.is_empty() {
        m.state.entries.remove(pod_uid);
    }
}

/// Points every shared container of a PLRM pod (and `joined`, which just left its slice) at
/// `pool` (regular init containers: the bubble minus sidecar slices), as `AllocatePod`'s
/// partition does. Removed containers stay without an entry.
fn repartition(
    m: &mut CpuManager,
    pod: &PodSpec,
    bubble: &CpuSet,
    pool: &CpuSet,
    joined: Option<&str>,
) {
    let sidecars = pod
        .init_containers
        .iter()
        .filter(|c| c.role == ContainerRole::Sidecar)
        .filter_map(|c| match m.container_cpus(&pod.uid, &c.name) {
            Some((cpus, IsolationLevel::Container)) => Some(cpus),
            _ => None,
        })
        .fold(CpuSet::new(), |acc, s| acc.union(&s));
    let entries = m.state.entries.entry(pod.uid.clone()).or_default();
    for c in containers(pod) {
        let shared = match entries.get(&c.name) {
            Some(a) => a.isolation == IsolationLevel::Pod,
            None => joined == Some(c.name.as_str()),
        };
        if !shared {
            continue;
        }
        let cpus = if c.role == ContainerRole::Init {
            bubble.difference(&sidecars)
        } else {
            pool.clone()
        };
        entries.insert(
            c.name.clone(),
            ContainerAssignment {
                cpus,
                isolation: IsolationLevel::Pod,
            },
        );
    }
}

#[cfg(test)]
mod tests;

//! CPU topology hints (`GetTopologyHints`, `GetPodTopologyHints`, `generateCPUTopologyHints`):
//! every NUMA mask that can hold the request, preferred when it is as narrow as the narrowest
//! mask whose *total* CPUs could hold it (or, with align-by-socket, when it spans the minimal
//! number of sockets).

use super::details::Level;
use super::manager::CpuManager;
use super::pod::Restore;
use crate::cpuset::CpuSet;
use crate::placement::hint::NumaMask;
use crate::placement::pod::{ContainerSpec, PodSpec};
use crate::placement::qos;
use crate::placement::topology_manager::{HintFamily, HintSet, SocketRule, Upward};
use crate::placement::{HintSets, ResourceHints, TopologyHint};

const CPU: &str = "cpu";

fn none() -> HintSets {
    HintSets::new()
}

fn one(family: HintFamily) -> HintSets {
    HintSets::from([(CPU.to_string(), Some(HintSet::Family(family)))])
}

fn unsatisfiable() -> HintSets {
    HintSets::from([(CPU.to_string(), Some(HintSet::Listed(Vec::new())))])
}

/// The spelled-out lists (2^N work: tests and small machines).
pub(crate) fn materialise(sets: HintSets) -> ResourceHints {
    sets.into_iter()
        .map(|(k, v)| (k, v.map(|s| s.materialise())))
        .collect()
}

impl CpuManager {
    /// `GetTopologyHints`; an empty map is kubelet's nil (no preference).
    pub(crate) fn container_topology_hints(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> ResourceHints {
        materialise(self.container_hint_sets(pod, container))
    }

    /// `GetPodTopologyHints`, spelled out.
    pub(crate) fn pod_topology_hints(&self, pod: &PodSpec) -> ResourceHints {
        materialise(self.pod_hint_sets(pod))
    }

    /// `GetTopologyHints` as hint families.
    pub(crate) fn container_hint_sets(&self, pod: &PodSpec, container: &ContainerSpec) -> HintSets {
        if !self.static_policy {
            return none();
        }
        let requested = self.guaranteed_cpus(pod, container);
        if requested == 0 || self.skipped_for_gates(pod) {
            return none();
        }
        if let Some((allocated, _)) = self.container_cpus(&pod.uid, &container.name) {
            if allocated.len() != requested {
                return unsatisfiable();
            }
            return one(self.generate_family(&allocated, &CpuSet::new(), requested));
        }
        let reusable = self
            .cpus_to_reuse
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default();
        one(self.generate_family(&self.available(), &reusable, requested))
    }

    /// `GetPodTopologyHints` as hint families.
    pub(crate) fn pod_hint_sets(&self, pod: &PodSpec) -> HintSets {
        if !self.static_policy {
            return none();
        }
        let requested = self.pod_guaranteed_cpus(pod);
        if requested == 0 || self.skipped_for_gates(pod) {
            return none();
        }
        if self.gates.pod_level_resource_managers
            && qos::is_pod_level_resources_set(pod)
            && self.validate_pod_scope_resources(pod).is_err()
        {
            return unsatisfiable();
        }
        if qos::pod_level_managed(pod, &self.gates) {
            match self.restorable_bubble(pod) {
                Restore::Held(bubble) if bubble.len() != requested => return unsatisfiable(),
                Restore::Held(bubble) => {
                    return one(self.generate_family(&bubble, &CpuSet::new(), requested))
                }
                Restore::Stale { release: true } => {
                    let bubble = self.pod_cpus(&pod.uid).cloned().unwrap_or_default();
                    let available = self.available().union(&bubble.difference(&self.reserved));
                    return one(self.generate_family(&available, &CpuSet::new(), requested));
                }
                Restore::Stale { release: false } => {
                    return one(self.generate_family(&self.available(), &CpuSet::new(), requested))
                }
                Restore::None => {}
            }
        }
        let mut assigned = CpuSet::new();
        for c in pod.init_containers.iter().chain(&pod.containers) {
            if let Some((allocated, _)) = self.container_cpus(&pod.uid, &c.name) {
                if allocated.len() != self.guaranteed_cpus(pod, c) {
                    return unsatisfiable();
                }
                assigned = assigned.union(&allocated);
            }
        }
        if assigned.len() == requested {
            return one(self.generate_family(&assigned, &CpuSet::new(), requested));
        }
        let reusable = self
            .cpus_to_reuse
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default()
            .union(&assigned);
        one(self.generate_family(&self.available(), &reusable, requested))
    }

    /// `generateCPUTopologyHints`, spelled out in the kubelet's order (2^N masks).
    pub fn generate_hints(
        &self,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
    ) -> Vec<TopologyHint> {
        self.generate_family(available, reusable, request).members()
    }

    /// `generateCPUTopologyHints` as its rule: a mask is a hint iff it holds the reusable CPUs'
    /// nodes and `reusable + available CPUs in it >= request` (upward-closed); preferred iff it
    /// has `min_size` nodes, the fewest whose *total* CPUs could hold the request (or, with
    /// align-by-socket, spans the fewest sockets those need). O(CPUs + nodes log nodes).
    pub fn generate_family(
        &self,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
    ) -> HintFamily {
        let d = self.topo.details();
        let numas = d.numa_nodes().to_vec();
        let nodes: Vec<u32> = numas.iter().copied().filter(|&n| n < 64).collect();
        let mut total = [0u64; 64];
        let mut free = [0u64; 64];
        for &n in &nodes {
            if let Some(cpus) = self.topo.cpus_in(Level::Numa, n) {
                total[n as usize] = cpus.len() as u64;
                free[n as usize] = available.intersection(cpus).len() as u64;
            }
        }
        // The fewest nodes whose CPUs could hold the request: the largest ones first.
        let mut totals: Vec<u64> = nodes.iter().map(|&n| total[n as usize]).collect();
        totals.sort_unstable_by(|a, b| b.cmp(a));
        let mut min_size = numas.len();
        let mut acc = 0u64;
        for (k, t) in totals.iter().enumerate() {
            acc += t;
            if acc >= request as u64 {
                min_size = min_size.min(k + 1);
                break;
            }
        }
        let reusable_nodes = reusable.iter().try_fold(NumaMask::default(), |m, cpu| {
            let n = d.info(cpu)?.numa;
            (n < 64).then(|| m.or(NumaMask::from_ids([n])))
        });
        let up = reusable_nodes.map(|required| Upward {
            within: NumaMask::from_ids(nodes.iter().copied()),
            required,
            min_count: 1,
            amounts: vec![free],
            need: vec![(request as u64).saturating_sub(reusable.len() as u64)],
        });
        let family = HintFamily {
            nodes,
            up,
            listed: Vec::new(),
            preferred_size: min_size as u32,
            sockets: self
                .options
                .align_by_socket
                .then(|| self.socket_rule(min_size))
                .flatten(),
        };
        #[cfg(test)]
        if family.nodes.len() <= 8 {
            assert_eq!(
                family.members(),
                self.generate_hints_reference(available, reusable, request),
                "CPU hint family vs enumeration"
            );
        }
        family
    }

    /// `isHintSocketAligned` as a rule: aligned iff the mask spans `ceil(min_size / nodes per
    /// socket)` sockets (header counters, as kubelet); none when that count is undefined.
    fn socket_rule(&self, min_size: usize) -> Option<SocketRule> {
        let c = self.topo.counts();
        let per_socket = c.num_numa_nodes.checked_div(c.num_sockets).unwrap_or(0);
        if per_socket == 0 {
            return None;
        }
        let min_sockets = min_size.div_ceil(per_socket);
        let d = self.topo.details();
        let mut ids: Vec<u32> = Vec::new();
        let mut sockets_of = Vec::new();
        for n in d.numa_nodes().iter().filter(|&n| n < 64) {
            let ss: Vec<usize> = self
                .topo
                .sockets_of_numa(n)
                .map(|s| {
                    s.iter()
                        .map(|sid| match ids.iter().position(|&x| x == sid) {
                            Some(p) => p,
                            None => {
                                ids.push(sid);
                                ids.len() - 1
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            sockets_of.push((n, ss));
        }
        Some(SocketRule {
            sockets_of,
            socket_count: ids.len(),
            min_sockets,
        })
    }

    /// The enumerating `generateCPUTopologyHints` (every one of the 2^N masks): the reference
    /// `generate_family` is tested against.
    #[cfg(test)]
    pub(crate) fn generate_hints_reference(
        &self,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
    ) -> Vec<TopologyHint> {
        let d = self.topo.details();
        let numas = d.numa_nodes().to_vec();
        let mut min_size = numas.len();
        // Per NUMA node id (< 64; a mask holds no other): all its CPUs, and its available ones.
        let mut total = [0usize; 64];
        let mut free = [0usize; 64];
        for &n in numas.iter().filter(|&&n| n < 64) {
            if let Some(cpus) = self.topo.cpus_in(Level::Numa, n) {
                total[n as usize] = cpus.len();
                free[n as usize] = available.intersection(cpus).len();
            }
        }
        // The nodes the reusable CPUs span; `None` if one of them lies outside every mask.
        let reusable_nodes = reusable.iter().try_fold(NumaMask::default(), |m, cpu| {
            let n = d.info(cpu)?.numa;
            (n < 64).then(|| m.or(NumaMask::from_ids([n])))
        });
        let sum = |mask: NumaMask, per: &[usize; 64]| -> usize {
            mask.ids().map(|n| per[n as usize]).sum()
        };
        let mut hints = Vec::new();
        for mask in crate::placement::topology_manager::iterate_masks(&numas) {
            let size = mask.count() as usize;
            if sum(mask, &total) >= request && size < min_size {
                min_size = size;
            }
            let Some(needed) = reusable_nodes else {
                continue;
            };
            if needed.and(mask) != needed {
                continue;
            }
            let matching = reusable.len() + sum(mask, &free);
            if matching < request {
                continue;
            }
            hints.push(TopologyHint {
                affinity: Some(mask),
                preferred: false,
            });
        }
        for h in &mut hints {
            let Some(mask) = h.affinity else { continue };
            let socket_aligned =
                self.options.align_by_socket && self.is_socket_aligned(mask, min_size);
            if socket_aligned || mask.count() as usize == min_size {
                h.preferred = true;
            }
        }
        hints
    }

    /// `isHintSocketAligned` (header counters, as kubelet).
    #[cfg(test)]
    fn is_socket_aligned(&self, mask: NumaMask, min_size: usize) -> bool {
        let c = self.topo.counts();
        let per_socket = c.num_numa_nodes.checked_div(c.num_sockets).unwrap_or(0);
        if per_socket == 0 {
            return false;
        }
        let min_sockets = min_size.div_ceil(per_socket);
        let sockets = mask
            .ids()
            .filter_map(|n| self.topo.sockets_of_numa(n))
            .fold(CpuSet::new(), |all, s| all.union(s));
        sockets.len() == min_sockets
    }
}

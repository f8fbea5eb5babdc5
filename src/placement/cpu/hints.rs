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
use crate::placement::topology_manager::iterate_masks;
use crate::placement::{ResourceHints, TopologyHint};

const CPU: &str = "cpu";

fn one(hints: Vec<TopologyHint>) -> ResourceHints {
    ResourceHints::from([(CPU.to_string(), Some(hints))])
}

impl CpuManager {
    /// `GetTopologyHints`; an empty map is kubelet's nil (no preference).
    pub(crate) fn container_topology_hints(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> ResourceHints {
        if !self.static_policy {
            return ResourceHints::new();
        }
        let requested = self.guaranteed_cpus(pod, container);
        if requested == 0 || self.skipped_for_gates(pod) {
            return ResourceHints::new();
        }
        if let Some((allocated, _)) = self.container_cpus(&pod.uid, &container.name) {
            if allocated.len() != requested {
                return one(vec![]);
            }
            return one(self.generate_hints(&allocated, &CpuSet::new(), requested));
        }
        let reusable = self
            .cpus_to_reuse
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default();
        one(self.generate_hints(&self.available(), &reusable, requested))
    }

    /// `GetPodTopologyHints`.
    pub(crate) fn pod_topology_hints(&self, pod: &PodSpec) -> ResourceHints {
        if !self.static_policy {
            return ResourceHints::new();
        }
        let requested = self.pod_guaranteed_cpus(pod);
        if requested == 0 || self.skipped_for_gates(pod) {
            return ResourceHints::new();
        }
        if self.gates.pod_level_resource_managers
            && qos::is_pod_level_resources_set(pod)
            && self.validate_pod_scope_resources(pod).is_err()
        {
            return one(vec![]);
        }
        if qos::pod_level_managed(pod, &self.gates) {
            match self.restorable_bubble(pod) {
                Restore::Held(bubble) if bubble.len() != requested => return one(vec![]),
                Restore::Held(bubble) => {
                    return one(self.generate_hints(&bubble, &CpuSet::new(), requested))
                }
                Restore::Stale { release: true } => {
                    let bubble = self.pod_cpus(&pod.uid).cloned().unwrap_or_default();
                    let available = self.available().union(&bubble.difference(&self.reserved));
                    return one(self.generate_hints(&available, &CpuSet::new(), requested));
                }
                Restore::Stale { release: false } => {
                    return one(self.generate_hints(&self.available(), &CpuSet::new(), requested))
                }
                Restore::None => {}
            }
        }
        let mut assigned = CpuSet::new();
        for c in pod.init_containers.iter().chain(&pod.containers) {
            if let Some((allocated, _)) = self.container_cpus(&pod.uid, &c.name) {
                if allocated.len() != self.guaranteed_cpus(pod, c) {
                    return one(vec![]);
                }
                assigned = assigned.union(&allocated);
            }
        }
        if assigned.len() == requested {
            return one(self.generate_hints(&assigned, &CpuSet::new(), requested));
        }
        let reusable = self
            .cpus_to_reuse
            .get(&pod.uid)
            .cloned()
            .unwrap_or_default()
            .union(&assigned);
        one(self.generate_hints(&self.available(), &reusable, requested))
    }

    /// `generateCPUTopologyHints`. CPUs are counted per NUMA node once (from the topology's
    /// index), then summed per mask: O(CPUs + masks · nodes) instead of a scan per mask.
    pub fn generate_hints(
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
        for mask in iterate_masks(&numas) {
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

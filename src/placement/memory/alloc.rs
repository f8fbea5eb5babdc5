//! Allocation and release of memory blocks (kubelet static policy `Allocate`,
//! `RemoveContainer`), the default/extended hint choice and the init-container reuse bookkeeping.

use std::collections::BTreeMap;

use super::hints::{self, Requests};
use super::{qos, Block, MemoryManager, NumaState};
use crate::placement::topology_manager::{Budget, Exhausted, TopologyManager};
use crate::placement::{
    AdmissionError, ContainerRole, ContainerSpec, NumaMask, PodSpec, TopologyHint,
};

fn unexpected(msg: &str) -> AdmissionError {
    AdmissionError::Unexpected(msg.to_string())
}

fn too_wide() -> AdmissionError {
    unexpected("[memorymanager] the hint search on this machine exceeds the budget of one decision")
}

/// Steps 1–3 of §3.5: default hint, extension, group rule. Returns the mask to use.
pub(super) fn choose_mask(
    mm: &MemoryManager,
    pod_uid: &str,
    reqs: &Requests,
    hint: &TopologyHint,
) -> Result<NumaMask, AdmissionError> {
    let machine = &mm.state.machine;
    let mut best = *hint;
    let budget = Budget::new(Budget::DEFAULT);
    let family = || {
        hints::calculate_family(machine, &mm.reusable, pod_uid, reqs, &budget)
            .map_err(|Exhausted| too_wide())
    };
    if best.affinity.is_none() {
        let Some(family) = family()? else {
            return Err(unexpected(
                "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available",
            ));
        };
        // Every resource gets the same list; kubelet reads the `memory` one.
        let default = TopologyManager::best_member(&family, NumaMask::default(), &budget)
            .map_err(|Exhausted| too_wide())?
            .unwrap_or(TopologyHint {
                affinity: None,
                preferred: false,
            });
        if !default.preferred && best.preferred {
            return Err(unexpected(
                "[memorymanager] failed to find the default preferred hint",
            ));
        }
        best = default;
    }
    let mask = best.affinity.unwrap_or_default();
    if !satisfies(machine, mask, reqs) {
        let extended = match family()? {
            Some(family) => TopologyManager::best_member(&family, mask, &budget)
                .map_err(|Exhausted| too_wide())?,
            None => None,
        };
        let Some(extended) = extended else {
            return Err(unexpected(
                "[memorymanager] failed to find NUMA nodes to extend the current topology hint",
            ));
        };
        if !extended.preferred && best.preferred {
            return Err(unexpected(
                "[memorymanager] failed to find the extended preferred hint",
            ));
        }
        best = extended;
    }
    let mask = best.affinity.unwrap_or_default();
    if hints::violates_group(machine, mask) {
        return Err(unexpected(
            "[memorymanager] preferred hint violates NUMA node allocation",
        ));
    }
    Ok(mask)
}

/// kubelet `isAffinitySatisfyRequest` (free memory only).
fn satisfies(machine: &BTreeMap<u32, NumaState>, mask: NumaMask, reqs: &Requests) -> bool {
    reqs.iter().all(|(name, &req)| {
        let free: u64 = mask
            .ids()
            .filter_map(|id| machine.get(&id)?.memory.get(name).map(|t| t.free))
            .sum();
        free >= req
    })
}

/// kubelet `updateMachineState`: every node of the mask joins the group; the size is drawn
/// greedily from free into reserved, ascending node id.
pub(super) fn charge(
    machine: &mut BTreeMap<u32, NumaState>,
    mask: NumaMask,
    resource: &str,
    mut size: u64,
) {
    let cells: Vec<u32> = mask.ids().collect();
    for &id in &cells {
        let Some(node) = machine.get_mut(&id) else {
            continue;
        };
        node.assignments += 1;
        node.cells = cells.clone();
        if size == 0 {
            continue;
        }
        let Some(t) = node.memory.get_mut(resource) else {
            continue;
        };
        let take = t.free.min(size);
        t.reserved += take;
        t.free -= take;
        size -= take;
    }
}

/// kubelet `releaseMemory`.
pub(super) fn release(machine: &mut BTreeMap<u32, NumaState>, blocks: &[Block]) {
    for b in blocks {
        let mut size = b.size;
        for &id in &b.numa {
            let Some(node) = machine.get_mut(&id) else {
                continue;
            };
            node.assignments = node.assignments.saturating_sub(1);
            if node.assignments == 0 {
                node.cells = vec![id];
            }
            if size == 0 {
                continue;
            }
            let Some(t) = node.memory.get_mut(&b.resource) else {
                continue;
            };
            let give = t.reserved.min(size);
            t.reserved -= give;
            t.free += give;
            size -= give;
        }
    }
}

pub(super) fn blocks_of(mask: NumaMask, reqs: &Requests) -> Vec<Block> {
    reqs.iter()
        .map(|(name, &size)| Block {
            numa: mask.ids().collect(),
            resource: name.clone(),
            size,
        })
        .collect()
}

/// kubelet static policy `Allocate` for one container.
pub(super) fn allocate(
    mm: &mut MemoryManager,
    pod: &PodSpec,
    c: &ContainerSpec,
    hint: &TopologyHint,
) -> Result<(), AdmissionError> {
    if !qos::is_guaranteed(pod, mm.gates) || qos::skipped_by_gates(pod, mm.gates) {
        return Ok(());
    }
    let reqs = hints::container_requests(pod, c, mm.gates);
    if reqs.is_empty() {
        // No memory or hugepage request (a non-eligible container of a pod-level pod).
        return Ok(());
    }
    if let Some(blocks) = mm
        .container_blocks(&pod.uid, &c.name)
        .map(<[Block]>::to_vec)
    {
        update_reusable(mm, pod, c, &blocks);
        return Ok(());
    }
    let mask = choose_mask(mm, &pod.uid, &reqs, hint)?;
    let blocks = blocks_of(mask, &reqs);
    for (name, &size) in &reqs {
        let reuse = hints::reusable(&mm.reusable, &pod.uid, mask, name);
        mm_charge(mm, mask, name, size.saturating_sub(reuse));
    }
    update_reusable(mm, pod, c, &blocks);
    mm.state
        .containers
        .entry(pod.uid.clone())
        .or_default()
        .insert(c.name.clone(), blocks.clone());
    shrink_init_blocks(mm, pod, c, &blocks);
    Ok(())
}

fn mm_charge(mm: &mut MemoryManager, mask: NumaMask, name: &str, size: u64) {
    charge(&mut mm.state.machine, mask, name, size);
}

/// kubelet `updatePodReusableMemory`: one pod tracked at a time.
fn update_reusable(mm: &mut MemoryManager, pod: &PodSpec, c: &ContainerSpec, blocks: &[Block]) {
    mm.reusable.retain(|uid, _| *uid == pod.uid);
    let regular_init = pod
        .init_containers
        .iter()
        .find(|i| i.name == c.name)
        .is_some_and(|i| i.role == ContainerRole::Init);
    if regular_init {
        let pod_map = mm.reusable.entry(pod.uid.clone()).or_default();
        for b in blocks {
            let mask = NumaMask::from_ids(b.numa.iter().copied());
            let slot = pod_map
                .entry(mask)
                .or_default()
                .entry(b.resource.clone())
                .or_insert(0);
            if b.size > *slot {
                *slot = b.size;
            }
        }
        return;
    }
    for b in blocks {
        let mask = NumaMask::from_ids(b.numa.iter().copied());
        if let Some(slot) = mm
            .reusable
            .get_mut(&pod.uid)
            .and_then(|m| m.get_mut(&mask))
            .and_then(|m| m.get_mut(&b.resource))
        {
            *slot = slot.saturating_sub(b.size);
        }
    }
}

/// kubelet `updateInitContainersMemoryBlocks`: earlier regular init containers' blocks shrink by
/// what this container reused, so the pod's block sum equals what the machine state holds.
fn shrink_init_blocks(mm: &mut MemoryManager, pod: &PodSpec, c: &ContainerSpec, blocks: &[Block]) {
    let Some(pod_blocks) = mm.state.containers.get_mut(&pod.uid) else {
        return;
    };
    for cb in blocks {
        let mut size = cb.size;
        for init in &pod.init_containers {
            if init.name == c.name || size == 0 {
                break;
            }
            if init.role == ContainerRole::Sidecar {
                continue;
            }
            let Some(ib) = pod_blocks.get_mut(&init.name) else {
                continue;
            };
            for b in ib.iter_mut() {
                if b.size == 0
                    || b.resource != cb.resource
                    || NumaMask::from_ids(b.numa.iter().copied())
                        != NumaMask::from_ids(cb.numa.iter().copied())
                {
                    continue;
                }
                let take = b.size.min(size);
                b.size -= take;
                size -= take;
            }
        }
    }
}

/// kubelet static policy `RemoveContainer`.
pub(super) fn remove_container(mm: &mut MemoryManager, pod_uid: &str, container: &str) {
    if mm.gates.pod_level_resource_managers {
        if let Some(pod_blocks) = mm.state.pods.get(pod_uid).cloned() {
            delete_entry(mm, pod_uid, container);
            if !mm.state.containers.contains_key(pod_uid) {
                release(&mut mm.state.machine, &pod_blocks);
                mm.state.pods.remove(pod_uid);
            }
            return;
        }
    }
    let Some(blocks) = mm
        .container_blocks(pod_uid, container)
        .map(<[Block]>::to_vec)
    else {
        return;
    };
    delete_entry(mm, pod_uid, container);
    release(&mut mm.state.machine, &blocks);
}

fn delete_entry(mm: &mut MemoryManager, pod_uid: &str, container: &str) {
    if let Some(m) = mm.state.containers.get_mut(pod_uid) {
        m.remove(container);
        if m.is_empty() {
            mm.state.containers.remove(pod_uid);
        }
    }
}

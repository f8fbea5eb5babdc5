//! Requested memory per container / pod and the NUMA hints for it (kubelet `calculateHints`,
//! `regenerateHints`, `getPodRequestedResources`, `getContainerRequestedResources`).

use std::collections::BTreeMap;

use super::{hugepage_resource_name, qos, Block, NumaState, Reusable, MEMORY};
use crate::placement::config::FeatureGates;
use crate::placement::topology_manager::{
    fewest_nodes, iterate_masks, Budget, Exhausted, HintFamily, HintSet, Upward,
};
use crate::placement::{
    ContainerRole, ContainerSpec, HintSets, NumaMask, PodSpec, ResourceHints, ResourceList,
    TopologyHint,
};

/// Resource name → bytes.
pub(super) type Requests = BTreeMap<String, u64>;

fn list_requests(l: &ResourceList, skip_zero: bool) -> Requests {
    let mut out = Requests::new();
    if let Some(m) = l.memory {
        out.insert(MEMORY.to_string(), m);
    }
    for (&size, &bytes) in &l.hugepages {
        out.insert(hugepage_resource_name(size), bytes);
    }
    if skip_zero {
        out.retain(|_, v| *v > 0);
    }
    out
}

/// A container's memory and hugepage requests; empty for a non-eligible container of a PLRM pod.
pub(super) fn container_requests(
    pod: &PodSpec,
    c: &ContainerSpec,
    gates: FeatureGates,
) -> Requests {
    if qos::plrm(pod, gates) && !qos::container_equivalent_guaranteed(c) {
        return Requests::new();
    }
    list_requests(&c.resources.requests, false)
}

/// The pod total: `spec.resources` requests with PLRM, else the init/sidecar/app formula.
pub(super) fn pod_requests(pod: &PodSpec, gates: FeatureGates) -> Requests {
    if qos::plrm(pod, gates) {
        let empty = ResourceList::default();
        let reqs = pod.resources.as_ref().map_or(&empty, |r| &r.requests);
        return list_requests(reqs, true);
    }
    let mut init_max = Requests::new();
    let mut sidecars = Requests::new();
    for c in &pod.init_containers {
        for (name, qty) in container_requests(pod, c, gates) {
            let max = init_max.entry(name.clone()).or_insert(0);
            if c.role == ContainerRole::Sidecar {
                *sidecars.entry(name).or_insert(0) += qty;
            } else {
                let with = sidecars.get(&name).copied().unwrap_or(0) + qty;
                if with > *max {
                    *max = with;
                }
            }
        }
    }
    let mut apps = Requests::new();
    for c in &pod.containers {
        for (name, qty) in container_requests(pod, c, gates) {
            *apps.entry(name).or_insert(0) += qty;
        }
    }
    apps.into_iter()
        .map(|(name, qty)| {
            let long = qty + sidecars.get(&name).copied().unwrap_or(0);
            let total = long.max(init_max.get(&name).copied().unwrap_or(0));
            (name, total)
        })
        .collect()
}

/// kubelet `regenerateHints`: one preferred hint per stored block; no preference on mismatch.
pub(super) fn regenerate(blocks: &[Block], reqs: &Requests) -> ResourceHints {
    let mut hints: BTreeMap<String, Vec<TopologyHint>> =
        reqs.keys().map(|k| (k.clone(), Vec::new())).collect();
    if blocks.len() != reqs.len() {
        return ResourceHints::new();
    }
    for b in blocks {
        match reqs.get(&b.resource) {
            Some(&size) if size == b.size => {}
            _ => return ResourceHints::new(),
        }
        if let Some(list) = hints.get_mut(&b.resource) {
            list.push(TopologyHint {
                affinity: Some(NumaMask::from_ids(b.numa.iter().copied())),
                preferred: true,
            });
        }
    }
    hints.into_iter().map(|(k, v)| (k, Some(v))).collect()
}

/// Reusable bytes of finished regular init containers of this pod on exactly this mask.
pub(super) fn reusable(reusable: &Reusable, pod_uid: &str, mask: NumaMask, resource: &str) -> u64 {
    reusable
        .get(pod_uid)
        .and_then(|m| m.get(&mask))
        .and_then(|m| m.get(resource))
        .copied()
        .unwrap_or(0)
}

/// kubelet `calculateHints` as a plain list per resource (same list for every resource),
/// enumerating all 2^N masks: the reference `calculate_family` is tested against, and the
/// spelled-out `HintProvider` lists.
pub(super) fn calculate_lists(
    machine: &BTreeMap<u32, NumaState>,
    reuse: &Reusable,
    pod_uid: &str,
    reqs: &Requests,
) -> BTreeMap<String, Vec<TopologyHint>> {
    let ids: Vec<u32> = machine.keys().copied().collect();
    let mut min_size = ids.len() as u32;
    let mut masks = Vec::new();
    for mask in iterate_masks(&ids) {
        let sum = |f: fn(&super::MemoryTable) -> u64, name: &str| -> u64 {
            mask.ids()
                .filter_map(|id| machine.get(&id)?.memory.get(name).map(f))
                .sum()
        };
        if reqs
            .iter()
            .any(|(name, &req)| sum(|t| t.allocatable, name) < req)
        {
            continue;
        }
        min_size = min_size.min(mask.count());
        if !group_allows(machine, mask) {
            continue;
        }
        if reqs
            .iter()
            .any(|(name, &req)| sum(|t| t.free, name) + reusable(reuse, pod_uid, mask, name) < req)
        {
            continue;
        }
        masks.push(mask);
    }
    let mut out = BTreeMap::new();
    if masks.is_empty() {
        return out;
    }
    for name in reqs.keys() {
        let list = masks
            .iter()
            .map(|&m| TopologyHint {
                affinity: Some(m),
                preferred: m.count() == min_size,
            })
            .collect();
        out.insert(name.clone(), list);
    }
    out
}

/// `calculateHints` as its rule. A mask is a hint iff it holds every request in allocatable
/// memory, passes the group rule and holds it in free (plus reusable) memory. Multi-node masks
/// that pass the group rule are the subsets of unused nodes (upward-closed: the `Upward` part)
/// and existing groups; with single nodes, groups and the masks this pod's init containers left
/// reusable memory on checked one by one, that is every hint. Preferred iff as few nodes as the
/// narrowest mask whose allocatable memory could hold the requests. `None`: no hint at all
/// (kubelet then returns no lists at all, which the merge reads as "no preference").
pub(super) fn calculate_family(
    machine: &BTreeMap<u32, NumaState>,
    reuse: &Reusable,
    pod_uid: &str,
    reqs: &Requests,
    budget: &Budget,
) -> Result<Option<HintFamily>, Exhausted> {
    if reqs.is_empty() {
        return Ok(None);
    }
    let ids: Vec<u32> = machine.keys().copied().filter(|&i| i < 64).collect();
    let universe = NumaMask::from_ids(ids.iter().copied());
    let per_node = |f: fn(&super::MemoryTable) -> u64, name: &str| {
        let mut a = [0u64; 64];
        for &id in &ids {
            a[id as usize] = machine[&id].memory.get(name).map_or(0, f);
        }
        a
    };
    let allocatable = Upward {
        within: universe,
        required: NumaMask::default(),
        min_count: 1,
        amounts: reqs
            .keys()
            .map(|n| per_node(|t| t.allocatable, n))
            .collect(),
        need: reqs.values().copied().collect(),
    };
    let min_size = fewest_nodes(&ids, &allocatable, budget)?.unwrap_or(machine.len() as u32);
    let unused = NumaMask::from_ids(
        ids.iter()
            .copied()
            .filter(|id| machine[id].assignments == 0),
    );
    let mut amounts = allocatable.amounts.clone();
    amounts.extend(reqs.keys().map(|n| per_node(|t| t.free, n)));
    let mut need = allocatable.need.clone();
    need.extend(reqs.values().copied());
    let up = Upward {
        within: unused,
        required: NumaMask::default(),
        min_count: 2,
        amounts,
        need,
    };
    let mut candidates: Vec<NumaMask> = ids.iter().map(|&id| NumaMask::from_ids([id])).collect();
    candidates.extend(
        machine
            .values()
            .filter(|n| n.cells.len() > 1)
            .map(|n| NumaMask::from_ids(n.cells.iter().copied())),
    );
    if let Some(masks) = reuse.get(pod_uid) {
        candidates.extend(masks.keys().copied());
    }
    let mut listed: Vec<NumaMask> = candidates
        .into_iter()
        .filter(|&m| !m.is_empty() && m.and(universe) == m)
        .filter(|&m| is_hint(machine, reuse, pod_uid, reqs, m))
        .collect();
    listed.sort_unstable();
    listed.dedup();
    let family = HintFamily {
        nodes: ids,
        up: Some(up),
        listed,
        preferred_size: min_size,
        sockets: None,
    };
    Ok((!family.is_empty()).then_some(family))
}

/// One mask against `calculateHints`' conditions.
fn is_hint(
    machine: &BTreeMap<u32, NumaState>,
    reuse: &Reusable,
    pod_uid: &str,
    reqs: &Requests,
    mask: NumaMask,
) -> bool {
    let sum = |f: fn(&super::MemoryTable) -> u64, name: &str| -> u64 {
        mask.ids()
            .filter_map(|id| machine.get(&id)?.memory.get(name).map(f))
            .sum()
    };
    reqs.iter()
        .all(|(name, &req)| sum(|t| t.allocatable, name) >= req)
        && group_allows(machine, mask)
        && reqs
            .iter()
            .all(|(name, &req)| sum(|t| t.free, name) + reusable(reuse, pod_uid, mask, name) >= req)
}

/// `calculate_family` as provider hint sets: the same family for every resource.
pub(super) fn calculate_sets(
    machine: &BTreeMap<u32, NumaState>,
    reuse: &Reusable,
    pod_uid: &str,
    reqs: &Requests,
    budget: &Budget,
) -> Result<HintSets, Exhausted> {
    let family = calculate_family(machine, reuse, pod_uid, reqs, budget)?;
    #[cfg(test)]
    if machine.len() <= 8 {
        let want = calculate_lists(machine, reuse, pod_uid, reqs);
        let got: BTreeMap<String, Vec<TopologyHint>> = family
            .iter()
            .flat_map(|f| reqs.keys().map(|k| (k.clone(), f.members())))
            .collect();
        assert_eq!(got, want, "memory hint family vs enumeration");
        if let Some(f) = &family {
            let list = &want[want.keys().next().expect("a resource")];
            for within in [NumaMask::default(), NumaMask(1), NumaMask(0b110)] {
                let inside: Vec<TopologyHint> = list
                    .iter()
                    .filter(|h| h.affinity.is_some_and(|m| m.and(within) == within))
                    .copied()
                    .collect();
                let got = crate::placement::topology_manager::TopologyManager::best_member(
                    f, within, budget,
                )?;
                assert_eq!(got, find_best(&inside), "memory best hint vs enumeration");
            }
        }
    }
    let Some(family) = family else {
        return Ok(HintSets::new());
    };
    Ok(reqs
        .keys()
        .map(|k| (k.clone(), Some(HintSet::Family(family.clone()))))
        .collect())
}

/// `calculate_lists` as provider hints.
pub(super) fn calculate(
    machine: &BTreeMap<u32, NumaState>,
    reuse: &Reusable,
    pod_uid: &str,
    reqs: &Requests,
) -> ResourceHints {
    calculate_lists(machine, reuse, pod_uid, reqs)
        .into_iter()
        .map(|(k, v)| (k, Some(v)))
        .collect()
}

/// §3.4 steps 3–4: single-node masks may not use a node of a multi-node group; multi-node masks
/// may not use a used node that is single or in another group.
fn group_allows(machine: &BTreeMap<u32, NumaState>, mask: NumaMask) -> bool {
    let bits: Vec<u32> = mask.ids().collect();
    if bits.len() == 1 {
        return machine.get(&bits[0]).is_none_or(|n| n.cells.len() <= 1);
    }
    !violates_group(machine, mask)
}

/// kubelet `isAffinityViolatingNUMAAllocations`.
pub(super) fn violates_group(machine: &BTreeMap<u32, NumaState>, mask: NumaMask) -> bool {
    let bits: Vec<u32> = mask.ids().collect();
    if bits.len() == 1 {
        return false;
    }
    bits.iter().any(|id| {
        machine.get(id).is_some_and(|n| {
            if n.assignments == 0 {
                return false;
            }
            let mut cells = n.cells.clone();
            cells.sort_unstable();
            n.cells.len() == 1 || cells != bits
        })
    })
}

/// kubelet `findBestHint`: preferred first, then narrower; the first wins ties.
#[cfg(test)]
pub(super) fn find_best(hints: &[TopologyHint]) -> Option<TopologyHint> {
    let mut best: Option<TopologyHint> = None;
    for &h in hints {
        let Some(b) = best else {
            best = Some(h);
            continue;
        };
        let (Some(hm), Some(bm)) = (h.affinity, b.affinity) else {
            continue;
        };
        if (h.preferred && !b.preferred)
            || (h.preferred == b.preferred
                && crate::placement::topology_manager::is_narrower_than(hm, bm))
        {
            best = Some(h);
        }
    }
    best
}

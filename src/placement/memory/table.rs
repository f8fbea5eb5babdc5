//! The default machine state: per NUMA node, memory and every hugepage size, minus
//! `reservedMemory` (kubelet `getDefaultMachineState` and the reserved-memory checks).

use std::collections::BTreeMap;

use super::{
    hugepage_resource_name, Block, MemoryError, MemoryState, MemoryTable, NumaState, MEMORY,
};
use crate::placement::config::FeatureGates;
use crate::placement::config::ReservedMemory;
use crate::topology::Topology;

pub(super) fn default_machine_state(
    topology: &Topology,
    reserved: &[ReservedMemory],
) -> Result<BTreeMap<u32, NumaState>, MemoryError> {
    let total_reserved: u64 = reserved.iter().map(|r| r.memory).sum();
    if total_reserved == 0 {
        return Err(MemoryError::NoSystemReserved);
    }
    let mut by_node: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    for r in reserved {
        if !topology.numa.iter().any(|n| n.id == r.numa_node) {
            return Err(MemoryError::UnknownNumaNode(r.numa_node));
        }
        let entry = by_node.entry(r.numa_node).or_default();
        *entry.entry(MEMORY.to_string()).or_default() += r.memory;
        for (&size, &bytes) in &r.hugepages {
            *entry.entry(hugepage_resource_name(size)).or_default() += bytes;
        }
    }
    let mut machine = BTreeMap::new();
    for node in &topology.numa {
        let reserved_of = |name: &str| {
            by_node
                .get(&node.id)
                .and_then(|m| m.get(name))
                .copied()
                .unwrap_or(0)
        };
        let mut memory = BTreeMap::new();
        let mut hugepages_total = 0u64;
        for (&size, &total) in &node.hugepages {
            let name = hugepage_resource_name(size);
            let sys = reserved_of(&name);
            let allocatable = checked(node.id, &name, total, sys)?;
            memory.insert(name, table(total, sys, allocatable));
            hugepages_total += total;
        }
        let sys = reserved_of(MEMORY);
        let allocatable = checked(
            node.id,
            MEMORY,
            node.memory,
            sys.saturating_add(hugepages_total),
        )?;
        memory.insert(MEMORY.to_string(), table(node.memory, sys, allocatable));
        machine.insert(
            node.id,
            NumaState {
                assignments: 0,
                cells: vec![node.id],
                memory,
            },
        );
    }
    Ok(machine)
}

fn table(total: u64, system_reserved: u64, allocatable: u64) -> MemoryTable {
    MemoryTable {
        total,
        system_reserved,
        allocatable,
        reserved: 0,
        free: allocatable,
    }
}

fn checked(node: u32, resource: &str, total: u64, reserved: u64) -> Result<u64, MemoryError> {
    total
        .checked_sub(reserved)
        .ok_or_else(|| MemoryError::ReservedExceedsTotal {
            node,
            resource: resource.to_string(),
            reserved,
            total,
        })
}

/// kubelet `validateState`: recharge the default machine with every stored block (pod blocks for
/// PLRM pods) and compare with the stored machine state.
pub(super) fn validate_state(
    default: &BTreeMap<u32, NumaState>,
    state: &MemoryState,
    gates: FeatureGates,
) -> Result<(), MemoryError> {
    let mut expected = default.clone();
    for (pod, containers) in &state.containers {
        if gates.pod_level_resource_managers {
            if let Some(blocks) = state.pods.get(pod).filter(|b| !b.is_empty()) {
                charge_expected(&mut expected, blocks, pod, "")?;
                continue;
            }
        }
        for (name, blocks) in containers {
            charge_expected(&mut expected, blocks, pod, name)?;
        }
    }
    if machines_equal(&state.machine, &expected) {
        Ok(())
    } else {
        Err(MemoryError::MachineStateMismatch)
    }
}

/// Tolerance of memory-size drift (numa-shim's, not the kubelet's): a state that fails
/// [`validate_state`] against today's machine is still good when it is consistent with the
/// tables it was taken on (same check, against those tables emptied) and every stored block
/// fits today's machine in full. Returns today's tables charged with the blocks.
pub(super) fn recharge_resized(
    default: &BTreeMap<u32, NumaState>,
    state: &MemoryState,
    gates: FeatureGates,
) -> Result<BTreeMap<u32, NumaState>, MemoryError> {
    let then: BTreeMap<u32, NumaState> = state
        .machine
        .iter()
        .map(|(&id, n)| {
            let memory = n
                .memory
                .iter()
                .map(|(name, t)| {
                    (
                        name.clone(),
                        table(t.total, t.system_reserved, t.allocatable),
                    )
                })
                .collect();
            let empty = NumaState {
                assignments: 0,
                cells: vec![id],
                memory,
            };
            (id, empty)
        })
        .collect();
    validate_state(&then, state, gates)?;
    if then.keys().ne(default.keys()) {
        return Err(MemoryError::MachineStateMismatch);
    }
    let mut now = default.clone();
    for (pod, blocks) in charged_blocks(state, gates) {
        for b in blocks {
            let before: u64 = free_of(&now, b);
            charge_expected(&mut now, std::slice::from_ref(b), pod, "")?;
            if before - free_of(&now, b) != b.size {
                return Err(MemoryError::MachineStateMismatch);
            }
        }
    }
    Ok(now)
}

/// Every block the machine state is charged with, by pod: pod blocks for PLRM pods, else the
/// containers' blocks (the order [`validate_state`] charges them in).
fn charged_blocks(state: &MemoryState, gates: FeatureGates) -> Vec<(&str, &[Block])> {
    let mut out = Vec::new();
    for (pod, containers) in &state.containers {
        if gates.pod_level_resource_managers {
            if let Some(blocks) = state.pods.get(pod).filter(|b| !b.is_empty()) {
                out.push((pod.as_str(), blocks.as_slice()));
                continue;
            }
        }
        for blocks in containers.values() {
            out.push((pod.as_str(), blocks.as_slice()));
        }
    }
    out
}

/// Free bytes of the block's resource over the block's nodes.
fn free_of(machine: &BTreeMap<u32, NumaState>, b: &Block) -> u64 {
    b.numa
        .iter()
        .filter_map(|id| machine.get(id)?.memory.get(&b.resource).map(|t| t.free))
        .sum()
}

fn charge_expected(
    machine: &mut BTreeMap<u32, NumaState>,
    blocks: &[Block],
    pod: &str,
    container: &str,
) -> Result<(), MemoryError> {
    for b in blocks {
        let mut size = b.size;
        for id in &b.numa {
            let node = machine
                .get_mut(id)
                .ok_or_else(|| MemoryError::UnknownAssignmentNode {
                    pod: pod.to_string(),
                    container: container.to_string(),
                })?;
            node.assignments += 1;
            node.cells = b.numa.clone();
            let t = node.memory.get_mut(&b.resource).ok_or_else(|| {
                MemoryError::UnknownAssignmentResource {
                    pod: pod.to_string(),
                    container: container.to_string(),
                }
            })?;
            let take = t.free.min(size);
            t.reserved += take;
            t.free -= take;
            size -= take;
        }
    }
    Ok(())
}

/// kubelet `areMachineStatesEqual`: same counters, groups and sizes; free/reserved compared as
/// sums over the node's group.
fn machines_equal(a: &BTreeMap<u32, NumaState>, b: &BTreeMap<u32, NumaState>) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let sorted = |c: &[u32]| {
        let mut v = c.to_vec();
        v.sort_unstable();
        v
    };
    a.iter().all(|(id, na)| {
        let Some(nb) = b.get(id) else { return false };
        if na.assignments != nb.assignments
            || sorted(&na.cells) != sorted(&nb.cells)
            || na.memory.len() != nb.memory.len()
        {
            return false;
        }
        na.memory.iter().all(|(name, ta)| {
            let Some(tb) = nb.memory.get(name) else {
                return false;
            };
            if (ta.total, ta.system_reserved, ta.allocatable)
                != (tb.total, tb.system_reserved, tb.allocatable)
            {
                return false;
            }
            let sum = |m: &BTreeMap<u32, NumaState>, f: fn(&MemoryTable) -> u64| -> u64 {
                na.cells
                    .iter()
                    .filter_map(|c| m.get(c)?.memory.get(name).map(f))
                    .sum()
            };
            sum(a, |t| t.free) == sum(b, |t| t.free)
                && sum(a, |t| t.reserved) == sum(b, |t| t.reserved)
        })
    })
}

//! The default machine state: per NUMA node, memory and every hugepage size, minus
//! `reservedMemory` (kubelet `getDefaultMachineState` and the reserved-memory checks).

use std::collections::BTreeMap;

use super::{hugepage_resource_name, MemoryError, MemoryTable, NumaState, MEMORY};
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

//! Memory Manager settings: `reservedMemory` (the structural checks of the kubelet's config
//! validation, then the Static policy's rule that the per-NUMA reservations add up, type by type,
//! to `kubeReserved + systemReserved + evictionHard` memory) and the hard-eviction memory
//! threshold that rule needs.

use std::collections::{BTreeMap, BTreeSet};

use super::cpu::reservation_map;
use super::{
    numa_node_ids, parse_quantity, ConfigWarning, KubeletConfigError, KubeletConfiguration,
};
use crate::k8s::pod::hugepage_size;
use crate::placement::config::{MemoryPolicy, ReservedMemory};
use crate::quantity::Quantity;
use crate::topology::Topology;

/// The kubelet's default `evictionHard` memory threshold on Linux.
const DEFAULT_MEMORY_AVAILABLE: &str = "100Mi";

impl KubeletConfiguration {
    pub(super) fn reserved_memory(
        &self,
        policy: MemoryPolicy,
        machine: &Topology,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<Vec<ReservedMemory>, KubeletConfigError> {
        let entries = self.reservation_entries()?;
        if policy == MemoryPolicy::None {
            if !entries.is_empty() {
                warnings.push(ConfigWarning {
                    field: "reservedMemory".into(),
                    message: "ignored: only the Static memory manager policy uses it".into(),
                });
            }
            return Ok(Vec::new());
        }
        let nodes = numa_node_ids(machine);
        let mut totals: BTreeMap<&str, Quantity> = BTreeMap::new();
        for (i, numa, resource, q) in &entries {
            if u32::try_from(*numa).map_or(true, |n| !nodes.contains(&n)) {
                return Err(KubeletConfigError::ReservedMemoryNode {
                    field: format!("reservedMemory[{i}].numaNode"),
                    numa: *numa,
                });
            }
            let t = totals.entry(resource.as_str()).or_default();
            *t = t.saturating_add(*q);
        }
        let expected_memory = self.node_allocatable_memory(machine)?;
        let mut types: BTreeSet<&str> = totals.keys().copied().collect();
        if !expected_memory.is_zero() {
            types.insert("memory");
        }
        for resource in types {
            // Only memory can be reserved through kubeReserved/systemReserved/evictionHard.
            let expected = if resource == "memory" {
                expected_memory
            } else {
                Quantity::default()
            };
            let reserved = totals.get(resource).copied().unwrap_or_default();
            if reserved != expected {
                return Err(KubeletConfigError::ReservedMemoryMismatch {
                    resource: resource.to_string(),
                    reserved: format_bytes(reserved),
                    expected: format_bytes(expected),
                });
            }
        }
        if totals.get("memory").is_none_or(|q| q.is_zero()) {
            return Err(KubeletConfigError::NoReservedMemory);
        }
        Ok(group_by_node(&entries))
    }

    /// Every `reservedMemory` limit as (entry index, NUMA node, resource, quantity), checked the
    /// way the kubelet's config validation checks them.
    fn reservation_entries(
        &self,
    ) -> Result<Vec<(usize, i32, String, Quantity)>, KubeletConfigError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, entry) in self.reserved_memory.iter().enumerate() {
            for (resource, value) in &entry.limits {
                let field = format!("reservedMemory[{i}].limits[{resource}]");
                if resource != "memory" && hugepage_size(resource).is_none() {
                    return Err(KubeletConfigError::ReservedMemoryType {
                        field,
                        resource: resource.clone(),
                    });
                }
                let q = parse_quantity(field.clone(), value)?;
                if q.is_zero() {
                    return Err(KubeletConfigError::ReservedMemoryZero { field });
                }
                if !seen.insert((entry.numa_node, resource.as_str())) {
                    return Err(KubeletConfigError::ReservedMemoryDuplicate {
                        field,
                        numa: entry.numa_node,
                        resource: resource.clone(),
                    });
                }
                out.push((i, entry.numa_node, resource.clone(), q));
            }
        }
        Ok(out)
    }

    /// `kubeReserved.memory + systemReserved.memory + evictionHard[memory.available]`.
    pub(super) fn node_allocatable_memory(
        &self,
        machine: &Topology,
    ) -> Result<Quantity, KubeletConfigError> {
        let kube = reservation_map("kubeReserved", &self.kube_reserved)?;
        let system = reservation_map("systemReserved", &self.system_reserved)?;
        let eviction = self.eviction_memory(machine)?;
        Ok([kube.get("memory"), system.get("memory")]
            .into_iter()
            .flatten()
            .fold(eviction, |acc, q| acc.saturating_add(*q)))
    }

    /// The hard-eviction memory threshold in bytes, with the kubelet's defaulting: absent
    /// `evictionHard` → 100Mi; `evictionHard` without `memory.available` → 0, unless
    /// `mergeDefaultEvictionSettings` keeps the default.
    pub(super) fn eviction_memory(
        &self,
        machine: &Topology,
    ) -> Result<Quantity, KubeletConfigError> {
        let value = match &self.eviction_hard {
            None => DEFAULT_MEMORY_AVAILABLE,
            Some(map) => match map.get("memory.available") {
                Some(v) => v.as_str(),
                None if self.merge_default_eviction_settings == Some(true) => {
                    DEFAULT_MEMORY_AVAILABLE
                }
                None => return Ok(Quantity::default()),
            },
        };
        let err = |reason| KubeletConfigError::Eviction {
            value: value.to_string(),
            reason,
        };
        let Some(pct) = value.trim().strip_suffix('%') else {
            let q = Quantity::parse(value).map_err(|_| err("not a quantity or a percentage"))?;
            if q.is_negative() || q.is_zero() {
                return Err(err("eviction threshold must be positive"));
            }
            return Ok(q);
        };
        if value == "0%" || value == "100%" {
            return Ok(Quantity::default());
        }
        // kubelet: strconv.ParseFloat(.., 32) then float32(v) / 100.
        let fraction = pct
            .parse::<f32>()
            .map_err(|_| err("invalid number in percentage"))?
            / 100.0;
        if fraction < 0.0 {
            return Err(err("eviction percentage threshold must be >= 0%"));
        }
        if fraction > 1.0 {
            return Err(err("eviction percentage threshold must be <= 100%"));
        }
        let capacity: u64 = machine.numa.iter().map(|n| n.memory).sum();
        if capacity == 0 {
            return Err(err(
                "a percentage needs the machine's memory size (numa[].memory of the topology)",
            ));
        }
        Ok(Quantity::from_value(
            (capacity as f64 * f64::from(fraction)) as i64,
        ))
    }
}

/// One `ReservedMemory` per NUMA node, ascending.
fn group_by_node(entries: &[(usize, i32, String, Quantity)]) -> Vec<ReservedMemory> {
    let mut by_node: BTreeMap<u32, ReservedMemory> = BTreeMap::new();
    for (_, numa, resource, q) in entries {
        let Ok(numa) = u32::try_from(*numa) else {
            continue;
        };
        let bytes = u64::try_from(q.value()).unwrap_or(0);
        let slot = by_node.entry(numa).or_insert_with(|| ReservedMemory {
            numa_node: numa,
            ..ReservedMemory::default()
        });
        match hugepage_size(resource) {
            Some(size) => {
                slot.hugepages.insert(size, bytes);
            }
            None => slot.memory = bytes,
        }
    }
    by_node.into_values().collect()
}

/// Bytes in the largest binary unit that divides them exactly ("100Mi", "1Gi", "1500").
pub(super) fn format_bytes(q: Quantity) -> String {
    match u64::try_from(q.value()) {
        Ok(bytes) => crate::quantity::format_binary(bytes),
        Err(_) => q.value().to_string(),
    }
}

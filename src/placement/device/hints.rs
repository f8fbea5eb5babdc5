//! Device topology hints, as the kubelet's device manager generates them
//! (`generateDeviceTopologyHints`, `deviceHasTopologyAlignment`, `deviceNUMANodes`).

use std::collections::{BTreeMap, BTreeSet};

use super::Device;
use crate::placement::topology_manager::iterate_masks;
use crate::placement::{NumaMask, TopologyHint};

/// A resource's devices by id.
pub type ById<'a> = BTreeMap<&'a str, &'a Device>;

/// The NUMA nodes of a device's `TopologyInfo` as a mask (ids of 64 and above cannot be set).
pub fn device_mask(d: &Device) -> NumaMask {
    NumaMask::from_ids(d.numa_nodes.iter().copied())
}

/// `deviceHasTopologyAlignment`: some device of the resource names a NUMA node.
pub fn has_topology(devices: &[Device]) -> bool {
    devices.iter().any(|d| !d.numa_nodes.is_empty())
}

/// `deviceNUMANodes`: the machine's nodes that host a device of the resource, ascending; the
/// machine's nodes when none does (device nodes the machine does not have are dropped).
fn device_nodes(devices: &[Device], machine_nodes: &[u32]) -> Vec<u32> {
    let known: BTreeSet<u32> = machine_nodes.iter().copied().collect();
    let with: BTreeSet<u32> = devices
        .iter()
        .flat_map(|d| d.numa_nodes.iter().copied())
        .filter(|n| known.contains(n))
        .collect();
    if with.is_empty() {
        machine_nodes.to_vec()
    } else {
        with.into_iter().collect()
    }
}

/// `generateDeviceTopologyHints`: one hint per combination of device-bearing NUMA nodes that
/// holds every reusable device (with topology) and `request` devices among reusable and
/// available ones; preferred iff it has as few nodes as the smallest combination whose devices
/// (all of them, in use or not) could hold the request.
pub fn generate(
    devices: &[Device],
    machine_nodes: &[u32],
    available: &BTreeSet<String>,
    reusable: &BTreeSet<String>,
    request: u64,
) -> Vec<TopologyHint> {
    let by_id: ById<'_> = devices.iter().map(|d| (d.id.as_str(), d)).collect();
    let mask_of = |id: &String| by_id.get(id.as_str()).map(|d| device_mask(d));
    let nodes = device_nodes(devices, machine_nodes);
    let mut min_size = nodes.len() as u32;
    let mut hints = Vec::new();
    for mask in iterate_masks(&nodes) {
        let in_mask = devices
            .iter()
            .filter(|d| !device_mask(d).and(mask).is_empty())
            .count() as u64;
        if in_mask >= request && mask.count() < min_size {
            min_size = mask.count();
        }
        let mut matching = 0u64;
        let mut holds_reusable = true;
        for id in reusable {
            // A reusable device without topology is skipped; one off the mask rules it out.
            match by_id.get(id.as_str()) {
                Some(d) if d.numa_nodes.is_empty() => {}
                Some(d) if device_mask(d).and(mask).is_empty() => {
                    holds_reusable = false;
                    break;
                }
                Some(_) => matching += 1,
                None => {}
            }
        }
        if !holds_reusable {
            continue;
        }
        matching += available
            .iter()
            .filter_map(mask_of)
            .filter(|m| !m.and(mask).is_empty())
            .count() as u64;
        if matching < request {
            continue;
        }
        hints.push(TopologyHint {
            affinity: Some(mask),
            preferred: false,
        });
    }
    for h in &mut hints {
        h.preferred = h.affinity.is_some_and(|m| m.count() == min_size);
    }
    hints
}

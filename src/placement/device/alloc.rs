//! Which devices a container gets once the Topology Manager chose its hint: the kubelet's
//! `devicesToAllocate` and `filterByAffinity`, with a device plugin whose
//! `GetPreferredAllocation` answers [`preferred`].
//!
//! Where the kubelet's choice is not fixed by its own code (it walks Go sets), it depends on the
//! plugin's preference. numa-shim assumes this documented one, which the oracle's stub plugins
//! implement too: the devices that must be included, then the lowest ids (byte order) of the
//! rest. Reused devices of init containers are taken lowest ids first as well; the kubelet takes
//! them in Go map order (docs/fidelity.md).

use std::collections::BTreeSet;

use super::hints::{device_mask, has_topology, ById};
use super::Device;
use crate::placement::TopologyHint;

/// A set of device ids.
pub type Ids = BTreeSet<String>;

/// The stub plugin's `GetPreferredAllocation`: `must` first, then the lowest ids of `available`,
/// `size` in all.
pub fn preferred(available: &Ids, must: &Ids, size: usize) -> Ids {
    let mut out: Ids = must.clone();
    for id in available {
        if out.len() >= size {
            break;
        }
        out.insert(id.clone());
    }
    out
}

/// `filterByAffinity`: available devices on the hint's nodes, on other nodes, without topology.
/// Without a hint affinity or device topology every device counts as without topology.
pub fn filter_by_affinity(
    devices: &[Device],
    available: &Ids,
    hint: &TopologyHint,
) -> (Ids, Ids, Ids) {
    let (mut aligned, mut unaligned, mut none) = (Ids::new(), Ids::new(), Ids::new());
    let affinity = match hint.affinity {
        Some(m) if has_topology(devices) => m,
        _ => return (aligned, unaligned, available.clone()),
    };
    let by_id: ById<'_> = devices.iter().map(|d| (d.id.as_str(), d)).collect();
    for id in available {
        match by_id.get(id.as_str()) {
            Some(d) if !d.numa_nodes.is_empty() => {
                if device_mask(d).and(affinity).is_empty() {
                    unaligned.insert(id.clone());
                } else {
                    aligned.insert(id.clone());
                }
            }
            _ => {
                none.insert(id.clone());
            }
        }
    }
    (aligned, unaligned, none)
}

/// What `devicesToAllocate` starts from for one container and resource.
pub struct Ask<'a> {
    pub resource: &'a str,
    /// The container's request.
    pub required: u64,
    /// Devices the container already holds (a restart, or the kubelet allocated them).
    pub held: &'a Ids,
    /// Devices of the pod's init containers this container may take first.
    pub reusable: &'a Ids,
    /// Whether a plugin registered the resource (it has an entry among the allocatable ones).
    pub registered: bool,
    /// The resource's healthy devices.
    pub healthy: &'a Ids,
    /// Healthy devices not allocated to anyone (this pod's other containers included).
    pub available: &'a Ids,
    /// The resource's devices with their NUMA nodes.
    pub devices: &'a [Device],
    pub hint: &'a TopologyHint,
}

/// `devicesToAllocate`: the devices to add for the container (empty when it holds them all), or
/// the kubelet's error text.
pub fn devices_to_allocate(ask: &Ask<'_>) -> Result<Ids, String> {
    let required = usize::try_from(ask.required).unwrap_or(usize::MAX);
    if !ask.held.is_empty() && ask.held.len() != required {
        return Err(format!(
            "container changed request for resource {:?} from {} to {}",
            ask.resource,
            ask.held.len(),
            required
        ));
    }
    if !ask.registered {
        return Err(format!(
            "cannot allocate unregistered device {}",
            ask.resource
        ));
    }
    if ask.healthy.is_empty() {
        return Err(format!(
            "no healthy devices present; cannot allocate unhealthy devices {}",
            ask.resource
        ));
    }
    if !ask.held.is_subset(ask.healthy) {
        return Err(format!(
            "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {}",
            ask.resource
        ));
    }
    if required == ask.held.len() {
        return Ok(Ids::new());
    }
    let mut allocated = Ids::new();
    let take = |from: &Ids, allocated: &mut Ids| -> bool {
        for id in from {
            if allocated.len() == required {
                break;
            }
            allocated.insert(id.clone());
        }
        allocated.len() == required
    };
    if take(ask.reusable, &mut allocated) {
        return Ok(allocated);
    }
    let needed = required - allocated.len();
    let available: Ids = ask.available.difference(&allocated).cloned().collect();
    if available.len() < needed {
        return Err(format!(
            "requested number of devices unavailable for {}. Requested: {}, Available: {}",
            ask.resource,
            needed,
            available.len()
        ));
    }
    let (aligned, unaligned, none) = filter_by_affinity(ask.devices, &available, ask.hint);
    let fresh =
        |ids: &Ids, allocated: &Ids| -> Ids { ids.difference(allocated).cloned().collect() };
    if needed < aligned.len() {
        let offer: Ids = aligned.union(&allocated).cloned().collect();
        let pref = preferred(&offer, &allocated, required);
        let pick = fresh(&pref.intersection(&aligned).cloned().collect(), &allocated);
        if take(&pick, &mut allocated) || take(&fresh(&aligned, &allocated), &mut allocated) {
            return Ok(allocated);
        }
        return Err(short(required, &allocated));
    }
    if take(&aligned, &mut allocated) {
        return Ok(allocated);
    }
    let offer: Ids = available.union(&allocated).cloned().collect();
    let pref = preferred(&offer, &allocated, required);
    let pick = fresh(
        &pref.intersection(&available).cloned().collect(),
        &allocated,
    );
    if take(&pick, &mut allocated)
        || take(&fresh(&unaligned, &allocated), &mut allocated)
        || take(&fresh(&none, &allocated), &mut allocated)
    {
        return Ok(allocated);
    }
    Err(short(required, &allocated))
}

fn short(required: usize, allocated: &Ids) -> String {
    format!(
        "unexpectedly allocated less resources than required. Requested: {}, Got: {}",
        required,
        allocated.len()
    )
}

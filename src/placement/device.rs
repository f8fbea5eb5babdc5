//! Devices as the decision core sees them: what the kubelet's device manager can hand out
//! (device plugins' devices with their NUMA nodes) and what it already handed out, as plain data.
//! Filled by the shell from the kubelet's PodResources API; the hint provider that uses them
//! follows the kubelet's device manager (`devicemanager.GetTopologyHints`).

//!
//! The provider (`DeviceManager`, a [`crate::placement::HintProvider`]) lives in `manager`; how
//! many devices a container or pod asks for in `requests`; hint generation in `hints`; which
//! devices a container gets once the hint is chosen in `alloc`; DRA claims as one more hint input
//! in `claims`.

pub mod alloc;
pub mod claims;
pub mod hints;
pub mod manager;
pub mod requests;

pub use manager::{DeviceManager, Ledger, ResourceIds};

use std::collections::{BTreeMap, BTreeSet};

/// One device of a device plugin resource (`example.com/gpu`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Device {
    pub id: String,
    /// NUMA nodes of the device's `TopologyInfo`; empty: the plugin gave no topology.
    pub numa_nodes: Vec<u32>,
}

/// What the kubelet's device manager knows that matters to one pod's decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceFacts {
    /// Healthy allocatable devices per resource name (PodResources `GetAllocatableResources`).
    pub allocatable: BTreeMap<String, Vec<Device>>,
    /// Devices already allocated to this pod's containers: container name → resource → ids
    /// (PodResources `Get` of the pod).
    pub allocated: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Device ids held by other pods, per resource (PodResources `List`).
    pub in_use: BTreeMap<String, BTreeSet<String>>,
}

#[cfg(test)]
mod tests;

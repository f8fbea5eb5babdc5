//! Devices in the view: the kubelet's device plugin devices (its PodResources
//! `GetAllocatableResources` and `List`, which numa-shim already reads) on the NUMA nodes of
//! their topology, with the container holding each, and on each container the devices it holds.
//! Pure; the kubelet is asked by whoever builds the view (`serve`'s `/placement`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ContainerRef, PlacementView};
use crate::podresources::allocatable_devices;
use crate::proto::podresources::v1 as pr;

/// One device of a device plugin resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceView {
    /// The resource (`example.com/gpu`).
    pub resource: String,
    pub id: String,
    /// The container the kubelet handed it to; `None`: free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<ContainerRef>,
}

impl DeviceView {
    /// `resource=id`, as containers list their devices.
    pub fn name(&self) -> String {
        format!("{}={}", self.resource, self.id)
    }
}

/// Adds the kubelet's devices to `view`: each allocatable device (and each device a pod holds,
/// healthy or not) under the NUMA nodes of its topology, or in `devices_without_numa`; each
/// container of the view with the devices the kubelet lists for it.
pub fn add_devices(
    view: &mut PlacementView,
    allocatable: &pr::AllocatableResourcesResponse,
    list: &pr::ListPodResourcesResponse,
) {
    let mut holders: BTreeMap<(String, String), ContainerRef> = BTreeMap::new();
    let mut held: Vec<pr::ContainerDevices> = Vec::new();
    let mut by_container: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for pod in &list.pod_resources {
        let key = format!("{}/{}", pod.namespace, pod.name);
        for c in &pod.containers {
            for (resource, devices) in allocatable_devices(&c.devices) {
                for d in devices {
                    let holder = ContainerRef {
                        pod: key.clone(),
                        container: c.name.clone(),
                    };
                    by_container
                        .entry((key.clone(), c.name.clone()))
                        .or_default()
                        .push(format!("{resource}={}", d.id));
                    holders.insert((resource.clone(), d.id.clone()), holder);
                }
            }
            held.extend(c.devices.iter().cloned());
        }
    }
    let mut all: Vec<pr::ContainerDevices> = allocatable.devices.clone();
    all.extend(held);
    for (resource, devices) in allocatable_devices(&all) {
        for d in devices {
            let view_of = DeviceView {
                resource: resource.clone(),
                id: d.id.clone(),
                holder: holders.get(&(resource.clone(), d.id.clone())).cloned(),
            };
            if d.numa_nodes.is_empty() {
                view.devices_without_numa.push(view_of);
                continue;
            }
            for node in &d.numa_nodes {
                if let Some(n) = view.numa_nodes.iter_mut().find(|n| n.id == *node) {
                    n.devices.push(view_of.clone());
                } else {
                    // A node numa-shim's topology lacks: shown rather than lost.
                    view.devices_without_numa.push(view_of.clone());
                }
            }
        }
    }
    for pod in &mut view.pods {
        let key = format!("{}/{}", pod.namespace, pod.name);
        for c in &mut pod.containers {
            if let Some(devices) = by_container.get(&(key.clone(), c.name.clone())) {
                c.devices.clone_from(devices);
            }
        }
    }
}

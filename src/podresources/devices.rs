//! The device manager's facts for one pod's decision ([`DeviceFacts`]), read from the kubelet's
//! own PodResources answers: `GetAllocatableResources` (the healthy devices per resource and
//! their NUMA nodes) and `List` (the devices the kubelet's device manager handed to this pod's
//! containers, and the ids every other pod holds). Pure mapping here; the calls are
//! [`KubeletSource::device_facts`](super::KubeletSource::device_facts).
//!
//! The kubelet lists a device once per NUMA node of its topology (one `ContainerDevices` with
//! one id and one node each) and a device without topology once without one; both are folded
//! back into one [`Device`] per id (`numa_nodes` sorted, empty: no topology).

use std::collections::{BTreeMap, BTreeSet};

use crate::placement::device::{Device, DeviceFacts};
use crate::proto::podresources::v1 as pr;

/// resource → id → NUMA nodes, from any list of `ContainerDevices`.
fn fold(devices: &[pr::ContainerDevices]) -> BTreeMap<String, BTreeMap<String, BTreeSet<u32>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<u32>>> = BTreeMap::new();
    for d in devices {
        let nodes: Vec<u32> = d
            .topology
            .iter()
            .flat_map(|t| &t.nodes)
            .filter_map(|n| u32::try_from(n.id).ok())
            .collect();
        let ids = out.entry(d.resource_name.clone()).or_default();
        for id in &d.device_ids {
            ids.entry(id.clone())
                .or_default()
                .extend(nodes.iter().copied());
        }
    }
    out
}

/// The devices of a `GetAllocatableResources` answer per resource, one per id, ids ascending.
pub fn allocatable_devices(devices: &[pr::ContainerDevices]) -> BTreeMap<String, Vec<Device>> {
    fold(devices)
        .into_iter()
        .map(|(resource, ids)| {
            let devices = ids
                .into_iter()
                .map(|(id, nodes)| Device {
                    id,
                    numa_nodes: nodes.into_iter().collect(),
                })
                .collect();
            (resource, devices)
        })
        .collect()
}

/// resource → ids of the devices in `devices`, ids ascending, each once.
fn ids_of(devices: &[pr::ContainerDevices]) -> BTreeMap<String, Vec<String>> {
    fold(devices)
        .into_iter()
        .map(|(resource, ids)| (resource, ids.into_keys().collect()))
        .collect()
}

/// The facts for pod `namespace`/`name` from the kubelet's allocatable devices and its `List`:
/// the pod's containers' devices (containers without devices left out) and every other pod's
/// device ids.
pub fn device_facts(
    allocatable: &pr::AllocatableResourcesResponse,
    list: &pr::ListPodResourcesResponse,
    namespace: &str,
    name: &str,
) -> DeviceFacts {
    let mut facts = DeviceFacts {
        allocatable: allocatable_devices(&allocatable.devices),
        ..DeviceFacts::default()
    };
    for pod in &list.pod_resources {
        let this = pod.namespace == namespace && pod.name == name;
        for c in &pod.containers {
            let ids = ids_of(&c.devices);
            if ids.is_empty() {
                continue;
            }
            if this {
                facts
                    .allocated
                    .entry(c.name.clone())
                    .or_default()
                    .extend(ids);
            } else {
                for (resource, ids) in ids {
                    facts.in_use.entry(resource).or_default().extend(ids);
                }
            }
        }
    }
    facts
}

/// Puts the true NUMA nodes back on fronted devices the kubelet lists without topology (numa-shim's
/// device plugin front hides them from the kubelet; docs/devices.md, "The device plugin front"):
/// every `ContainerDevices` of a fronted resource is listed again the kubelet's way, one entry per
/// device and NUMA node (one entry without topology for a device without nodes). Entries of other
/// resources, and ids the front does not know, are kept as they are.
pub(crate) fn overlay_topology(
    devices: &mut Vec<pr::ContainerDevices>,
    topology: &crate::lifecycle::devices::FrontedTopology,
) {
    if !devices
        .iter()
        .any(|d| topology.is_fronted(&d.resource_name))
    {
        return;
    }
    let mut out = Vec::with_capacity(devices.len());
    for d in devices.drain(..) {
        if !topology.is_fronted(&d.resource_name) {
            out.push(d);
            continue;
        }
        for id in &d.device_ids {
            match topology.nodes(&d.resource_name, id) {
                Some(nodes) if !nodes.is_empty() => {
                    for node in nodes {
                        out.push(pr::ContainerDevices {
                            resource_name: d.resource_name.clone(),
                            device_ids: vec![id.clone()],
                            topology: Some(pr::TopologyInfo {
                                nodes: vec![pr::NumaNode {
                                    id: i64::from(node),
                                }],
                            }),
                        });
                    }
                }
                Some(_) => out.push(pr::ContainerDevices {
                    resource_name: d.resource_name.clone(),
                    device_ids: vec![id.clone()],
                    topology: None,
                }),
                None => out.push(pr::ContainerDevices {
                    resource_name: d.resource_name.clone(),
                    device_ids: vec![id.clone()],
                    topology: d.topology.clone(),
                }),
            }
        }
    }
    *devices = out;
}

/// [`overlay_topology`] over every container of a pod.
pub(crate) fn overlay_pod(
    pod: &mut pr::PodResources,
    topology: &crate::lifecycle::devices::FrontedTopology,
) {
    for c in &mut pod.containers {
        overlay_topology(&mut c.devices, topology);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devs(resource: &str, ids: &[&str], nodes: &[i64]) -> pr::ContainerDevices {
        pr::ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: (!nodes.is_empty()).then(|| pr::TopologyInfo {
                nodes: nodes.iter().map(|&id| pr::NumaNode { id }).collect(),
            }),
        }
    }

    fn container(name: &str, devices: Vec<pr::ContainerDevices>) -> pr::ContainerResources {
        pr::ContainerResources {
            name: name.into(),
            devices,
            ..Default::default()
        }
    }

    fn pod_resources(name: &str, containers: Vec<pr::ContainerResources>) -> pr::PodResources {
        pr::PodResources {
            name: name.into(),
            namespace: "ns".into(),
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn fronted_devices_get_their_true_nodes_back_and_others_stay() {
        let topology = crate::lifecycle::devices::FrontedTopology::default();
        topology.set(
            "example.com/gpu",
            [("gpu0".to_string(), vec![0]), ("gpu1".to_string(), vec![1])].into(),
        );
        let mut listed = vec![
            devs("example.com/gpu", &["gpu1", "gpu0"], &[]),
            devs("example.com/nic", &["nic0"], &[]),
        ];
        overlay_topology(&mut listed, &topology);
        assert_eq!(
            listed,
            vec![
                devs("example.com/gpu", &["gpu1"], &[1]),
                devs("example.com/gpu", &["gpu0"], &[0]),
                devs("example.com/nic", &["nic0"], &[]),
            ]
        );
        let facts = allocatable_devices(&listed);
        assert_eq!(facts["example.com/gpu"][1].numa_nodes, vec![1]);
    }

    #[test]
    fn a_device_listed_per_numa_node_is_one_device_and_no_topology_is_empty() {
        let allocatable = pr::AllocatableResourcesResponse {
            devices: vec![
                devs("example.com/gpu", &["gpu1"], &[1]),
                devs("example.com/gpu", &["gpu0"], &[0]),
                // A device on two nodes: the kubelet lists it once per node.
                devs("example.com/gpu", &["gpu2"], &[1]),
                devs("example.com/gpu", &["gpu2"], &[0]),
                devs("example.com/nic", &["nic0"], &[]),
            ],
            ..Default::default()
        };
        let facts = device_facts(
            &allocatable,
            &pr::ListPodResourcesResponse::default(),
            "ns",
            "a",
        );
        let d = |id: &str, nodes: &[u32]| Device {
            id: id.into(),
            numa_nodes: nodes.to_vec(),
        };
        assert_eq!(
            facts.allocatable["example.com/gpu"],
            [d("gpu0", &[0]), d("gpu1", &[1]), d("gpu2", &[0, 1])]
        );
        assert_eq!(facts.allocatable["example.com/nic"], [d("nic0", &[])]);
        assert!(facts.allocated.is_empty() && facts.in_use.is_empty());
    }

    #[test]
    fn this_pods_devices_by_container_others_in_use() {
        let list = pr::ListPodResourcesResponse {
            pod_resources: vec![
                pod_resources(
                    "a",
                    vec![
                        container(
                            "main",
                            vec![
                                devs("example.com/gpu", &["gpu3"], &[1]),
                                devs("example.com/gpu", &["gpu1"], &[0]),
                            ],
                        ),
                        container("side", vec![]),
                    ],
                ),
                pod_resources(
                    "b",
                    vec![container(
                        "x",
                        vec![devs("example.com/gpu", &["gpu0"], &[0])],
                    )],
                ),
                pod_resources(
                    "c",
                    vec![container(
                        "y",
                        vec![devs("example.com/nic", &["nic0"], &[])],
                    )],
                ),
            ],
        };
        let facts = device_facts(
            &pr::AllocatableResourcesResponse::default(),
            &list,
            "ns",
            "a",
        );
        assert_eq!(
            facts.allocated,
            BTreeMap::from([(
                "main".to_string(),
                BTreeMap::from([(
                    "example.com/gpu".to_string(),
                    vec!["gpu1".to_string(), "gpu3".to_string()]
                )])
            )])
        );
        assert_eq!(
            facts.in_use,
            BTreeMap::from([
                (
                    "example.com/gpu".to_string(),
                    BTreeSet::from(["gpu0".to_string()])
                ),
                (
                    "example.com/nic".to_string(),
                    BTreeSet::from(["nic0".to_string()])
                ),
            ])
        );
    }

    #[test]
    fn a_pod_of_another_namespace_with_the_same_name_is_another_pod() {
        let mut other = pod_resources(
            "a",
            vec![container(
                "main",
                vec![devs("example.com/gpu", &["gpu0"], &[0])],
            )],
        );
        other.namespace = "elsewhere".into();
        let list = pr::ListPodResourcesResponse {
            pod_resources: vec![other],
        };
        let facts = device_facts(
            &pr::AllocatableResourcesResponse::default(),
            &list,
            "ns",
            "a",
        );
        assert!(facts.allocated.is_empty());
        assert_eq!(facts.in_use["example.com/gpu"].len(), 1);
    }
}

//! The front's device choice, pure: which pod the kubelet is allocating for
//! ([`pick_pod`], [`asking`]), the devices numa-shim's decision gave the container
//! ([`from_decision`]), and the kubelet's own choice with the devices' topology visible
//! ([`kubelet_choice`], the fallback). No I/O; `decide` runs the admission these read.

use std::collections::BTreeMap;

use crate::knowledge::PodMeta;
use crate::placement::device::alloc::{devices_to_allocate, Ask, Ids};
use crate::placement::device::hints::generate;
use crate::placement::device::requests::container_requests;
use crate::placement::device::Device;
use crate::placement::{ContainerSpec, PodSpec, TopologyHint};

/// One `ContainerPreferredAllocationRequest`, as sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub resource: String,
    /// `available_deviceIDs` (the kubelet passes `must_include` among them too).
    pub available: Ids,
    /// `must_include_deviceIDs`: devices of init containers the container reuses.
    pub must: Ids,
    /// `allocation_size`: the container's whole request.
    pub size: usize,
}

/// The pod's containers in the kubelet's allocation order (init containers, then app
/// containers) that ask for exactly `size` devices of `resource`.
pub fn asking<'a>(pod: &'a PodSpec, resource: &str, size: usize) -> Vec<&'a ContainerSpec> {
    pod.init_containers
        .iter()
        .chain(&pod.containers)
        .filter(|c| {
            container_requests(c)
                .get(resource)
                .is_some_and(|&n| usize::try_from(n).is_ok_and(|n| n == size && n > 0))
        })
        .collect()
}

/// The pod the kubelet is admitting now, among `pods` (known on this node, not admitted by
/// numa-shim yet): the kubelet admits pods one at a time, oldest `creationTimestamp` first, so
/// the oldest unfinished pod with a container asking `size` of `resource` (ties by namespace,
/// name). `None` when no pod fits.
pub fn pick_pod<'a>(
    pods: &'a [(PodSpec, PodMeta)],
    resource: &str,
    size: usize,
) -> Option<&'a PodSpec> {
    pods.iter()
        .filter(|(pod, meta)| !meta.finished && !asking(pod, resource, size).is_empty())
        .min_by(|(a, ma), (b, mb)| {
            // Unknown creation times last.
            let key = |m: &PodMeta| (m.created.is_none(), m.created.unwrap_or(0));
            key(ma)
                .cmp(&key(mb))
                .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
        })
        .map(|(pod, _)| pod)
}

/// Why a decision's devices cannot be the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("the decision gave container {container} no {resource} devices")]
    None { container: String, resource: String },
    #[error("the decision gave container {container} {got} devices, the kubelet asks {size}")]
    Size {
        container: String,
        got: usize,
        size: usize,
    },
    #[error("the decision's device {id} is not among the kubelet's available ones")]
    NotAvailable { id: String },
    #[error("the decision leaves out device {id} the kubelet must include")]
    MissingMust { id: String },
}

/// The devices numa-shim's decision gave `container` for the request, checked against what the
/// kubelet offers: `size` of them, each available or must-included, every must-include in.
pub fn from_decision(
    decided: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    container: &str,
    wanted: &Wanted,
) -> Result<Ids, Unusable> {
    let ids: Ids = decided
        .get(container)
        .and_then(|r| r.get(&wanted.resource))
        .map(|ids| ids.iter().cloned().collect())
        .unwrap_or_default();
    if ids.is_empty() {
        return Err(Unusable::None {
            container: container.to_string(),
            resource: wanted.resource.clone(),
        });
    }
    if ids.len() != wanted.size {
        return Err(Unusable::Size {
            container: container.to_string(),
            got: ids.len(),
            size: wanted.size,
        });
    }
    if let Some(id) = ids
        .iter()
        .find(|id| !wanted.available.contains(*id) && !wanted.must.contains(*id))
    {
        return Err(Unusable::NotAvailable { id: id.clone() });
    }
    if let Some(id) = wanted.must.iter().find(|id| !ids.contains(*id)) {
        return Err(Unusable::MissingMust { id: id.clone() });
    }
    Ok(ids)
}

/// What the kubelet itself would have chosen with the devices' topology visible and only the
/// device hints merged (its managers off): the first preferred (narrowest) hint that the
/// available and must-include devices can fill, in the kubelet's mask order (else the first
/// hint at all); then `devicesToAllocate` with that hint and the documented plugin preference
/// (must-include first, then the lowest ids, aligned devices before others). Devices without
/// topology, or no hint: must-include first, then the lowest available ids.
pub fn kubelet_choice(devices: &[Device], machine_nodes: &[u32], wanted: &Wanted) -> Ids {
    let free: Ids = wanted.available.difference(&wanted.must).cloned().collect();
    let hints = generate(
        devices,
        machine_nodes,
        &free,
        &wanted.must,
        wanted.size as u64,
    );
    let hint = hints
        .iter()
        .find(|h| h.preferred)
        .or_else(|| {
            hints
                .iter()
                .min_by_key(|h| h.affinity.map_or(u32::MAX, |m| m.count()))
        })
        .copied()
        .unwrap_or(TopologyHint {
            affinity: None,
            preferred: true,
        });
    let healthy: Ids = devices.iter().map(|d| d.id.clone()).collect();
    let empty = Ids::new();
    let ask = Ask {
        resource: &wanted.resource,
        required: wanted.size as u64,
        held: &empty,
        reusable: &wanted.must,
        registered: true,
        healthy: &healthy,
        available: &free,
        devices,
        hint: &hint,
    };
    match devices_to_allocate(&ask) {
        Ok(ids) => ids,
        // Not enough devices: the kubelet takes what the plugin names and fails its own count
        // check; answer the plugin's preference over everything offered.
        Err(_) => {
            crate::placement::device::alloc::preferred(&wanted.available, &wanted.must, wanted.size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::test_pods::{app, guaranteed, pod_of, GI};

    fn gpu(id: &str, node: u32) -> Device {
        Device {
            id: id.into(),
            numa_nodes: vec![node],
        }
    }

    fn ids(list: &[&str]) -> Ids {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn wanted(available: &[&str], must: &[&str], size: usize) -> Wanted {
        Wanted {
            resource: "example.com/gpu".into(),
            available: ids(available),
            must: ids(must),
            size,
        }
    }

    fn gpu_pod(uid: &str, gpus: u64) -> PodSpec {
        let mut r = guaranteed(1000, GI);
        r.limits.extended.insert("example.com/gpu".into(), gpus);
        r.requests.extended.insert("example.com/gpu".into(), gpus);
        pod_of(uid, None, vec![app("app", r)])
    }

    #[test]
    fn the_kubelets_own_choice_is_the_first_narrowest_node_then_lowest_ids() {
        let devices = [
            gpu("gpu0", 0),
            gpu("gpu1", 1),
            gpu("gpu2", 0),
            gpu("gpu3", 1),
        ];
        let nodes = [0, 1];
        // Both nodes could hold it: node 0 first, its lowest id.
        assert_eq!(
            kubelet_choice(
                &devices,
                &nodes,
                &wanted(&["gpu0", "gpu1", "gpu2", "gpu3"], &[], 1)
            ),
            ids(&["gpu0"])
        );
        // Two: both of node 0.
        assert_eq!(
            kubelet_choice(
                &devices,
                &nodes,
                &wanted(&["gpu0", "gpu1", "gpu2", "gpu3"], &[], 2)
            ),
            ids(&["gpu0", "gpu2"])
        );
        // Node 0 has one left: two come from node 1.
        assert_eq!(
            kubelet_choice(&devices, &nodes, &wanted(&["gpu1", "gpu2", "gpu3"], &[], 2)),
            ids(&["gpu1", "gpu3"])
        );
        // Must-include first, then aligned with it.
        assert_eq!(
            kubelet_choice(
                &devices,
                &nodes,
                &wanted(&["gpu0", "gpu1", "gpu2", "gpu3"], &["gpu3"], 2)
            ),
            ids(&["gpu1", "gpu3"])
        );
        // No topology: lowest ids.
        let flat = [
            Device {
                id: "b".into(),
                numa_nodes: vec![],
            },
            Device {
                id: "a".into(),
                numa_nodes: vec![],
            },
        ];
        assert_eq!(
            kubelet_choice(&flat, &nodes, &wanted(&["a", "b"], &[], 1)),
            ids(&["a"])
        );
    }

    #[test]
    fn the_pod_admitted_now_is_the_oldest_unfinished_one_asking_that_many() {
        let old = (
            gpu_pod("old", 1),
            PodMeta {
                created: Some(100),
                finished: false,
            },
        );
        let done = (
            gpu_pod("done", 1),
            PodMeta {
                created: Some(50),
                finished: true,
            },
        );
        let two = (
            gpu_pod("two", 2),
            PodMeta {
                created: Some(10),
                finished: false,
            },
        );
        let new = (
            gpu_pod("new", 1),
            PodMeta {
                created: Some(200),
                finished: false,
            },
        );
        let pods = vec![new.clone(), done, two, old];
        assert_eq!(pick_pod(&pods, "example.com/gpu", 1).unwrap().uid, "old");
        assert_eq!(pick_pod(&pods, "example.com/gpu", 2).unwrap().uid, "two");
        assert!(pick_pod(&pods, "example.com/gpu", 3).is_none());
        assert!(pick_pod(&pods, "example.com/nic", 1).is_none());
        // Unknown creation time goes last.
        let unknown = (gpu_pod("unknown", 1), PodMeta::default());
        assert_eq!(
            pick_pod(&[unknown, new], "example.com/gpu", 1).unwrap().uid,
            "new"
        );
    }

    #[test]
    fn containers_in_the_kubelets_order_init_first() {
        let mut gpu_r = guaranteed(1000, GI);
        gpu_r.limits.extended.insert("example.com/gpu".into(), 1);
        let mut init = crate::placement::test_pods::gu(
            "init",
            crate::placement::ContainerRole::Init,
            1000,
            GI,
        );
        init.resources = gpu_r.clone();
        let pod = pod_of(
            "p",
            None,
            vec![
                app("b", gpu_r.clone()),
                init,
                app("plain", guaranteed(1000, GI)),
                app("a", gpu_r),
            ],
        );
        let names: Vec<&str> = asking(&pod, "example.com/gpu", 1)
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["init", "b", "a"]);
    }

    #[test]
    fn a_decision_is_the_answer_only_within_what_the_kubelet_offers() {
        let decided: BTreeMap<String, BTreeMap<String, Vec<String>>> = [(
            "app".to_string(),
            [("example.com/gpu".to_string(), vec!["gpu1".to_string()])].into(),
        )]
        .into();
        assert_eq!(
            from_decision(&decided, "app", &wanted(&["gpu0", "gpu1"], &[], 1)),
            Ok(ids(&["gpu1"]))
        );
        assert!(matches!(
            from_decision(&decided, "app", &wanted(&["gpu0"], &[], 1)),
            Err(Unusable::NotAvailable { .. })
        ));
        assert!(matches!(
            from_decision(&decided, "app", &wanted(&["gpu0", "gpu1"], &[], 2)),
            Err(Unusable::Size { .. })
        ));
        assert!(matches!(
            from_decision(&decided, "other", &wanted(&["gpu0", "gpu1"], &[], 1)),
            Err(Unusable::None { .. })
        ));
        assert!(matches!(
            from_decision(&decided, "app", &wanted(&["gpu0", "gpu1"], &["gpu0"], 1)),
            Err(Unusable::MissingMust { .. })
        ));
    }
}

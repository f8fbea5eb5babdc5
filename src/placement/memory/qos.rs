//! Pod QoS and container eligibility as the resource managers see them (kubelet
//! `ComputePodQOS`, `IsPodLevelResourcesSet`, `IsContainerEquivalentQOSGuaranteed`).

use crate::placement::config::FeatureGates;
use crate::placement::{ContainerSpec, PodSpec, ResourceList};

/// `pod.spec.resources` carries at least one supported resource (cpu, memory, hugepages).
pub(crate) fn pod_level_set(pod: &PodSpec) -> bool {
    pod.resources
        .as_ref()
        .is_some_and(|r| list_set(&r.requests) || list_set(&r.limits))
}

fn list_set(l: &ResourceList) -> bool {
    l.cpu_milli.is_some() || l.memory.is_some() || !l.hugepages.is_empty()
}

/// Both gates on and the pod uses pod-level resources: the PLRM paths apply.
pub(crate) fn plrm(pod: &PodSpec, gates: FeatureGates) -> bool {
    gates.pod_level_resources && gates.pod_level_resource_managers && pod_level_set(pod)
}

/// The pod has pod-level resources but a gate is off: managers skip it entirely.
pub(crate) fn skipped_by_gates(pod: &PodSpec, gates: FeatureGates) -> bool {
    pod_level_set(pod) && !(gates.pod_level_resources && gates.pod_level_resource_managers)
}

/// kubelet `ComputePodQOS(pod) == Guaranteed`.
pub(crate) fn is_guaranteed(pod: &PodSpec, gates: FeatureGates) -> bool {
    let pos = |v: Option<u64>| v.filter(|&x| x > 0);
    let mut req = (None::<u64>, None::<u64>);
    let mut lim = (None::<u64>, None::<u64>);
    let mut limits_everywhere = true;
    let mut add = |r: &ResourceList, l: &ResourceList| {
        let sum = |acc: Option<u64>, v: Option<u64>| match (acc, v) {
            (a, None) => a,
            (None, Some(v)) => Some(v),
            (Some(a), Some(v)) => Some(a.saturating_add(v)),
        };
        req = (sum(req.0, pos(r.cpu_milli)), sum(req.1, pos(r.memory)));
        lim = (sum(lim.0, pos(l.cpu_milli)), sum(lim.1, pos(l.memory)));
        if pos(l.cpu_milli).is_none() || pos(l.memory).is_none() {
            limits_everywhere = false;
        }
    };
    let pod_requests_set = pod
        .resources
        .as_ref()
        .is_some_and(|r| list_set(&r.requests));
    match pod.resources.as_ref() {
        Some(r) if gates.pod_level_resources && pod_requests_set => add(&r.requests, &r.limits),
        _ => {
            for c in pod.init_containers.iter().chain(&pod.containers) {
                add(&c.resources.requests, &c.resources.limits);
            }
        }
    }
    if req == (None, None) && lim == (None, None) {
        return false;
    }
    let matches = |r: Option<u64>, l: Option<u64>| r.is_none() || r == l;
    let same_len = req.0.is_some() as u8 + req.1.is_some() as u8
        == lim.0.is_some() as u8 + lim.1.is_some() as u8;
    limits_everywhere && matches(req.0, lim.0) && matches(req.1, lim.1) && same_len
}

/// kubelet `IsContainerEquivalentQOSGuaranteed`: cpu and memory requests non-zero and equal to limits.
pub(crate) fn container_equivalent_guaranteed(c: &ContainerSpec) -> bool {
    let (r, l) = (&c.resources.requests, &c.resources.limits);
    let eq = |a: Option<u64>, b: Option<u64>| a.is_some_and(|x| x > 0) && a == b;
    eq(r.cpu_milli, l.cpu_milli) && eq(r.memory, l.memory)
}

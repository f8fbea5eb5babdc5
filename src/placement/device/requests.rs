//! How many devices a container or a pod asks for (kubelet `getContainerDeviceRequest`,
//! `getPodDeviceRequest`): extended-resource limits (requests equal limits for them), the pod's
//! total by the sidecar-aware formula of `resource.PodLimits` (pod-level resources never name
//! extended resources, so they do not change it).

use std::collections::BTreeMap;

use crate::placement::{ContainerRole, ContainerSpec, PodSpec};

/// Resource name → device count.
pub type Requests = BTreeMap<String, u64>;

/// A container's extended-resource limits.
pub fn container_requests(c: &ContainerSpec) -> Requests {
    c.resources.limits.extended.clone()
}

/// The pod's extended-resource limits: app containers and sidecars summed, at least the largest
/// regular init container plus the sidecars started before it.
pub fn pod_requests(pod: &PodSpec) -> Requests {
    let mut total = Requests::new();
    for c in &pod.containers {
        add(&mut total, &c.resources.limits.extended);
    }
    let mut sidecars = Requests::new();
    let mut init_max = Requests::new();
    for c in &pod.init_containers {
        let own = &c.resources.limits.extended;
        let during = if c.role == ContainerRole::Sidecar {
            add(&mut total, own);
            add(&mut sidecars, own);
            sidecars.clone()
        } else {
            let mut with = own.clone();
            add(&mut with, &sidecars);
            with
        };
        max_into(&mut init_max, &during);
    }
    max_into(&mut total, &init_max);
    total
}

fn add(into: &mut Requests, other: &Requests) {
    for (k, &v) in other {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_into(into: &mut Requests, other: &Requests) {
    for (k, &v) in other {
        let cur = into.entry(k.clone()).or_insert(v);
        *cur = (*cur).max(v);
    }
}

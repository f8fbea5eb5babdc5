//! Pod and container specs for tests, in one place (unit tests beside the code and the
//! `testing` support both build from here). Pure builders, no I/O.

use std::collections::BTreeMap;

use super::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};

pub const GI: u64 = 1 << 30;

/// A resource list of `cpu_milli` and `mem` bytes.
pub fn list(cpu_milli: u64, mem: u64) -> ResourceList {
    ResourceList {
        cpu_milli: Some(cpu_milli),
        memory: Some(mem),
        hugepages: BTreeMap::new(),
        extended: BTreeMap::new(),
    }
}

/// Requests = limits = `cpu_milli`, `mem` bytes.
pub fn guaranteed(cpu_milli: u64, mem: u64) -> Resources {
    Resources {
        requests: list(cpu_milli, mem),
        limits: list(cpu_milli, mem),
    }
}

/// A container with `resources`.
pub fn container(name: &str, role: ContainerRole, resources: Resources) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        role,
        resources,
    }
}

/// An app container with `resources`.
pub fn app(name: &str, resources: Resources) -> ContainerSpec {
    container(name, ContainerRole::App, resources)
}

/// A Guaranteed container of `cpu_milli` and `mem` bytes.
pub fn gu(name: &str, role: ContainerRole, cpu_milli: u64, mem: u64) -> ContainerSpec {
    container(name, role, guaranteed(cpu_milli, mem))
}

/// A container that declares nothing.
pub fn bare(name: &str, role: ContainerRole) -> ContainerSpec {
    container(name, role, Resources::default())
}

/// A pod in namespace `default` named as its UID; `pod_level` is its Guaranteed
/// `spec.resources` (CPU in millis, memory in bytes).
pub fn pod(
    uid: &str,
    init: Vec<ContainerSpec>,
    apps: Vec<ContainerSpec>,
    pod_level: Option<(u64, u64)>,
) -> PodSpec {
    PodSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: uid.into(),
        resources: pod_level.map(|(cpu, mem)| guaranteed(cpu, mem)),
        init_containers: init,
        containers: apps,
    }
}

/// A pod in namespace `ns` named `name-<uid>`, with `budget` as its `spec.resources`; the
/// containers go to init or app by their role.
pub fn pod_of(uid: &str, budget: Option<Resources>, containers: Vec<ContainerSpec>) -> PodSpec {
    let (init, apps) = containers
        .into_iter()
        .partition(|c| c.role != ContainerRole::App);
    PodSpec {
        uid: uid.into(),
        namespace: "ns".into(),
        name: format!("name-{uid}"),
        resources: budget,
        init_containers: init,
        containers: apps,
    }
}

/// A pod-level (PLRM) pod of [`pod_of`]: `cpus` whole CPUs of budget (`cpus` Gi of memory), one
/// exclusive container `excl` of `cpus - 1` CPUs (1 Gi) and one container `pool` on the pod shared
/// pool.
pub fn plrm_pod(uid: &str, cpus: u64) -> PodSpec {
    pod_of(
        uid,
        Some(guaranteed(cpus * 1000, cpus * GI)),
        vec![
            app("excl", guaranteed((cpus - 1) * 1000, GI)),
            app("pool", Resources::default()),
        ],
    )
}

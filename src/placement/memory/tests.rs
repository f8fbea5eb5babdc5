//! Static Memory Manager tests: builders here; table, hints and per-container allocation in
//! `container`, pod hints and the PLRM bubble in `pod`.

use std::collections::BTreeMap;

use super::*;
use crate::placement::config::{MemoryPolicy, ReservedMemory};
use crate::placement::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};
use crate::topology::{NumaNode, Topology};

pub(super) const GI: u64 = 1 << 30;
pub(super) const MI2: u64 = 2 << 20;

/// Two NUMA nodes, 16Gi each, node 0 also 1Gi of 2Mi hugepages.
pub(super) fn topo() -> Topology {
    Topology {
        cpus: vec![],
        numa: vec![
            NumaNode {
                id: 0,
                memory: 16 * GI,
                hugepages: BTreeMap::from([(MI2, GI)]),
                distances: vec![10, 20],
            },
            NumaNode {
                id: 1,
                memory: 16 * GI,
                hugepages: BTreeMap::new(),
                distances: vec![20, 10],
            },
        ],
    }
}

pub(super) fn config() -> Config {
    Config {
        memory_policy: MemoryPolicy::Static,
        reserved_memory: vec![
            ReservedMemory {
                numa_node: 0,
                memory: GI,
                hugepages: BTreeMap::new(),
            },
            ReservedMemory {
                numa_node: 1,
                memory: GI,
                hugepages: BTreeMap::new(),
            },
        ],
        ..Config::default()
    }
}

pub(super) fn mm() -> MemoryManager {
    MemoryManager::new(&topo(), &config()).unwrap()
}

pub(super) fn gu(name: &str, role: ContainerRole, cpu_milli: u64, mem: u64) -> ContainerSpec {
    let l = ResourceList {
        cpu_milli: Some(cpu_milli),
        memory: Some(mem),
        hugepages: BTreeMap::new(),
        extended: BTreeMap::new(),
    };
    ContainerSpec {
        name: name.into(),
        role,
        resources: Resources {
            requests: l.clone(),
            limits: l,
        },
    }
}

pub(super) fn bare(name: &str, role: ContainerRole) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        role,
        resources: Resources::default(),
    }
}

pub(super) fn pod(
    uid: &str,
    init: Vec<ContainerSpec>,
    apps: Vec<ContainerSpec>,
    pod_level: Option<(u64, u64)>,
) -> PodSpec {
    PodSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: uid.into(),
        resources: pod_level.map(|(cpu, mem)| {
            let l = ResourceList {
                cpu_milli: Some(cpu),
                memory: Some(mem),
                hugepages: BTreeMap::new(),
                extended: BTreeMap::new(),
            };
            Resources {
                requests: l.clone(),
                limits: l,
            }
        }),
        init_containers: init,
        containers: apps,
    }
}

pub(super) fn mask(ids: &[u32]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied())
}

pub(super) fn hint(ids: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(mask(ids)),
        preferred,
    }
}

pub(super) fn memory_hints(h: &ResourceHints) -> Vec<(Vec<u32>, bool)> {
    h.get(MEMORY)
        .cloned()
        .flatten()
        .unwrap_or_default()
        .iter()
        .map(|h| (h.affinity.unwrap().ids().collect(), h.preferred))
        .collect()
}

pub(super) fn free(m: &MemoryManager, node: u32) -> u64 {
    m.state().machine[&node].memory[MEMORY].free
}

mod container;
mod pod;
mod start;

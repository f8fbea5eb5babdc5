//! Static Memory Manager tests: builders here; table, hints and per-container allocation in
//! `container`, pod hints and the PLRM bubble in `pod`.

use std::collections::BTreeMap;

use super::*;
use crate::placement::config::{MemoryPolicy, ReservedMemory};
pub(super) use crate::placement::test_pods::{bare, gu, pod, GI};
use crate::placement::ContainerRole;
use crate::topology::{NumaNode, Topology};

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

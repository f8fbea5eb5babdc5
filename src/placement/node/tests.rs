//! `Node` tests: shared builders here; admission end to end in `classic`, `plrm` and `state`.

use std::collections::BTreeMap;

use super::*;
use crate::placement::config::{CpuPolicy, MemoryPolicy, ReservedCpus, ReservedMemory};
pub(super) use crate::placement::test_pods::{gu, list, pod, GI};
use crate::placement::{test_pods, ContainerRole};
use crate::topology::{CpuInfo, NumaNode};

/// kubelet's topoDualSocketHT: 12 CPUs, core = id mod 6, socket = NUMA = id mod 2; 8Gi per node.
pub(super) fn dual_socket_ht() -> Topology {
    Topology {
        cpus: (0..12)
            .map(|id| CpuInfo {
                id,
                core: id % 6,
                socket: id % 2,
                die: 0,
                numa: id % 2,
                uncore: 0,
            })
            .collect(),
        numa: (0..2)
            .map(|id| NumaNode {
                id,
                memory: 8 * GI,
                hugepages: BTreeMap::new(),
                distances: if id == 0 { vec![10, 20] } else { vec![20, 10] },
            })
            .collect(),
    }
}

pub(super) fn static_config(policy: TopologyPolicy, scope: TopologyScope) -> Config {
    Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::parse("0").unwrap()),
        topology_policy: policy,
        topology_scope: scope,
        ..Config::default()
    }
}

pub(super) fn with_memory(mut c: Config) -> Config {
    c.memory_policy = MemoryPolicy::Static;
    c.reserved_memory = (0..2)
        .map(|n| ReservedMemory {
            numa_node: n,
            memory: GI,
            hugepages: BTreeMap::new(),
        })
        .collect();
    c
}

pub(super) fn bare(name: &str) -> ContainerSpec {
    test_pods::bare(name, ContainerRole::App)
}

pub(super) fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

pub(super) fn node(config: Config) -> Node {
    Node::new(dual_socket_ht(), config).unwrap()
}

mod adopt;
mod claims;
mod classic;
mod plrm;
mod start;
mod state;

//! Support of the end-to-end tests (tests/e2e): a stateful fake runtime, kubelet-shaped CRI
//! requests, and numa-shim started in front of them.

pub mod harness;
pub mod kubelet;
pub use crate::testing::pods_api;
pub mod runtime;

use std::collections::BTreeSet;

use crate::cpuset::CpuSet;
use crate::proto::cri::v1 as cri;
use crate::topology::Topology;

/// What the runtime received for one container, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub cpus: CpuSet,
    pub mems: String,
    pub quota: i64,
}

pub fn received(req: &cri::CreateContainerRequest) -> Received {
    let r = runtime::resources_of(req);
    Received {
        cpus: CpuSet::parse(&r.cpuset_cpus)
            .unwrap_or_else(|e| panic!("cpuset_cpus {:?}: {e}", r.cpuset_cpus)),
        mems: r.cpuset_mems,
        quota: r.cpu_quota,
    }
}

/// The NUMA nodes the CPUs are on.
pub fn numa_of(topology: &Topology, cpus: &CpuSet) -> BTreeSet<u32> {
    cpus.iter()
        .map(|id| {
            topology
                .cpu(id)
                .unwrap_or_else(|| panic!("no cpu {id}"))
                .numa
        })
        .collect()
}

/// The one NUMA node the CPUs are on (panics if several).
pub fn one_numa(topology: &Topology, cpus: &CpuSet) -> u32 {
    let nodes = numa_of(topology, cpus);
    assert_eq!(nodes.len(), 1, "cpus {cpus} span numa nodes {nodes:?}");
    *nodes.iter().next().unwrap()
}

/// How many CPUs one NUMA node of the topology has.
pub fn cpus_per_numa(topology: &Topology) -> usize {
    topology.cpus_in_numa(0).len()
}

//! Large regular machines for benchmarks and property tests: sockets × NUMA nodes per socket ×
//! cores per NUMA node × threads per core, with uncore (L3) caches splitting each node's cores.
//!
//! Numbering follows the kubelet fixtures and Intel/AMD Linux enumeration: cores are numbered
//! socket-major, node-major (core `c` of `ncores`), and the threads of core `c` are CPUs
//! `c, c + ncores, c + 2·ncores, …`; the core id is `c` (the lowest sibling). NUMA node ids run
//! socket-major; uncore ids run node-major (`numa · uncore_per_numa + k`). Distances: 10 to
//! itself; with one node per socket 21 to every other node; with several, 21 inside the socket
//! and 31 across sockets. Pure computation.

use std::collections::BTreeMap;

use super::{CpuInfo, NumaNode, Topology};
use crate::cpuset::MAX_CPU_ID;

/// The shape of a synthetic machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticSpec {
    pub sockets: u32,
    pub numa_per_socket: u32,
    pub cores_per_numa: u32,
    pub threads_per_core: u32,
    /// Uncore caches per NUMA node; must divide `cores_per_numa`.
    pub uncore_per_numa: u32,
    /// Memory of each NUMA node in bytes.
    pub memory_per_numa: u64,
    /// Hugepages of each NUMA node: page size in bytes → total bytes.
    pub hugepages_per_numa: BTreeMap<u64, u64>,
}

/// Why a synthetic machine cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntheticError {
    #[error("synthetic topology: {0} must be at least 1")]
    Zero(&'static str),
    #[error("synthetic topology: {uncore} uncore caches do not split {cores} cores per numa node evenly")]
    UncoreSplit { cores: u32, uncore: u32 },
    #[error("synthetic topology: {cpus} cpus exceed the cpu id limit {MAX_CPU_ID}")]
    TooManyCpus { cpus: u64 },
}

impl SyntheticSpec {
    /// A machine of this shape with 64Gi per NUMA node and no hugepages.
    pub fn new(
        sockets: u32,
        numa_per_socket: u32,
        cores_per_numa: u32,
        threads_per_core: u32,
        uncore_per_numa: u32,
    ) -> Self {
        Self {
            sockets,
            numa_per_socket,
            cores_per_numa,
            threads_per_core,
            uncore_per_numa,
            memory_per_numa: 64 << 30,
            hugepages_per_numa: BTreeMap::new(),
        }
    }

    /// Number of logical CPUs.
    pub fn num_cpus(&self) -> u64 {
        [
            self.numa_per_socket,
            self.cores_per_numa,
            self.threads_per_core,
        ]
        .into_iter()
        .fold(u64::from(self.sockets), |n, k| {
            n.saturating_mul(u64::from(k))
        })
    }

    /// Builds the machine.
    pub fn build(&self) -> Result<Topology, SyntheticError> {
        self.check()?;
        let numa_count = self.sockets * self.numa_per_socket;
        let ncores = numa_count * self.cores_per_numa;
        let cores_per_uncore = self.cores_per_numa / self.uncore_per_numa;
        let mut cpus = Vec::with_capacity((ncores * self.threads_per_core) as usize);
        for thread in 0..self.threads_per_core {
            for core in 0..ncores {
                let numa = core / self.cores_per_numa;
                let in_numa = core % self.cores_per_numa;
                cpus.push(CpuInfo {
                    id: thread * ncores + core,
                    core,
                    socket: numa / self.numa_per_socket,
                    die: 0,
                    numa,
                    uncore: numa * self.uncore_per_numa + in_numa / cores_per_uncore,
                });
            }
        }
        let numa = (0..numa_count)
            .map(|id| NumaNode {
                id,
                memory: self.memory_per_numa,
                hugepages: self.hugepages_per_numa.clone(),
                distances: (0..numa_count).map(|to| self.distance(id, to)).collect(),
            })
            .collect();
        Ok(Topology { cpus, numa })
    }

    fn distance(&self, from: u32, to: u32) -> u32 {
        if from == to {
            10
        } else if self.numa_per_socket == 1
            || from / self.numa_per_socket == to / self.numa_per_socket
        {
            21
        } else {
            31
        }
    }

    fn check(&self) -> Result<(), SyntheticError> {
        for (name, value) in [
            ("sockets", self.sockets),
            ("numa_per_socket", self.numa_per_socket),
            ("cores_per_numa", self.cores_per_numa),
            ("threads_per_core", self.threads_per_core),
            ("uncore_per_numa", self.uncore_per_numa),
        ] {
            if value == 0 {
                return Err(SyntheticError::Zero(name));
            }
        }
        if !self.cores_per_numa.is_multiple_of(self.uncore_per_numa) {
            return Err(SyntheticError::UncoreSplit {
                cores: self.cores_per_numa,
                uncore: self.uncore_per_numa,
            });
        }
        let cpus = self.num_cpus();
        if cpus > u64::from(MAX_CPU_ID) {
            return Err(SyntheticError::TooManyCpus { cpus });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

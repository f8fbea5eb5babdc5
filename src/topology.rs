//! The machine model: logical CPUs with core, socket, die, NUMA node and uncore (L3) cache ids,
//! and NUMA nodes with memory, hugepages and distances.
//!
//! `topology` owns the model and its inputs (sysfs discovery with an injectable root, and the
//! topology JSON). It never decides placement; `placement` reads it and never writes it.

use std::collections::BTreeMap;

/// One logical CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuInfo {
    pub id: u32,
    /// Unique across the machine: the lowest sibling CPU id (kubelet's convention).
    pub core: u32,
    pub socket: u32,
    #[serde(default)]
    pub die: u32,
    #[serde(default)]
    pub numa: u32,
    /// L3 / uncore cache id, 0 when unknown.
    #[serde(default)]
    pub uncore: u32,
}

/// One NUMA node's memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumaNode {
    pub id: u32,
    /// Total memory in bytes.
    pub memory: u64,
    /// Hugepage size in bytes → total bytes of that size on the node.
    pub hugepages: BTreeMap<u64, u64>,
    /// Distance to every node, indexed by position in `Topology::numa` order (sysfs order).
    pub distances: Vec<u32>,
}

/// The whole machine. CPUs are sorted by id; NUMA nodes by id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    pub cpus: Vec<CpuInfo>,
    pub numa: Vec<NumaNode>,
}

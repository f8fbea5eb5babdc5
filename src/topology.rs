//! The machine model: logical CPUs with core, socket, die, NUMA node and uncore (L3) cache ids,
//! and NUMA nodes with memory, hugepages and distances.
//!
//! `topology` owns the model and its inputs (sysfs discovery with an injectable root, and the
//! topology JSON). It never decides placement; `placement` reads it and never writes it.
//!
//! Sub-modules: `sysfs` (discovery from a sysfs root), `json` (the topology JSON of the spec),
//! `synthetic` (large regular machines for benchmarks and property tests), `fake` (writes a
//! fake sysfs tree from a model, for tests).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::cpuset::{CpuSet, CpuSetError};
use crate::quantity::QuantityError;

#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod json;
pub mod synthetic;
pub mod sysfs;

pub use synthetic::{SyntheticError, SyntheticSpec};
pub use sysfs::discover;

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
///
/// Serializes to and from the topology JSON of the spec (see `json`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "json::TopologyJson", into = "json::TopologyJson")]
pub struct Topology {
    pub cpus: Vec<CpuInfo>,
    pub numa: Vec<NumaNode>,
}

/// Why a topology could not be read, discovered or accepted.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {expected}, found {content:?}")]
    Malformed {
        path: PathBuf,
        expected: &'static str,
        content: String,
    },
    #[error("{path}: {source}")]
    CpuList {
        path: PathBuf,
        #[source]
        source: CpuSetError,
    },
    #[error("{path}: no online cpu")]
    NoOnlineCpu { path: PathBuf },
    #[error("cpu {cpu} is online but listed by no numa node under {path}")]
    CpuWithoutNode { cpu: u32, path: PathBuf },
    #[error("cpu {cpu} is listed by numa nodes {first} and {second}")]
    CpuInTwoNodes { cpu: u32, first: u32, second: u32 },
    #[error("topology json {origin}: {source}")]
    Json {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("topology: {field}: {source}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    #[error("topology: {field}: {value} is not a whole, non-negative number of bytes")]
    NotBytes { field: String, value: String },
    #[error("topology: {field}: a hugepage size must be positive")]
    ZeroPageSize { field: String },
    #[error("topology: no cpu")]
    NoCpu,
    #[error("topology: cpu {0} is listed twice")]
    DuplicateCpu(u32),
    #[error("topology: numa node {0} is listed twice")]
    DuplicateNuma(u32),
    #[error("topology: cpu {cpu} is on numa node {numa}, which is not in the numa list")]
    UnknownNuma { cpu: u32, numa: u32 },
    #[error("topology: numa node {numa} has {got} distances, expected one per node ({want})")]
    DistanceCount { numa: u32, got: usize, want: usize },
}

impl Topology {
    /// Reads a topology from `path`: a directory is a sysfs root (normally "/sys") and is
    /// discovered; anything else is read as a topology JSON file.
    pub fn load(path: &Path) -> Result<Self, TopologyError> {
        let meta = std::fs::metadata(path).map_err(|source| TopologyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if meta.is_dir() {
            return sysfs::discover(path);
        }
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        json::from_str(&text, &path.display().to_string())
    }

    /// Parses the topology JSON.
    pub fn from_json_str(text: &str) -> Result<Self, TopologyError> {
        json::from_str(text, "<string>")
    }

    /// The topology JSON: one CPU and one NUMA node per line. `numa` is left out when every
    /// node is memory-unknown (as derived from CPUs alone), so such inputs round-trip.
    pub fn to_json(&self) -> Result<String, TopologyError> {
        json::to_string(self)
    }

    /// Checks the model's invariants: at least one CPU, CPU and NUMA ids strictly ascending,
    /// every CPU's NUMA node listed, each distance vector empty or one entry per node.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.cpus.is_empty() {
            return Err(TopologyError::NoCpu);
        }
        for pair in self.cpus.windows(2) {
            if pair[0].id >= pair[1].id {
                return Err(TopologyError::DuplicateCpu(pair[1].id));
            }
        }
        for pair in self.numa.windows(2) {
            if pair[0].id >= pair[1].id {
                return Err(TopologyError::DuplicateNuma(pair[1].id));
            }
        }
        for cpu in &self.cpus {
            if self.numa_node(cpu.numa).is_none() {
                return Err(TopologyError::UnknownNuma {
                    cpu: cpu.id,
                    numa: cpu.numa,
                });
            }
        }
        for node in &self.numa {
            if !node.distances.is_empty() && node.distances.len() != self.numa.len() {
                return Err(TopologyError::DistanceCount {
                    numa: node.id,
                    got: node.distances.len(),
                    want: self.numa.len(),
                });
            }
        }
        Ok(())
    }

    /// The CPU with this id.
    pub fn cpu(&self, id: u32) -> Option<&CpuInfo> {
        let i = self.cpus.binary_search_by_key(&id, |c| c.id).ok()?;
        self.cpus.get(i)
    }

    /// The NUMA node with this id.
    pub fn numa_node(&self, id: u32) -> Option<&NumaNode> {
        let i = self.numa.binary_search_by_key(&id, |n| n.id).ok()?;
        self.numa.get(i)
    }

    /// Every CPU of the machine.
    pub fn cpu_set(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// The CPUs on one NUMA node.
    pub fn cpus_in_numa(&self, numa: u32) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.numa == numa)
            .map(|c| c.id)
            .collect()
    }

    /// Number of distinct core ids (kubelet's `NumCores` when computed from the CPU map).
    pub fn num_cores(&self) -> usize {
        self.distinct(|c| c.core)
    }

    /// Number of distinct socket ids.
    pub fn num_sockets(&self) -> usize {
        self.distinct(|c| c.socket)
    }

    /// Number of distinct NUMA ids among the CPUs (kubelet's `NumNUMANodes`); memory-only
    /// nodes are not counted.
    pub fn num_numa_nodes(&self) -> usize {
        self.distinct(|c| c.numa)
    }

    /// Number of distinct uncore cache ids.
    pub fn num_uncore_caches(&self) -> usize {
        self.distinct(|c| c.uncore)
    }

    fn distinct(&self, key: impl Fn(&CpuInfo) -> u32) -> usize {
        self.cpus.iter().map(key).collect::<BTreeSet<_>>().len()
    }
}

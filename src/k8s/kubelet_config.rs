//! The resource-manager fields of a KubeletConfiguration (`kubelet.config.k8s.io/v1beta1`), with
//! the kubelet's names, value formats, defaults and start-up validation, resolved against the
//! machine into `placement::Config`.
//!
//! Differences from the kubelet, on purpose: the gates numa-shim exists to provide
//! (`PodLevelResources`, `PodLevelResourceManagers`) and the CPU manager option gates default
//! on; the static CPU policy with no CPU reservation is accepted with a warning (the kubelet
//! refuses to start). Unknown keys and unknown feature gates are ignored, so a node's real
//! kubelet config file loads unchanged. Never decides placement; never reads files.

mod cpu;
mod memory;
mod policies;
mod running;
mod scalar;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use super::{documents, DocumentError};

use crate::cpuset::{CpuSet, CpuSetError};
use crate::placement::config::{Config, CpuPolicy, ReservedCpus, TopologyPolicy};
use crate::quantity::{Quantity, QuantityError};
use crate::topology::Topology;
pub use running::{KubeletFinding, RunningConfigError, Severity};

/// The fields of a KubeletConfiguration that drive placement. Values stay as written (strings)
/// until `resolve`, so errors can quote them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletConfiguration {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub feature_gates: BTreeMap<String, bool>,
    /// `none` (default) or `static`.
    pub cpu_manager_policy: Option<String>,
    /// Option name → `"true"` / `"false"`.
    #[serde(deserialize_with = "scalar::map")]
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    /// A CPU list (`"0-1"`); overrides the CPU parts of `kubeReserved` / `systemReserved`.
    #[serde(rename = "reservedSystemCPUs", deserialize_with = "scalar::opt")]
    pub reserved_system_cpus: Option<String>,
    #[serde(deserialize_with = "scalar::map")]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(deserialize_with = "scalar::map")]
    pub system_reserved: BTreeMap<String, String>,
    /// Signal → threshold. Absent: the kubelet default (`memory.available: 100Mi`).
    #[serde(deserialize_with = "scalar::opt_map")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// With `true`, signals missing from `evictionHard` keep their defaults.
    pub merge_default_eviction_settings: Option<bool>,
    /// `None` (default) or `Static`.
    pub memory_manager_policy: Option<String>,
    pub reserved_memory: Vec<MemoryReservation>,
    /// `none` (default), `best-effort`, `restricted`, `single-numa-node`.
    pub topology_manager_policy: Option<String>,
    /// `container` (default) or `pod`.
    pub topology_manager_scope: Option<String>,
    #[serde(deserialize_with = "scalar::map")]
    pub topology_manager_policy_options: BTreeMap<String, String>,
}

/// One `reservedMemory` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryReservation {
    pub numa_node: i32,
    /// `memory` and `hugepages-<size>` → quantity.
    #[serde(deserialize_with = "scalar::map")]
    pub limits: BTreeMap<String, String>,
}

/// The decision core's configuration plus what was accepted but deserves a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedConfig {
    pub config: Config,
    pub warnings: Vec<ConfigWarning>,
}

/// A setting accepted where the kubelet would refuse it or silently ignore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub field: String,
    pub message: String,
}

/// Why a KubeletConfiguration was refused; every message starts with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeletConfigError {
    #[error("{field}: unknown policy {value:?} (one of: {allowed})")]
    UnknownPolicy {
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error("memoryManagerPolicy: BestEffort is only supported on Windows")]
    BestEffortMemoryPolicy,
    #[error("topologyManagerScope: unknown scope {value:?} (container or pod)")]
    UnknownScope { value: String },
    #[error("featureGates: cannot set feature gate {gate} to false, feature is locked to true")]
    LockedGate { gate: &'static str },
    #[error("featureGates: {gate} is enabled, but depends on features that are disabled: [PodLevelResources]")]
    GateDependency { gate: &'static str },
    #[error("cpuManagerPolicyOptions: unknown CPU Manager Policy option: {option:?}")]
    UnknownCpuOption { option: String },
    #[error("cpuManagerPolicyOptions: CPU Manager Policy {level}-level Options not enabled, but option {option:?} provided (feature gate {gate})")]
    CpuOptionGate {
        option: String,
        level: &'static str,
        gate: &'static str,
    },
    #[error("{field}[{option}]: bad value {value:?}: {expected}")]
    BadOptionValue {
        field: &'static str,
        option: String,
        value: String,
        expected: &'static str,
    },
    #[error("cpuManagerPolicyOptions: static policy options {a} and {b} can not be used at the same time")]
    IncompatibleCpuOptions { a: &'static str, b: &'static str },
    #[error("cpuManagerPolicyOptions: topology manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option")]
    AlignBySocketSingleNuma,
    #[error("cpuManagerPolicyOptions: align-by-socket is not compatible with hardware where number of sockets ({sockets}) are more than number of NUMA nodes ({numa})")]
    AlignBySocketHardware { sockets: usize, numa: usize },
    #[error("reservedSystemCPUs: {source}")]
    ReservedCpuList {
        #[source]
        source: CpuSetError,
    },
    #[error("reservedSystemCPUs: {value} is not a subset of online-cpus: {online}")]
    ReservedCpusOffline { value: String, online: String },
    #[error("kubeReserved.cpu + systemReserved.cpu: {wanted} CPUs to reserve but the machine has {online}")]
    ReservedCpuCount { wanted: u64, online: usize },
    #[error("{field}: cannot reserve {resource:?} resource (cpu, memory, ephemeral-storage, pid)")]
    CannotReserve {
        field: &'static str,
        resource: String,
    },
    #[error("{field}: {source}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    #[error("{field}: must not be negative, got {value:?}")]
    Negative { field: String, value: String },
    #[error("evictionHard[memory.available]: {reason}: {value:?}")]
    Eviction { value: String, reason: &'static str },
    #[error("{field}: the limit type {resource:?} is not supported, only memory and hugepages-<size> are accepted")]
    ReservedMemoryType { field: String, resource: String },
    #[error("{field}: reserved memory may not be zero")]
    ReservedMemoryZero { field: String },
    #[error("{field}: the reserved memory has a duplicate value for NUMA node {numa} and resource {resource:?}")]
    ReservedMemoryDuplicate {
        field: String,
        numa: i32,
        resource: String,
    },
    #[error("{field}: the reserved memory configuration references a NUMA node {numa} that does not exist on this machine")]
    ReservedMemoryNode { field: String, numa: i32 },
    #[error("reservedMemory: the total amount {reserved:?} of type {resource:?} is not equal to the value {expected:?} determined by Node Allocatable feature (kubeReserved + systemReserved + evictionHard)")]
    ReservedMemoryMismatch {
        resource: String,
        reserved: String,
        expected: String,
    },
    #[error("reservedMemory: the Static memory manager policy needs system reserved memory; reserve some (and set kubeReserved/systemReserved/evictionHard memory to the same total)")]
    NoReservedMemory,
    #[error("topologyManagerPolicyOptions: unknown Topology Manager Policy option: {option:?}")]
    UnknownTopologyOption { option: String },
    #[error("topologyManagerPolicyOptions[max-allowable-numa-nodes]: the minimum value should not be less than 8, got {value}")]
    MaxNumaTooSmall { value: i64 },
    #[error("topologyManagerPolicy: unsupported on machines with more than {max} NUMA nodes (this one has {nodes}; raise max-allowable-numa-nodes)")]
    TooManyNumaNodes { nodes: usize, max: u32 },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl KubeletConfiguration {
    /// The one `KubeletConfiguration` document of a (possibly multi-document) YAML or JSON text;
    /// documents of other kinds are skipped, a document without `kind` counts.
    pub fn from_yaml(text: &str) -> Result<Self, DocumentError> {
        let mut configs = documents::<Self>(text)?
            .into_iter()
            .filter(|d| matches!(d.kind.as_deref(), None | Some("KubeletConfiguration")));
        match (configs.next(), configs.next()) {
            (Some(c), None) => Ok(c),
            (None, _) => Err(DocumentError::Missing {
                kind: "KubeletConfiguration",
            }),
            (Some(_), Some(_)) => Err(DocumentError::Several {
                kind: "KubeletConfiguration",
            }),
        }
    }

    /// Validates the settings the way the kubelet does at start-up and resolves them against the
    /// machine (reserved CPUs and NUMA nodes must exist, percentages of memory need its size).
    pub fn resolve(&self, machine: &Topology) -> Result<ResolvedConfig, KubeletConfigError> {
        let mut warnings = Vec::new();
        let gates = self.gates()?;
        let cpu_policy = self.cpu_policy()?;
        let memory_policy = self.memory_policy()?;
        let topology_policy = self.topology_policy()?;
        let topology_scope = self.topology_scope()?;
        // kubelet `topologymanager.NewManager` returns before reading its options when the
        // policy is none.
        let topology_options = if topology_policy == TopologyPolicy::None {
            if !self.topology_manager_policy_options.is_empty() {
                warnings.push(ConfigWarning {
                    field: "topologyManagerPolicyOptions".into(),
                    message: "ignored with topologyManagerPolicy none".into(),
                });
            }
            crate::placement::config::TopologyOptions::default()
        } else {
            self.topology_options(&mut warnings)?
        };
        let numa_nodes = numa_node_ids(machine).len();
        if topology_policy != TopologyPolicy::None
            && numa_nodes > topology_options.max_allowable_numa_nodes as usize
        {
            return Err(KubeletConfigError::TooManyNumaNodes {
                nodes: numa_nodes,
                max: topology_options.max_allowable_numa_nodes,
            });
        }
        let cpu_options = self.cpu_options(cpu_policy, topology_policy, machine, &mut warnings)?;
        let reserved_cpus = self.reserved_cpus(cpu_policy, machine, &mut warnings)?;
        let accept_no_reserved_cpus = cpu_policy == CpuPolicy::Static
            && match &reserved_cpus {
                ReservedCpus::Explicit(set) => set.is_empty(),
                ReservedCpus::Count { milli } => *milli == 0,
            };
        let reserved_memory = self.reserved_memory(memory_policy, machine, &mut warnings)?;
        let config = Config {
            cpu_policy,
            cpu_options,
            reserved_cpus,
            memory_policy,
            reserved_memory,
            topology_policy,
            topology_scope,
            topology_options,
            gates,
            accept_no_reserved_cpus,
            reproduce_kubelet_double_grants: false,
        };
        Ok(ResolvedConfig { config, warnings })
    }
}

fn unknown_policy(field: &'static str, value: &str, allowed: &'static str) -> KubeletConfigError {
    KubeletConfigError::UnknownPolicy {
        field,
        value: value.to_string(),
        allowed,
    }
}

/// Go's `strconv.ParseBool`, the parser the kubelet uses for option values.
fn parse_bool(field: &'static str, option: &str, value: &str) -> Result<bool, KubeletConfigError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(KubeletConfigError::BadOptionValue {
            field,
            option: option.to_string(),
            value: value.to_string(),
            expected: "want \"true\" or \"false\"",
        }),
    }
}

/// A quantity from a config map value, with the field in the error.
fn parse_quantity(field: String, value: &str) -> Result<Quantity, KubeletConfigError> {
    let q = Quantity::parse(value).map_err(|source| KubeletConfigError::Quantity {
        field: field.clone(),
        source,
    })?;
    if q.is_negative() {
        return Err(KubeletConfigError::Negative {
            field,
            value: value.to_string(),
        });
    }
    Ok(q)
}

/// The machine's NUMA node ids: those of the memory table and those CPUs name.
fn numa_node_ids(machine: &Topology) -> std::collections::BTreeSet<u32> {
    machine
        .numa
        .iter()
        .map(|n| n.id)
        .chain(machine.cpus.iter().map(|c| c.numa))
        .collect()
}

/// All CPUs of the machine.
fn online_cpus(machine: &Topology) -> CpuSet {
    let mut set = CpuSet::new();
    for c in &machine.cpus {
        set.insert(c.id);
    }
    set
}

//! Resource-manager settings as the decision core takes them: already parsed from the kubelet's
//! field names and value formats (see `k8s` for the parsing), already validated.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;

/// `cpuManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPolicy {
    #[default]
    None,
    Static,
}

/// `cpuManagerPolicyOptions` of the static policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CpuPolicyOptions {
    pub full_pcpus_only: bool,
    pub distribute_cpus_across_numa: bool,
    pub align_by_socket: bool,
    pub distribute_cpus_across_cores: bool,
    pub strict_cpu_reservation: bool,
    pub prefer_align_cpus_by_uncore_cache: bool,
}

/// Where the reserved CPUs come from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReservedCpus {
    /// `reservedSystemCPUs`: this exact list.
    Explicit(CpuSet),
    /// `kubeReserved.cpu + systemReserved.cpu` in millicores: the CPU manager picks
    /// ceil(milli/1000) CPUs the kubelet's way.
    Count { milli: u64 },
}

impl Default for ReservedCpus {
    fn default() -> Self {
        Self::Count { milli: 0 }
    }
}

/// `memoryManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum MemoryPolicy {
    #[default]
    None,
    Static,
}

/// One `reservedMemory` entry: bytes reserved on a NUMA node, per memory type.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ReservedMemory {
    pub numa_node: u32,
    pub memory: u64,
    /// Hugepage size in bytes → reserved bytes.
    pub hugepages: BTreeMap<u64, u64>,
}

/// `topologyManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum TopologyPolicy {
    #[default]
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

/// `topologyManagerScope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum TopologyScope {
    #[default]
    Container,
    Pod,
}

/// `topologyManagerPolicyOptions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopologyOptions {
    pub prefer_closest_numa_nodes: bool,
    /// `max-allowable-numa-nodes`, kubelet default 8.
    pub max_allowable_numa_nodes: u32,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        Self {
            prefer_closest_numa_nodes: false,
            max_allowable_numa_nodes: 8,
        }
    }
}

/// The feature gates that change decisions. numa-shim exists to provide them, so they default on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FeatureGates {
    pub pod_level_resources: bool,
    pub pod_level_resource_managers: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            pod_level_resources: true,
            pod_level_resource_managers: true,
        }
    }
}

/// Everything the decision core needs besides the machine.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Config {
    pub cpu_policy: CpuPolicy,
    pub cpu_options: CpuPolicyOptions,
    pub reserved_cpus: ReservedCpus,
    pub memory_policy: MemoryPolicy,
    pub reserved_memory: Vec<ReservedMemory>,
    pub topology_policy: TopologyPolicy,
    pub topology_scope: TopologyScope,
    pub topology_options: TopologyOptions,
    pub gates: FeatureGates,
    /// Run the static CPU policy with no reserved CPU, which the kubelet refuses to start with.
    /// Set by the KubeletConfiguration layer (`k8s`), which warns about it.
    #[serde(default)]
    pub accept_no_reserved_cpus: bool,
    /// Reproduce kubelet 1.37.2's free core/socket test on machines with cores or sockets of
    /// different sizes, which can grant a CPU twice (docs/fidelity.md). Only the differential
    /// suite sets it, to show a disagreement is that divergence; never set for placement.
    #[serde(default)]
    pub reproduce_kubelet_double_grants: bool,
}

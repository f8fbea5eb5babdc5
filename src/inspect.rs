//! The live placement view: what a running numa-shim holds, per NUMA node and per CPU (reserved,
//! exclusive to a container, a pod's shared pool, the node shared pool) with memory per node,
//! plus the pods and containers it placed. Built from a registry snapshot for `GET /placement`,
//! drawn by `numa-shim inspect` as a table, JSON or a self-contained SVG; `simulate` draws its
//! NUMA map with the same model and renderer.
//!
//! Owns reading and drawing only: it never changes the registry, never decides placement, and
//! takes the registry by reference so callers keep the lock as short as building the view.

mod build;
mod devices;
mod fetch;
mod pools;
mod svg;
mod table;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use crate::lifecycle::refusals::RefusalView;

pub use build::numa_nodes;
pub use devices::{add_devices, DeviceView};
pub use fetch::{fetch, FetchError};
pub use pools::view_pool_counts;
pub use svg::render_svg;
pub use table::{numa_map, render_table};

/// Everything `GET /placement` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementView {
    /// The CPU Manager's reserved set (Linux list format).
    #[serde(rename = "reservedCPUs")]
    pub reserved_cpus: String,
    /// The node shared pool.
    #[serde(rename = "sharedCPUs")]
    pub shared_cpus: String,
    pub numa_nodes: Vec<NumaView>,
    /// Pods by UID.
    pub pods: Vec<PodView>,
    /// Pods refused at RunPodSandbox that the kubelet is still retrying, by UID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusalView>,
    /// The watched pod-spec sources and their state (`live`, `connecting`, `absent`); empty
    /// when specs are inferred from CRI alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_knowledge: Vec<KnowledgeView>,
    /// Device plugin devices whose plugin gives no NUMA node (from the kubelet's PodResources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices_without_numa: Vec<DeviceView>,
}

/// One watched pod-spec source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnowledgeView {
    /// `pods-api` or `apiserver`.
    pub source: String,
    /// `live`, `connecting` or `absent`.
    pub link: String,
}

/// One NUMA node: its CPUs in topology order and its memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NumaView {
    pub id: u32,
    pub cpus: Vec<CpuView>,
    /// Bytes of memory the machine has on this node.
    pub memory_total: u64,
    /// Accounting per resource (`memory`, `hugepages-<size>`); empty when the Memory Manager
    /// does not manage memory (`memoryManagerPolicy: None`).
    pub memory: Vec<MemoryView>,
    /// Device plugin devices on this node (their `TopologyInfo`), from the kubelet's
    /// PodResources; a device on several nodes is under each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceView>,
}

/// One CPU and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuView {
    pub id: u32,
    pub core: u32,
    pub socket: u32,
    pub owner: Owner,
}

/// Who holds a CPU. Precedence when several apply: exclusive, pod pool, reserved, shared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Owner {
    /// An exclusive slice of these containers (one, unless the state is inconsistent).
    #[serde(rename_all = "camelCase")]
    Exclusive {
        containers: Vec<ContainerRef>,
        /// The slice lies inside its pod's CPU budget (pod scope).
        #[serde(default)]
        in_pod_budget: bool,
    },
    /// The shared pool of a pod's CPU budget (`namespace/name`).
    PodPool { pod: String },
    /// `reservedSystemCPUs` (or the count reserved by kubeReserved + systemReserved).
    Reserved,
    /// The node shared pool.
    Shared,
    /// Held by something numa-shim did not place (adopted or declared unavailable).
    Unavailable,
}

/// A container by pod (`namespace/name`) and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRef {
    pub pod: String,
    pub container: String,
}

/// Memory accounting of one resource on one NUMA node, in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryView {
    pub resource: String,
    pub total: u64,
    /// `reservedMemory` for this node.
    pub system_reserved: u64,
    /// Held by pod budgets (pod scope).
    pub pod: u64,
    /// Held by containers outside pod budgets.
    pub exclusive: u64,
    pub free: u64,
}

/// One pod numa-shim admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// Where the spec came from: `pods-api`, `apiserver`, `inferred` (from CRI alone) or
    /// `adopted` (found running at start-up); `spec` for a watched source not recorded.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// The pod CPU budget in pod scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// NUMA nodes of the pod memory budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<String>,
    pub containers: Vec<ContainerView>,
}

/// One live container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    pub name: String,
    /// The runtime's id once created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub cpus: String,
    /// `exclusive`, `pod-shared` or `node-shared`.
    pub pool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<String>,
    /// The device plugin devices the kubelet handed it (`resource=id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

impl PlacementView {
    /// The view as `GET /placement` sends it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_string())
    }
}

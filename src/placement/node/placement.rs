//! What a `Node` answers about a pod or container: CPUs, isolation level, CFS quota decision,
//! memory NUMA nodes and blocks.

use super::Node;
use crate::cpuset::CpuSet;
use crate::placement::memory::Block;
use crate::placement::qos::IsolationLevel;
use crate::placement::{ContainerRole, ContainerSpec, NumaMask, PodSpec, TopologyHint};

/// kubelet `ResourceIsolationLevel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// No explicit cpuset: the node shared pool.
    Host,
    /// The pod shared pool of a PLRM pod.
    Pod,
    /// An exclusive slice.
    Container,
}

/// What to do with the CFS quota the kubelet computed for the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuQuota {
    /// Keep the kubelet's value.
    Keep,
    /// `cpu_quota = -1` (exclusive CPUs, `DisableCPUQuotaWithExclusiveCPUs`).
    Unlimited,
}

impl CpuQuota {
    /// The quota to send: -1 when unlimited, else `requested`.
    pub fn apply(self, requested: i64) -> i64 {
        match self {
            Self::Keep => requested,
            Self::Unlimited => -1,
        }
    }
}

/// One container's placement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerPlacement {
    pub name: String,
    pub role: ContainerRole,
    /// Exclusive slice, pod shared pool, or the node shared pool at the time of asking.
    pub cpus: CpuSet,
    pub exclusive: bool,
    pub isolation: Isolation,
    pub cpu_quota: CpuQuota,
    /// `cpuset.mems`; `None` leaves it unset. Serialized as a list of node ids.
    #[serde(with = "mask_ids")]
    pub memory_nodes: Option<NumaMask>,
    /// Memory blocks (PodResources `GetMemory`).
    pub memory: Vec<Block>,
    /// Device plugin devices held: resource → ids ascending.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub devices: std::collections::BTreeMap<String, Vec<String>>,
    /// The Topology Manager's hint for the container (None with policy none). Not serialized.
    #[serde(skip)]
    pub hint: Option<TopologyHint>,
}

impl ContainerPlacement {
    /// CRI `cpuset_mems` as the kubelet writes it: ids ascending, comma separated, no ranges.
    pub fn cpuset_mems(&self) -> Option<String> {
        let ids: Vec<String> = self.memory_nodes?.ids().map(|i| i.to_string()).collect();
        Some(ids.join(","))
    }
}

/// One pod's placement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodPlacement {
    pub uid: String,
    /// The pod CPU bubble (PLRM pod scope), if any.
    pub cpus: Option<CpuSet>,
    /// The pod memory bubble blocks (PLRM pod scope), empty if none.
    pub memory: Vec<Block>,
    /// Whether the sandbox / pod cgroup gets an unlimited CFS quota.
    pub cpu_quota: CpuQuota,
    /// Live containers, init containers first, in spec order.
    pub containers: Vec<ContainerPlacement>,
}

pub(super) fn container_placement(
    node: &Node,
    pod: &PodSpec,
    c: &ContainerSpec,
    hint: Option<TopologyHint>,
) -> ContainerPlacement {
    let explicit = node.cpu.container_cpus(&pod.uid, &c.name);
    let isolation = match node.cpu.isolation(pod, c) {
        IsolationLevel::Host => Isolation::Host,
        IsolationLevel::Pod => Isolation::Pod,
        IsolationLevel::Container => Isolation::Container,
    };
    let exclusive = isolation == Isolation::Container;
    ContainerPlacement {
        name: c.name.clone(),
        role: c.role,
        cpus: explicit.unwrap_or_else(|| node.cpu.shared()),
        exclusive,
        isolation,
        cpu_quota: if exclusive {
            CpuQuota::Unlimited
        } else {
            CpuQuota::Keep
        },
        memory_nodes: node.memory.memory_nodes(&pod.uid, &c.name),
        memory: node
            .memory
            .container_blocks(&pod.uid, &c.name)
            .map(<[Block]>::to_vec)
            .unwrap_or_default(),
        devices: node.devices.container_devices(&pod.uid, &c.name),
        hint,
    }
}

pub(super) fn pod_placement(
    node: &Node,
    pod: &PodSpec,
    containers: Vec<ContainerPlacement>,
) -> PodPlacement {
    // UNCERTAIN: kubelet 1.37 `PodHasExclusiveCPUs` with PLRM: one exclusive + one pod-shared
    // container → false (container_manager_linux_test.go). Read here as: some container is
    // exclusive and none runs on the pod shared pool.
    let any_exclusive = containers.iter().any(|c| c.exclusive);
    let any_pod_pool = containers.iter().any(|c| c.isolation == Isolation::Pod);
    PodPlacement {
        uid: pod.uid.clone(),
        cpus: node.cpu.pod_cpus(&pod.uid),
        memory: node
            .memory
            .pod_blocks(&pod.uid)
            .map(<[Block]>::to_vec)
            .unwrap_or_default(),
        cpu_quota: if any_exclusive && !any_pod_pool {
            CpuQuota::Unlimited
        } else {
            CpuQuota::Keep
        },
        containers,
    }
}

mod mask_ids {
    use crate::placement::NumaMask;

    pub(super) fn serialize<S: serde::Serializer>(
        m: &Option<NumaMask>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&m.map(|m| m.ids().collect::<Vec<u32>>()), s)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<NumaMask>, D::Error> {
        let ids: Option<Vec<u32>> = serde::Deserialize::deserialize(d)?;
        Ok(ids.map(NumaMask::from_ids))
    }
}

//! Snapshot → PodResources v1 messages. Pure mapping, no lock, no I/O.

use super::snapshot::{ContainerEntry, PodEntry, Snapshot};
use crate::cpuset::CpuSet;
use crate::placement::memory::Block;
use crate::proto::podresources::v1 as pr;

/// CPU ids ascending, as the kubelet sends them (`cpuset.List()`).
pub fn cpu_ids(cpus: &CpuSet) -> Vec<i64> {
    cpus.iter().map(i64::from).collect()
}

/// One `ContainerMemory` per block: type (`memory`, `hugepages-<size>`), size, NUMA nodes.
pub fn memory(blocks: &[Block]) -> Vec<pr::ContainerMemory> {
    blocks
        .iter()
        .map(|b| pr::ContainerMemory {
            memory_type: b.resource.clone(),
            size: b.size,
            topology: Some(topology(&b.numa)),
        })
        .collect()
}

fn topology(numa: &[u32]) -> pr::TopologyInfo {
    pr::TopologyInfo {
        nodes: numa
            .iter()
            .map(|&id| pr::NumaNode { id: i64::from(id) })
            .collect(),
    }
}

/// One pod: pod-level `cpu_ids`/`memory` = the bubble (empty without one), container `cpu_ids`
/// only for exclusive containers.
pub fn pod_resources(pod: &PodEntry) -> pr::PodResources {
    pr::PodResources {
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        containers: pod.containers.iter().map(container).collect(),
        cpu_ids: pod.cpus.as_ref().map(cpu_ids).unwrap_or_default(),
        memory: memory(&pod.memory),
    }
}

fn container(c: &ContainerEntry) -> pr::ContainerResources {
    pr::ContainerResources {
        name: c.name.clone(),
        devices: Vec::new(),
        cpu_ids: c.exclusive_cpus.as_ref().map(cpu_ids).unwrap_or_default(),
        memory: memory(&c.memory),
        dynamic_resources: Vec::new(),
    }
}

/// `List` without the kubelet's devices.
pub fn list_response(snapshot: &Snapshot) -> pr::ListPodResourcesResponse {
    pr::ListPodResourcesResponse {
        pod_resources: snapshot.pods.iter().map(pod_resources).collect(),
    }
}

/// `GetAllocatableResources` without the kubelet's devices.
pub fn allocatable_response(cpus: &CpuSet, blocks: &[Block]) -> pr::AllocatableResourcesResponse {
    pr::AllocatableResourcesResponse {
        devices: Vec::new(),
        cpu_ids: cpu_ids(cpus),
        memory: memory(blocks),
    }
}

#[cfg(test)]
mod tests;

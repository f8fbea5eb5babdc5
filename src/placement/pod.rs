//! The pod as the decision core sees it: roles, requests and limits already parsed and defaulted
//! (Kubernetes API defaulting: a limit without a request sets the request). Built from a v1 Pod
//! manifest (`simulate`), from the kubelet Pods API, or inferred from CRI requests.

use std::collections::BTreeMap;

/// Quantities of one resource list. CPU in millicores, memory and hugepages in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceList {
    pub cpu_milli: Option<u64>,
    pub memory: Option<u64>,
    /// Hugepage size in bytes → bytes requested (`hugepages-2Mi: 4Mi` → {2097152: 4194304}).
    pub hugepages: BTreeMap<u64, u64>,
    /// Extended resources (`example.com/gpu: 2`) by name → count. Device plugin resources among
    /// them are what the device manager hands out; the others are ignored by placement.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, u64>,
}

/// Requests and limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resources {
    pub requests: ResourceList,
    pub limits: ResourceList,
}

/// Which list of the pod spec a container comes from, and how it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRole {
    /// A regular init container: runs to completion before the next one starts.
    Init,
    /// An init container with `restartPolicy: Always`: lives as long as the pod.
    Sidecar,
    /// An entry of `spec.containers`.
    App,
}

/// One container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerSpec {
    pub name: String,
    pub role: ContainerRole,
    pub resources: Resources,
}

/// One pod. `init_containers` holds regular init containers and sidecars in spec order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodSpec {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `spec.resources` (pod-level resources), when set.
    pub resources: Option<Resources>,
    pub init_containers: Vec<ContainerSpec>,
    pub containers: Vec<ContainerSpec>,
}

//! The hint-provider contract between the Topology Manager and the CPU / Memory Managers
//! (kubelet's `topologymanager.HintProvider`), with the chosen hint passed explicitly.

use std::collections::BTreeMap;

use super::{AdmissionError, ContainerSpec, PodSpec, TopologyHint};

/// Resource name (`cpu`, `memory`, `hugepages-2Mi`) → hints. `None` = no preference (kubelet's nil
/// slice); `Some(vec![])` = the provider cannot satisfy the request on any NUMA combination.
pub type ResourceHints = BTreeMap<String, Option<Vec<TopologyHint>>>;

/// A resource manager that proposes NUMA affinities and allocates once one is chosen.
pub trait HintProvider {
    /// Hints for one container (container scope, or pod scope without pod-level resources per container).
    fn container_hints(&self, pod: &PodSpec, container: &ContainerSpec) -> ResourceHints;
    /// Hints for the whole pod (pod scope).
    fn pod_hints(&self, pod: &PodSpec) -> ResourceHints;
    /// Allocates for one container with the merged hint.
    fn allocate(
        &mut self,
        pod: &PodSpec,
        container: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError>;
    /// Allocates the whole pod at once (pod scope with pod-level resources and the PLRM gate).
    fn allocate_pod(&mut self, pod: &PodSpec, hint: &TopologyHint) -> Result<(), AdmissionError>;
    /// Releases what one container holds, by the kubelet's rules.
    fn remove_container(&mut self, pod_uid: &str, container: &str);
}

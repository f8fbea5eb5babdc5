//! The hint-provider contract between the Topology Manager and the CPU / Memory Managers
//! (kubelet's `topologymanager.HintProvider`), with the chosen hint passed explicitly.

use std::collections::BTreeMap;

use super::topology_manager::{Exhausted, HintSet};
use super::{AdmissionError, ContainerSpec, PodSpec, TopologyHint};

/// Resource name (`cpu`, `memory`, `hugepages-2Mi`) → hints. `None` = no preference (kubelet's nil
/// slice); `Some(vec![])` = the provider cannot satisfy the request on any NUMA combination.
pub type ResourceHints = BTreeMap<String, Option<Vec<TopologyHint>>>;

/// `ResourceHints` with each list as a `HintSet`: spelled out, or as the rule that generates it
/// (what the Topology Manager merges without walking 2^N masks).
pub type HintSets = BTreeMap<String, Option<HintSet>>;

/// A resource manager that proposes NUMA affinities and allocates once one is chosen.
pub trait HintProvider {
    /// Hints for one container (container scope, or pod scope without pod-level resources per container).
    fn container_hints(&self, pod: &PodSpec, container: &ContainerSpec) -> ResourceHints;
    /// Hints for the whole pod (pod scope).
    fn pod_hints(&self, pod: &PodSpec) -> ResourceHints;
    /// `container_hints` as hint sets (families where the provider has a rule); `Exhausted`
    /// when even describing them needs more search than one decision may spend.
    fn container_hint_sets(
        &self,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<HintSets, Exhausted> {
        Ok(spelled_out(self.container_hints(pod, container)))
    }
    /// `pod_hints` as hint sets.
    fn pod_hint_sets(&self, pod: &PodSpec) -> Result<HintSets, Exhausted> {
        Ok(spelled_out(self.pod_hints(pod)))
    }
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

/// Spelled-out lists as hint sets.
pub fn spelled_out(hints: ResourceHints) -> HintSets {
    hints
        .into_iter()
        .map(|(k, v)| (k, v.map(HintSet::Listed)))
        .collect()
}

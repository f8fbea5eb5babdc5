//! The QoS questions the Memory Manager asks, answered by the shared `placement::qos` helpers.

use crate::placement::config::FeatureGates;
use crate::placement::qos::{self, PodQos};
use crate::placement::{ContainerSpec, PodSpec};

/// Both gates on and the pod uses pod-level resources: the PLRM paths apply.
pub(crate) fn plrm(pod: &PodSpec, gates: FeatureGates) -> bool {
    qos::pod_level_managed(pod, &gates)
}

/// The pod has pod-level resources but a gate is off: managers skip it entirely.
pub(crate) fn skipped_by_gates(pod: &PodSpec, gates: FeatureGates) -> bool {
    qos::is_pod_level_resources_set(pod)
        && !(gates.pod_level_resources && gates.pod_level_resource_managers)
}

/// kubelet `GetPodQOS(pod) == Guaranteed`.
pub(crate) fn is_guaranteed(pod: &PodSpec, gates: FeatureGates) -> bool {
    qos::pod_qos(pod, &gates) == PodQos::Guaranteed
}

/// kubelet `IsContainerEquivalentQOSGuaranteed`.
pub(crate) fn container_equivalent_guaranteed(c: &ContainerSpec) -> bool {
    qos::is_container_equivalent_guaranteed(c)
}

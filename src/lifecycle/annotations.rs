//! numa-shim's marks on what it forwards: on the sandbox, the pod spec it admitted; on each
//! container, the decision it applied (and, for an inferred pod, the container's inferred spec).
//! Written once, on the way to the runtime (the relay's hook puts them into the wire patch).
//! Read back only by start-up recovery, from what the runtime lists — never on the intercepted
//! call itself, where the decision travels as a value (`relay::lifecycle_hook::Decided`).

use std::collections::{BTreeMap, HashMap};

use super::registry::{ContainerDecision, Source};
use crate::cpuset::CpuSet;
use crate::placement::node::Isolation;
use crate::placement::{ContainerSpec, PodSpec};

/// Annotation numa-shim adds to containers it placed: the cpuset it decided.
pub const CPUS_ANNOTATION: &str = "numa-shim.io/cpus";
/// Annotation on containers with an exclusive slice ("true"/"false").
pub const EXCLUSIVE_ANNOTATION: &str = "numa-shim.io/exclusive";
/// Annotation numa-shim adds to sandboxes it admitted: the pod spec it admitted, as JSON.
pub const POD_ANNOTATION: &str = "numa-shim.io/pod";
/// Annotation with the container's isolation level ("host", "pod", "container").
pub const ISOLATION_ANNOTATION: &str = "numa-shim.io/isolation";
/// Annotation on containers of inferred pods: the container as numa-shim inferred it (JSON), so
/// that recovery without a checkpoint can rebuild the pod's spec.
pub const CONTAINER_ANNOTATION: &str = "numa-shim.io/container";

/// The annotations of an admitted pod's sandbox (RunPodSandbox): the pod spec it was admitted
/// with.
pub fn sandbox_annotations(spec: &PodSpec, source: Source) -> BTreeMap<String, String> {
    [(POD_ANNOTATION.to_string(), pod_annotation(spec, source))].into()
}

/// The annotations of a placed container (CreateContainer): its decision and, for a container
/// of an inferred pod, its inferred spec.
pub fn container_annotations(
    decision: &ContainerDecision,
    inferred: Option<&ContainerSpec>,
) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = [
        (CPUS_ANNOTATION.to_string(), decision.cpus.to_string()),
        (
            EXCLUSIVE_ANNOTATION.to_string(),
            decision.exclusive.to_string(),
        ),
        (
            ISOLATION_ANNOTATION.to_string(),
            isolation_name(decision.isolation).to_string(),
        ),
    ]
    .into();
    if let Some(spec) = inferred.and_then(|c| serde_json::to_string(c).ok()) {
        annotations.insert(CONTAINER_ANNOTATION.to_string(), spec);
    }
    annotations
}

/// A decision as numa-shim annotated it on a container the runtime lists (recovery only).
pub fn decision_from_annotations(
    annotations: &HashMap<String, String>,
    mems: Option<&str>,
) -> Option<ContainerDecision> {
    let cpus = CpuSet::parse(annotations.get(CPUS_ANNOTATION)?).ok()?;
    let exclusive = annotations
        .get(EXCLUSIVE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let isolation = annotations
        .get(ISOLATION_ANNOTATION)
        .and_then(|v| parse_isolation(v))
        .unwrap_or(Isolation::Host);
    Some(ContainerDecision {
        cpus,
        mems: mems.filter(|m| !m.is_empty()).map(str::to_string),
        cpu_quota: exclusive.then_some(-1),
        exclusive,
        isolation,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PodAnnotation {
    source: Source,
    spec: PodSpec,
}

/// The sandbox annotation value for an admitted pod.
pub fn pod_annotation(spec: &PodSpec, source: Source) -> String {
    let value = PodAnnotation {
        source,
        spec: spec.clone(),
    };
    serde_json::to_string(&value).unwrap_or_default()
}

/// Reads a sandbox annotation written by [`pod_annotation`].
pub fn parse_pod_annotation(value: &str) -> Option<(PodSpec, Source)> {
    let parsed: PodAnnotation = serde_json::from_str(value).ok()?;
    Some((parsed.spec, parsed.source))
}

/// The annotation value of an isolation level.
pub fn isolation_name(isolation: Isolation) -> &'static str {
    match isolation {
        Isolation::Host => "host",
        Isolation::Pod => "pod",
        Isolation::Container => "container",
    }
}

/// Reads an isolation annotation value.
pub fn parse_isolation(value: &str) -> Option<Isolation> {
    match value {
        "host" => Some(Isolation::Host),
        "pod" => Some(Isolation::Pod),
        "container" => Some(Isolation::Container),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a container's annotations write, recovery reads back the same decision.
    #[test]
    fn a_container_s_annotations_read_back_as_its_decision() {
        for (isolation, exclusive) in [
            (Isolation::Container, true),
            (Isolation::Pod, false),
            (Isolation::Host, false),
        ] {
            let decision = ContainerDecision {
                cpus: CpuSet::parse("2-3").unwrap(),
                mems: Some("1".into()),
                cpu_quota: exclusive.then_some(-1),
                exclusive,
                isolation,
            };
            let annotations: HashMap<String, String> =
                container_annotations(&decision, None).into_iter().collect();
            let back = decision_from_annotations(&annotations, Some("1")).unwrap();
            assert_eq!(back, decision);
        }
    }
}

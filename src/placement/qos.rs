//! QoS classes and eligibility helpers the resource managers share: the pod QoS class (from
//! pod-level values when `spec.resources` is set), kubelet's `IsContainerEquivalentQOSGuaranteed`,
//! `IsPodLevelResourcesSet` and the `ResourceIsolationLevel` of a container.
//!
//! Pure functions over [`PodSpec`]; no state.

use super::config::FeatureGates;
use super::pod::{ContainerSpec, PodSpec, ResourceList};

/// `v1.PodQOSClass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodQos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// kubelet's `cmqos.ResourceIsolationLevel`: how a container's CPUs are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationLevel {
    /// Node shared pool; normal CFS quota.
    Host,
    /// Pod shared pool (pod-level resources); quota kept.
    Pod,
    /// Exclusive CPUs; quota disabled.
    Container,
}

/// `resourcehelper.IsPodLevelResourcesSet`: `spec.resources` names cpu, memory or hugepages.
pub fn is_pod_level_resources_set(pod: &PodSpec) -> bool {
    pod.resources.as_ref().is_some_and(|r| {
        let set = |l: &ResourceList| {
            l.cpu_milli.is_some() || l.memory.is_some() || !l.hugepages.is_empty()
        };
        set(&r.requests) || set(&r.limits)
    })
}

/// Pod-level resources are in effect for the resource managers (both gates on and set).
pub fn pod_level_managed(pod: &PodSpec, gates: &FeatureGates) -> bool {
    gates.pod_level_resources
        && gates.pod_level_resource_managers
        && is_pod_level_resources_set(pod)
}

/// `v1qos.GetPodQOS`: from pod-level values when `PodLevelResources` is on and they are set,
/// otherwise from the sums over all init and app containers.
pub fn pod_qos(pod: &PodSpec, gates: &FeatureGates) -> PodQos {
    let pos = |v: Option<u64>| v.filter(|&x| x > 0);
    let mut req = [None::<u64>; 2];
    let mut lim = [None::<u64>; 2];
    let mut guaranteed = true;
    let add = |acc: &mut [Option<u64>; 2], l: &ResourceList| {
        for (i, v) in [pos(l.cpu_milli), pos(l.memory)].into_iter().enumerate() {
            if let Some(v) = v {
                acc[i] = Some(acc[i].unwrap_or(0) + v);
            }
        }
    };
    match pod.resources.as_ref() {
        Some(r) if gates.pod_level_resources && is_pod_level_resources_set(pod) => {
            add(&mut req, &r.requests);
            add(&mut lim, &r.limits);
            if pos(r.limits.cpu_milli).is_none() || pos(r.limits.memory).is_none() {
                guaranteed = false;
            }
        }
        _ => {
            for c in pod.init_containers.iter().chain(&pod.containers) {
                let r = &c.resources;
                add(&mut req, &r.requests);
                add(&mut lim, &r.limits);
                if pos(r.limits.cpu_milli).is_none() || pos(r.limits.memory).is_none() {
                    guaranteed = false;
                }
            }
        }
    }
    if req.iter().all(Option::is_none) && lim.iter().all(Option::is_none) {
        return PodQos::BestEffort;
    }
    if guaranteed {
        for i in 0..2 {
            if let Some(r) = req[i] {
                if lim[i] != Some(r) {
                    guaranteed = false;
                }
            }
        }
    }
    let count = |a: &[Option<u64>; 2]| a.iter().filter(|v| v.is_some()).count();
    if guaranteed && count(&req) == count(&lim) {
        PodQos::Guaranteed
    } else {
        PodQos::Burstable
    }
}

/// `cmqos.IsContainerEquivalentQOSGuaranteed`: CPU and memory requests non-zero and equal to limits.
pub fn is_container_equivalent_guaranteed(c: &ContainerSpec) -> bool {
    let r = &c.resources;
    let same = |req: Option<u64>, lim: Option<u64>| req.unwrap_or(0) != 0 && req == lim;
    same(r.requests.cpu_milli, r.limits.cpu_milli) && same(r.requests.memory, r.limits.memory)
}

/// `resourcesQualifyForExclusiveCPUs`: equivalent-Guaranteed with a whole-CPU limit.
pub fn qualifies_for_exclusive_cpus(c: &ContainerSpec) -> bool {
    is_container_equivalent_guaranteed(c)
        && c.resources
            .limits
            .cpu_milli
            .unwrap_or(0)
            .is_multiple_of(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::pod::{ContainerRole, Resources};
    use crate::placement::test_pods::{app, pod_of};

    fn res(cpu: Option<u64>, mem: Option<u64>) -> Resources {
        let l = ResourceList {
            cpu_milli: cpu,
            memory: mem,
            ..Default::default()
        };
        Resources {
            requests: l.clone(),
            limits: l,
        }
    }

    #[test]
    fn qos_from_containers_and_pod_level() {
        let g = FeatureGates::default();
        let gib = Some(1 << 30);
        assert_eq!(
            pod_qos(
                &pod_of("u", None, vec![app("c0", res(Some(1000), gib))]),
                &g
            ),
            PodQos::Guaranteed
        );
        assert_eq!(
            pod_qos(
                &pod_of(
                    "u",
                    None,
                    vec![app("c0", res(Some(1000), gib)), app("c1", res(None, None))]
                ),
                &g
            ),
            PodQos::Burstable
        );
        assert_eq!(
            pod_qos(&pod_of("u", None, vec![app("c0", res(None, None))]), &g),
            PodQos::BestEffort
        );
        // Pod-level values decide alone.
        let p = pod_of(
            "u",
            Some(res(Some(2000), gib)),
            vec![app("c0", res(None, None))],
        );
        assert_eq!(pod_qos(&p, &g), PodQos::Guaranteed);
        let mut half = res(Some(2000), gib);
        half.limits.cpu_milli = Some(3000);
        assert_eq!(
            pod_qos(
                &pod_of("u", Some(half), vec![app("c0", res(Some(1000), gib))]),
                &g
            ),
            PodQos::Burstable
        );
        // Without the gate the containers decide.
        let off = FeatureGates {
            pod_level_resources: false,
            pod_level_resource_managers: false,
        };
        assert_eq!(pod_qos(&p, &off), PodQos::BestEffort);
    }

    #[test]
    fn equivalent_guaranteed_needs_cpu_and_memory() {
        let gib = Some(1 << 30);
        let c = |r| ContainerSpec {
            name: "c".into(),
            role: ContainerRole::App,
            resources: r,
        };
        assert!(is_container_equivalent_guaranteed(&c(res(Some(1500), gib))));
        assert!(!qualifies_for_exclusive_cpus(&c(res(Some(1500), gib))));
        assert!(qualifies_for_exclusive_cpus(&c(res(Some(2000), gib))));
        assert!(!is_container_equivalent_guaranteed(&c(res(
            Some(1000),
            None
        ))));
        assert!(!is_container_equivalent_guaranteed(&c(res(None, gib))));
    }
}

//! The API server's defaulting and the validation placement relies on, on the resource lists of
//! one Pod, as kubernetes v1.37.2 does them: container limits default requests
//! (`SetDefaults_Pod`), then, with PodLevelResourcesFixDefaulting (beta, on), the pod's
//! `PrepareForCreate` runs `DefaultPodLevelResources` (`pkg/api/pod/util.go`: hugepage limits,
//! requests, limits); validation follows `validateResourceRequirements` and the pod-level
//! checks of `pkg/apis/core/validation`. Aggregates are the sidecar-aware ones of
//! `component-helpers/resource`.

use std::collections::{BTreeMap, BTreeSet};

use super::{hugepage_size, PodError, ResourceRequirements, Spec};
use crate::placement;
use crate::quantity::Quantity;

/// Resource name → quantity, as written in a manifest.
pub type ResourceMap = BTreeMap<String, Quantity>;

/// Requests and limits of one container or of the pod, after defaulting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Res {
    pub(super) requests: ResourceMap,
    pub(super) limits: ResourceMap,
}

/// Every resource list of a pod after defaulting, in spec order.
#[derive(Debug, Clone)]
pub(super) struct Defaulted<'a> {
    spec: &'a Spec,
    pub(super) pod: Option<Res>,
    pub(super) init: Vec<Res>,
    pub(super) apps: Vec<Res>,
}

impl Res {
    fn from_manifest(r: &ResourceRequirements) -> Self {
        Self {
            requests: r.requests.clone().unwrap_or_default(),
            limits: r.limits.clone().unwrap_or_default(),
        }
    }

    /// Container defaulting: a limit without a request sets the request.
    fn default_requests_from_limits(&mut self) {
        for (k, v) in &self.limits {
            self.requests.entry(k.clone()).or_insert(*v);
        }
    }

    /// Whether any request or limit is written (the pod-level defaulting runs only then).
    fn is_set(&self) -> bool {
        !self.requests.is_empty() || !self.limits.is_empty()
    }

    /// Whether any pod-level-supported resource is set (`IsPodLevelResourcesSet`).
    pub(super) fn has_supported(&self) -> bool {
        self.requests
            .keys()
            .chain(self.limits.keys())
            .any(|k| is_pod_level(k))
    }

    pub(super) fn to_resources(&self, field: &str) -> Result<placement::Resources, PodError> {
        Ok(placement::Resources {
            requests: super::to_resource_list(&self.requests, &format!("{field}.requests"))?,
            limits: super::to_resource_list(&self.limits, &format!("{field}.limits"))?,
        })
    }
}

impl ResourceRequirements {
    /// The resources of an in-place resize (`kubectl patch --subresource resize`), requests
    /// defaulted from limits as the API server does.
    pub fn to_resources(&self, field: &str) -> Result<placement::Resources, PodError> {
        let mut r = Res::from_manifest(self);
        r.default_requests_from_limits();
        r.to_resources(field)
    }
}

impl<'a> Defaulted<'a> {
    /// Applies container defaulting, then pod-level defaulting (PodLevelResources is on in every
    /// cluster numa-shim targets: beta and default-on since 1.34).
    pub(super) fn new(spec: &'a Spec) -> Self {
        let list = |cs: &[super::Container]| -> Vec<Res> {
            cs.iter()
                .map(|c| {
                    let mut r = Res::from_manifest(&c.resources);
                    r.default_requests_from_limits();
                    r
                })
                .collect()
        };
        let mut d = Self {
            spec,
            pod: spec.resources.as_ref().map(Res::from_manifest),
            init: list(&spec.init_containers),
            apps: list(&spec.containers),
        };
        d.default_hugepage_pod_limits();
        d.default_pod_requests();
        d.default_pod_limits();
        d
    }

    fn is_sidecar(&self, i: usize) -> bool {
        self.spec.init_containers[i].restart_policy.as_deref() == Some("Always")
    }

    /// Sidecar-aware aggregate of container requests or limits (KEP-753 formula):
    /// max(sum(apps) + sum(sidecars), max over regular init i of (init_i + sidecars before i)).
    fn aggregate(&self, pick: impl Fn(&Res) -> &ResourceMap) -> ResourceMap {
        let mut result = ResourceMap::new();
        for r in &self.apps {
            add(&mut result, pick(r));
        }
        let mut sidecars = ResourceMap::new();
        let mut init_peak = ResourceMap::new();
        for (i, r) in self.init.iter().enumerate() {
            let use_now = if self.is_sidecar(i) {
                add(&mut result, pick(r));
                add(&mut sidecars, pick(r));
                sidecars.clone()
            } else {
                let mut combined = pick(r).clone();
                add(&mut combined, &sidecars);
                combined
            };
            max_into(&mut init_peak, &use_now);
        }
        max_into(&mut result, &init_peak);
        result
    }

    fn all_containers(&self) -> impl Iterator<Item = &Res> {
        self.init.iter().chain(&self.apps)
    }

    /// `defaultHugePagePodLevelLimits`: pod hugepage limits from aggregated container limits,
    /// where the pod names neither a request nor a limit for that size.
    fn default_hugepage_pod_limits(&mut self) {
        if !self.pod.as_ref().is_some_and(Res::is_set) {
            return;
        }
        let aggregate = self.aggregate(|r| &r.limits);
        let Some(pod) = &mut self.pod else { return };
        for (k, v) in aggregate {
            if is_hugepages(&k) && !pod.requests.contains_key(&k) {
                pod.limits.entry(k).or_insert(v);
            }
        }
    }

    /// `defaultPodLevelRequests`: missing pod requests of cpu and memory come from the
    /// aggregated container requests, then any still missing from the pod limits.
    fn default_pod_requests(&mut self) {
        if !self.pod.as_ref().is_some_and(Res::is_set) {
            return;
        }
        let aggregate = self.aggregate(|r| &r.requests);
        let Some(pod) = &mut self.pod else { return };
        for (k, v) in aggregate {
            if is_pod_level(&k) && is_overcommittable(&k) {
                pod.requests.entry(k).or_insert(v);
            }
        }
        for (k, v) in pod.limits.clone() {
            if is_pod_level(&k) {
                pod.requests.entry(k).or_insert(v);
            }
        }
    }

    /// `defaultPodLevelLimits`: a pod request without a pod limit gets the limit
    /// max(request, aggregated container limits) when every container (init containers and
    /// sidecars included) has a limit for that resource.
    fn default_pod_limits(&mut self) {
        let Some(pod) = self.pod.as_ref().filter(|p| p.is_set()) else {
            return;
        };
        let candidates: Vec<String> = pod
            .requests
            .keys()
            .filter(|k| is_pod_level(k) && !pod.limits.contains_key(*k))
            .filter(|k| self.all_containers().all(|r| r.limits.contains_key(*k)))
            .cloned()
            .collect();
        if candidates.is_empty() {
            return;
        }
        let aggregate = self.aggregate(|r| &r.limits);
        let Some(pod) = &mut self.pod else { return };
        for k in candidates {
            let Some(&limit) = aggregate.get(&k) else {
                continue;
            };
            let request = pod.requests.get(&k).copied().unwrap_or(limit);
            pod.limits
                .insert(k, if request > limit { request } else { limit });
        }
    }

    /// API validation that placement relies on (names, restart policies, signs, hugepage names,
    /// requests ≤ limits, pod-level resources supported and covering the containers' requests).
    pub(super) fn validate(&self) -> Result<(), PodError> {
        let mut names = BTreeSet::new();
        let lists = [
            (
                "spec.initContainers",
                &self.spec.init_containers,
                &self.init,
            ),
            ("spec.containers", &self.spec.containers, &self.apps),
        ];
        for (path, containers, resources) in lists {
            for (i, (c, r)) in containers.iter().zip(resources.iter()).enumerate() {
                let at = format!("{path}[{i}]");
                if c.name.is_empty() {
                    return Err(super::required(&format!("{at}.name")));
                }
                if !names.insert(c.name.as_str()) {
                    return Err(PodError::DuplicateName {
                        field: format!("{at}.name"),
                        name: c.name.clone(),
                    });
                }
                if let Some(p) = c.restart_policy.as_deref() {
                    if !matches!(p, "Always" | "OnFailure" | "Never") {
                        return Err(PodError::RestartPolicy {
                            field: format!("{at}.restartPolicy"),
                            value: p.to_string(),
                        });
                    }
                }
                validate_res(r, &format!("{at}.resources"))?;
            }
        }
        if let Some(pod) = &self.pod {
            self.validate_pod_level(pod)?;
        }
        Ok(())
    }

    fn validate_pod_level(&self, pod: &Res) -> Result<(), PodError> {
        for (list, map) in [("requests", &pod.requests), ("limits", &pod.limits)] {
            if let Some(k) = map.keys().find(|k| !is_pod_level(k)) {
                return Err(PodError::UnsupportedPodResource {
                    field: format!("spec.resources.{list}[{k}]"),
                    resource: k.clone(),
                });
            }
        }
        validate_res(pod, "spec.resources")?;
        let aggregate = self.aggregate(|r| &r.requests);
        for (k, &pod_request) in &pod.requests {
            if let Some(&sum) = aggregate.get(k) {
                if pod_request < sum {
                    return Err(PodError::BelowContainerRequests {
                        field: format!("spec.resources.requests[{k}]"),
                        aggregate: sum,
                    });
                }
            }
        }
        let limits = self.aggregate(|r| &r.limits);
        for (k, &sum) in limits.iter().filter(|(k, _)| is_hugepages(k)) {
            if let Some(&pod_limit) = pod.limits.get(k) {
                if sum > pod_limit {
                    return Err(PodError::BelowContainerLimits {
                        field: format!("spec.resources.limits[{k}]"),
                        aggregate: sum,
                    });
                }
            }
        }
        // Only `spec.containers`, as the API server checks.
        for (i, c) in self.apps.iter().enumerate() {
            for (k, &limit) in &c.limits {
                if let Some(&pod_limit) = pod.limits.get(k) {
                    if limit > pod_limit {
                        return Err(PodError::AbovePodLimit {
                            field: format!("spec.resources.containers[{i}][{k}].limits"),
                            limit: pod_limit,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

fn validate_res(r: &Res, field: &str) -> Result<(), PodError> {
    for (list, map) in [("requests", &r.requests), ("limits", &r.limits)] {
        for (k, &v) in map {
            let at = format!("{field}.{list}[{k}]");
            if v.is_negative() {
                return Err(PodError::Negative {
                    field: at,
                    value: v,
                });
            }
            if super::is_extended(k) && !v.is_integral() {
                return Err(PodError::NotInteger { field: at });
            }
            if is_hugepages(k) && hugepage_size(k).is_none() {
                return Err(PodError::HugepageName {
                    field: at,
                    name: k.clone(),
                });
            }
        }
    }
    for (k, &request) in &r.requests {
        match r.limits.get(k) {
            Some(&limit) if !is_overcommittable(k) && request != limit => {
                return Err(PodError::NotEqualToLimit {
                    field: format!("{field}.requests[{k}]"),
                    resource: k.clone(),
                    limit,
                });
            }
            Some(&limit) if request > limit => {
                return Err(PodError::RequestAboveLimit {
                    field: format!("{field}.requests[{k}]"),
                    resource: k.clone(),
                    limit,
                });
            }
            None if !is_overcommittable(k) => {
                return Err(PodError::LimitRequired {
                    field: format!("{field}.limits"),
                });
            }
            _ => {}
        }
    }
    let cpu_or_memory = r
        .requests
        .keys()
        .chain(r.limits.keys())
        .any(|k| matches!(k.as_str(), "cpu" | "memory"));
    let hugepages = r
        .requests
        .keys()
        .chain(r.limits.keys())
        .any(|k| is_hugepages(k));
    if hugepages && !cpu_or_memory {
        return Err(PodError::HugepagesAlone {
            field: field.to_string(),
        });
    }
    Ok(())
}

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// `IsSupportedPodLevelResource`: cpu, memory and hugepages-*.
fn is_pod_level(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || is_hugepages(name)
}

/// `IsOvercommitAllowed`: native resources but hugepages (extended resources are not).
fn is_overcommittable(name: &str) -> bool {
    !is_hugepages(name) && !super::is_extended(name)
}

fn add(into: &mut ResourceMap, other: &ResourceMap) {
    for (k, &v) in other {
        let sum = into.get(k).map_or(v, |&cur| cur.saturating_add(v));
        into.insert(k.clone(), sum);
    }
}

fn max_into(into: &mut ResourceMap, other: &ResourceMap) {
    for (k, &v) in other {
        match into.get(k) {
            Some(&cur) if cur >= v => {}
            _ => {
                into.insert(k.clone(), v);
            }
        }
    }
}

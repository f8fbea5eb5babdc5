//! The v1 Pod subset placement needs, read from a manifest: metadata (name, namespace, uid),
//! `spec.resources`, `spec.initContainers` (with `restartPolicy`) and `spec.containers`, each with
//! requests and limits of any resource. Unknown keys are ignored, so real manifests load unchanged.
//!
//! `to_pod_spec` applies the API server's defaulting (container limits without requests, KEP-2837
//! pod-level requests/limits), the validation placement relies on, and converts to
//! `placement::PodSpec`. Never decides placement; never reads files.

mod defaults;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::placement::{self, ContainerRole, ContainerSpec};
use crate::quantity::Quantity;

pub use defaults::ResourceMap;

/// A Pod manifest (`apiVersion: v1`, `kind: Pod`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pod {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub metadata: ObjectMeta,
    pub spec: Spec,
}

/// `metadata`: only what identifies the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
}

/// `spec`: pod-level resources and the two container lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Spec {
    pub resources: Option<ResourceRequirements>,
    pub init_containers: Vec<Container>,
    pub containers: Vec<Container>,
}

/// One entry of `initContainers` or `containers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    pub name: String,
    /// `Always` on an init container makes it a sidecar (restartable init container).
    pub restart_policy: Option<String>,
    pub resources: ResourceRequirements,
}

/// `resources`: requests and limits by resource name (`cpu`, `memory`, `hugepages-2Mi`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceRequirements {
    pub requests: Option<ResourceMap>,
    pub limits: Option<ResourceMap>,
}

/// Why a Pod manifest cannot be placed; `field` is the API field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    #[error("kind {kind:?} is not a Pod")]
    NotAPod { kind: String },
    #[error("{field}: required")]
    Required { field: String },
    #[error("{field}: duplicate container name {name:?}")]
    DuplicateName { field: String, name: String },
    #[error("{field}: unsupported restartPolicy {value:?} (Always, OnFailure or Never)")]
    RestartPolicy { field: String, value: String },
    #[error("{field}: must be greater than or equal to 0, got {value}")]
    Negative { field: String, value: Quantity },
    #[error("{field}: {name:?} is not a valid hugepages resource name (hugepages-<size>, e.g. hugepages-2Mi)")]
    HugepageName { field: String, name: String },
    #[error("{field}: must be less than or equal to {resource} limit of {limit}")]
    RequestAboveLimit {
        field: String,
        resource: String,
        limit: Quantity,
    },
    #[error(
        "{field}: unsupported pod-level resource {resource:?} (cpu, memory, hugepages-<size>)"
    )]
    UnsupportedPodResource { field: String, resource: String },
    #[error(
        "{field}: must be greater than or equal to aggregate container requests of {aggregate}"
    )]
    BelowContainerRequests { field: String, aggregate: Quantity },
    #[error("{field}: must be equal to {resource} limit of {limit}")]
    NotEqualToLimit {
        field: String,
        resource: String,
        limit: Quantity,
    },
    #[error("{field}: Limit must be set for non overcommitable resources")]
    LimitRequired { field: String },
    #[error("{field}: must be an integer")]
    NotInteger { field: String },
    #[error("{field}: HugePages require cpu or memory")]
    HugepagesAlone { field: String },
    #[error("{field}: must be greater than or equal to aggregate container limits of {aggregate}")]
    BelowContainerLimits { field: String, aggregate: Quantity },
    #[error("{field}: must be less than or equal to pod limits of {limit}")]
    AbovePodLimit { field: String, limit: Quantity },
    #[error("{field}: {value} does not fit in 64 bits")]
    TooLarge { field: String, value: Quantity },
}

impl Pod {
    /// Every Pod document of a (possibly multi-document) YAML or JSON text, in order; documents
    /// of other kinds are skipped, a document without `kind` counts as a Pod.
    pub fn all_from_yaml(text: &str) -> Result<Vec<Self>, super::DocumentError> {
        Ok(super::documents::<Self>(text)?
            .into_iter()
            .filter(|d| matches!(d.kind.as_deref(), None | Some("Pod")))
            .collect())
    }

    /// `namespace/name` as far as the manifest gives it (namespace `default` when absent).
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name.as_deref().unwrap_or("")
        )
    }

    /// The pod as the decision core takes it: defaulted, validated, converted. The uid is
    /// `metadata.uid`, or a stable one derived from namespace/name when absent.
    pub fn to_pod_spec(&self) -> Result<placement::PodSpec, PodError> {
        if let Some(kind) = self.kind.as_deref().filter(|k| *k != "Pod") {
            return Err(PodError::NotAPod { kind: kind.into() });
        }
        let name = match self.metadata.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => return Err(required("metadata.name")),
        };
        let namespace = match self.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ => "default".to_string(),
        };
        let uid = match self.metadata.uid.as_deref() {
            Some(uid) if !uid.is_empty() => uid.to_string(),
            _ => derived_uid(&namespace, &name),
        };
        let defaulted = defaults::Defaulted::new(&self.spec);
        defaulted.validate()?;
        let init_containers = self.convert_list(&defaulted, true)?;
        let containers = self.convert_list(&defaulted, false)?;
        let resources = match &defaulted.pod {
            Some(pod) if pod.has_supported() => Some(pod.to_resources("spec.resources")?),
            _ => None,
        };
        Ok(placement::PodSpec {
            uid,
            namespace,
            name,
            resources,
            init_containers,
            containers,
        })
    }

    fn convert_list(
        &self,
        defaulted: &defaults::Defaulted<'_>,
        init: bool,
    ) -> Result<Vec<ContainerSpec>, PodError> {
        let (list, lists, path) = if init {
            (
                &self.spec.init_containers,
                &defaulted.init,
                "spec.initContainers",
            )
        } else {
            (&self.spec.containers, &defaulted.apps, "spec.containers")
        };
        list.iter()
            .zip(lists)
            .enumerate()
            .map(|(i, (c, res))| {
                let role = match (init, c.restart_policy.as_deref()) {
                    (false, _) => ContainerRole::App,
                    (true, Some("Always")) => ContainerRole::Sidecar,
                    (true, _) => ContainerRole::Init,
                };
                Ok(ContainerSpec {
                    name: c.name.clone(),
                    role,
                    resources: res.to_resources(&format!("{path}[{i}].resources"))?,
                })
            })
            .collect()
    }
}

fn required(field: &str) -> PodError {
    PodError::Required {
        field: field.to_string(),
    }
}

/// A stable RFC 9562 version-8 ("custom") UUID from `namespace/name`, so the same manifest always
/// gets the same uid across runs (two FNV-1a 64 hashes with different offsets).
pub fn derived_uid(namespace: &str, name: &str) -> String {
    let key = format!("{namespace}/{name}");
    let fnv = |seed: u64| {
        key.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let hi = fnv(0xcbf2_9ce4_8422_2325);
    let lo = fnv(0x6c62_272e_07bb_0142);
    let bytes: u128 = (u128::from(hi) << 64) | u128::from(lo);
    // version 8 in bits 76..80, variant 0b10 in bits 62..64.
    let bytes = (bytes & !(0xf << 76)) | (0x8 << 76);
    let bytes = (bytes & !(0x3 << 62)) | (0x2 << 62);
    let h = format!("{bytes:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Parses `hugepages-<size>` into the page size in bytes.
pub fn hugepage_size(resource: &str) -> Option<u64> {
    let size = resource.strip_prefix("hugepages-")?;
    let q = Quantity::parse(size).ok()?;
    u64::try_from(q.value()).ok().filter(|&v| v > 0)
}

/// `IsExtendedResourceName`: a domain-qualified name outside `kubernetes.io/` (and not a quota
/// `requests.` name), e.g. `example.com/gpu`, `nvidia.com/gpu`.
pub fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Resource list of the manifest → `placement::ResourceList` (cpu in millicores, bytes otherwise,
/// extended resources as counts). Others (ephemeral-storage) are dropped.
fn to_resource_list(
    map: &BTreeMap<String, Quantity>,
    field: &str,
) -> Result<placement::ResourceList, PodError> {
    let mut out = placement::ResourceList::default();
    let unsigned = |name: &str, v: i64, q: Quantity| {
        u64::try_from(v).map_err(|_| PodError::TooLarge {
            field: format!("{field}[{name}]"),
            value: q,
        })
    };
    for (name, &q) in map {
        match name.as_str() {
            "cpu" => out.cpu_milli = Some(unsigned(name, q.milli_value(), q)?),
            "memory" => out.memory = Some(unsigned(name, q.value(), q)?),
            n if n.starts_with("hugepages-") => {
                let size = hugepage_size(n).ok_or_else(|| PodError::HugepageName {
                    field: format!("{field}[{n}]"),
                    name: n.to_string(),
                })?;
                out.hugepages.insert(size, unsigned(name, q.value(), q)?);
            }
            n if is_extended(n) => {
                out.extended
                    .insert(n.to_string(), unsigned(name, q.value(), q)?);
            }
            _ => {}
        }
    }
    Ok(out)
}

//! Reading a scenario: the file's own fields, then every file it names (topology JSON or sysfs
//! root, KubeletConfiguration file, Pod manifest files), relative to the scenario's directory.

use std::collections::BTreeMap;
use std::path::Path;

use super::refs::{RawStep, RemoveSpec, ResizeSpec, StartSpec, StartValue, StrOr};
use super::{Scenario, ScenarioError, Step};
use crate::cpuset::CpuSet;
use crate::k8s::{documents, KubeletConfiguration, Pod};
use crate::quantity::Quantity;
use crate::topology::{Topology, TopologyError};

/// The scenario file as written.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawScenario {
    /// A case id (kubelet-oracle cases carry one); echoed by `--output steps`.
    #[serde(default)]
    id: Option<String>,
    topology: serde_json::Value,
    #[serde(default)]
    kubelet: serde_json::Value,
    #[serde(default, rename = "unavailableCPUs")]
    unavailable_cpus: Option<String>,
    /// Device plugin resources → their devices (kubelet-oracle's `devices`).
    #[serde(default)]
    devices: BTreeMap<String, Vec<RawDevice>>,
    #[serde(default)]
    pods: Vec<StrOr<Box<Pod>>>,
    #[serde(default)]
    steps: Vec<RawStep>,
    #[serde(default)]
    expect: Option<serde_json::Value>,
}

/// One device of a device plugin resource: its id and the NUMA nodes of its topology.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    id: String,
    #[serde(default)]
    numa: Vec<u32>,
}

struct Loader<'a> {
    origin: &'a str,
    dir: &'a Path,
    /// Keep a pod the API server would refuse as a [`Step::Refused`] instead of failing.
    refusals: bool,
    /// The PodLevelResources gate: off, the API server drops `spec.resources`.
    pod_level_resources: bool,
}

pub(super) fn from_str(
    text: &str,
    origin: &str,
    dir: &Path,
    refusals: bool,
) -> Result<Scenario, ScenarioError> {
    let raw: RawScenario =
        serde_yaml_ng::from_str(text).map_err(|source| ScenarioError::Parse {
            origin: origin.to_string(),
            source: Box::new(source),
        })?;
    let mut l = Loader {
        origin,
        dir,
        refusals,
        pod_level_resources: true,
    };
    let topology = l.topology(&raw.topology)?;
    let kubelet = l.kubelet(&raw.kubelet)?;
    l.pod_level_resources = kubelet
        .feature_gates
        .get("PodLevelResources")
        .copied()
        .unwrap_or(true);
    let unavailable_cpus =
        CpuSet::parse(raw.unavailable_cpus.as_deref().unwrap_or("")).map_err(|source| {
            ScenarioError::UnavailableCpus {
                origin: origin.to_string(),
                source: Box::new(source),
            }
        })?;
    let mut steps = Vec::new();
    for (i, p) in raw.pods.iter().enumerate() {
        steps.extend(l.admissions(&format!("pods[{i}]"), p, true)?);
    }
    for (i, s) in raw.steps.iter().enumerate() {
        if let Some(spec) = &s.resize {
            if s.admit.is_some() || s.start.is_some() || s.remove.is_some() {
                return Err(l.invalid(&format!("steps[{i}]"), "resize is a step of its own"));
            }
            steps.push(l.resize(&format!("steps[{i}].resize"), spec)?);
            continue;
        }
        match (&s.admit, &s.start, &s.remove) {
            (Some(p), None | Some(StartValue::Flag(_)), None) => {
                let start = !matches!(s.start, Some(StartValue::Flag(false)));
                steps.extend(l.admissions(&format!("steps[{i}].admit"), p, start)?);
            }
            (None, Some(StartValue::Containers(spec)), None) => {
                steps.push(start(&format!("steps[{i}].start"), spec));
            }
            (None, None, Some(r)) => steps.push(removal(&format!("steps[{i}].remove"), r)),
            _ => {
                return Err(l.invalid(
                    &format!("steps[{i}]"),
                    "needs exactly one of admit, start ({pod, containers}) or remove; \
                     start: false only beside admit",
                ))
            }
        }
    }
    Ok(Scenario {
        id: raw.id,
        origin: origin.to_string(),
        topology,
        kubelet,
        unavailable_cpus,
        devices: raw
            .devices
            .into_iter()
            .map(|(res, devs)| {
                let devs = devs
                    .into_iter()
                    .map(|d| crate::placement::device::Device {
                        id: d.id,
                        numa_nodes: d.numa,
                    })
                    .collect();
                (res, devs)
            })
            .collect(),
        steps,
        expect: raw.expect,
    })
}

impl Loader<'_> {
    fn invalid(&self, field: &str, reason: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            origin: self.origin.to_string(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    fn read(&self, rel: &str) -> Result<String, ScenarioError> {
        let path = self.dir.join(rel);
        std::fs::read_to_string(&path).map_err(|source| ScenarioError::Read { path, source })
    }

    fn topology(&self, v: &serde_json::Value) -> Result<Topology, ScenarioError> {
        let err = |source| ScenarioError::Topology {
            origin: self.origin.to_string(),
            source: Box::new(source),
        };
        let mut topology = match v {
            serde_json::Value::String(rel) => Topology::load(&self.dir.join(rel)).map_err(err)?,
            serde_json::Value::Object(map) => match map.get("file") {
                Some(serde_json::Value::String(rel)) => {
                    Topology::load(&self.dir.join(rel)).map_err(err)?
                }
                Some(_) => return Err(self.invalid("topology.file", "must be a path")),
                None => serde_json::from_value(v.clone()).map_err(|source| {
                    err(TopologyError::Json {
                        origin: "inline".to_string(),
                        source,
                    })
                })?,
            },
            _ => {
                return Err(self.invalid(
                    "topology",
                    "must be a path (topology JSON or sysfs root) or a topology object",
                ))
            }
        };
        if let Some(memory) = v.get("memoryPerNuma") {
            let bytes = self.bytes("topology.memoryPerNuma", memory)?;
            topology.numa.iter_mut().for_each(|n| n.memory = bytes);
        }
        if let Some(pages) = v.get("hugepagesPerNuma") {
            let pages = self.hugepages(pages)?;
            topology
                .numa
                .iter_mut()
                .for_each(|n| n.hugepages = pages.clone());
        }
        topology.validate().map_err(err)?;
        Ok(topology)
    }

    fn bytes(&self, field: &str, v: &serde_json::Value) -> Result<u64, ScenarioError> {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return Err(self.invalid(field, "must be a quantity such as 64Gi")),
        };
        let q = Quantity::parse(&text).map_err(|e| self.invalid(field, e.to_string()))?;
        u64::try_from(q.value()).map_err(|_| self.invalid(field, "must not be negative"))
    }

    fn hugepages(&self, v: &serde_json::Value) -> Result<BTreeMap<u64, u64>, ScenarioError> {
        let field = "topology.hugepagesPerNuma";
        let map = v
            .as_object()
            .ok_or_else(|| self.invalid(field, "must map page sizes to totals (2Mi: 1Gi)"))?;
        map.iter()
            .map(|(size, total)| {
                let at = format!("{field}[{size}]");
                let size = self.bytes(&at, &serde_json::Value::String(size.clone()))?;
                if size == 0 {
                    return Err(self.invalid(&at, "page size must be positive"));
                }
                Ok((size, self.bytes(&at, total)?))
            })
            .collect()
    }

    fn kubelet(&self, v: &serde_json::Value) -> Result<KubeletConfiguration, ScenarioError> {
        let merged =
            match v {
                serde_json::Value::Null => serde_json::Value::Object(Default::default()),
                serde_json::Value::String(rel) => self.kubelet_file(rel)?,
                serde_json::Value::Object(map) => match map.get("file") {
                    None => v.clone(),
                    Some(serde_json::Value::String(rel)) => {
                        let mut base = self.kubelet_file(rel)?;
                        if let Some(obj) = base.as_object_mut() {
                            for (k, val) in map.iter().filter(|(k, _)| *k != "file") {
                                obj.insert(k.clone(), val.clone());
                            }
                        }
                        base
                    }
                    Some(_) => return Err(self.invalid("kubelet.file", "must be a path")),
                },
                _ => return Err(self.invalid(
                    "kubelet",
                    "must be KubeletConfiguration fields or a path to a KubeletConfiguration file",
                )),
            };
        serde_json::from_value(merged).map_err(|source| ScenarioError::KubeletFormat {
            origin: self.origin.to_string(),
            source: Box::new(source),
        })
    }

    /// The KubeletConfiguration document of a (possibly multi-document) file.
    fn kubelet_file(&self, rel: &str) -> Result<serde_json::Value, ScenarioError> {
        let docs: Vec<serde_json::Value> =
            documents(&self.read(rel)?).map_err(|e| self.invalid(rel, e.to_string()))?;
        let mut configs = docs.into_iter().filter(|d| {
            d.is_object()
                && matches!(
                    d.get("kind").and_then(|k| k.as_str()),
                    None | Some("KubeletConfiguration")
                )
        });
        match (configs.next(), configs.next()) {
            (Some(doc), None) => Ok(doc),
            (None, _) => Err(self.invalid(rel, "no KubeletConfiguration document")),
            (Some(_), Some(_)) => {
                Err(self.invalid(rel, "more than one KubeletConfiguration document"))
            }
        }
    }

    /// The pods a `pods` entry or `admit` step stands for: one inline manifest, or every Pod
    /// document of a file (other kinds skipped).
    fn admissions(
        &self,
        at: &str,
        p: &StrOr<Box<Pod>>,
        start: bool,
    ) -> Result<Vec<Step>, ScenarioError> {
        let pods: Vec<(String, Pod)> = match p {
            StrOr::Inline(pod) => vec![(at.to_string(), (**pod).clone())],
            StrOr::Str(rel) => {
                let docs = Pod::all_from_yaml(&self.read(rel)?)
                    .map_err(|e| self.invalid(rel, e.to_string()))?;
                let pods: Vec<(String, Pod)> = docs
                    .into_iter()
                    .enumerate()
                    .map(|(i, d)| (format!("{at} ({rel} pod {i})"), d))
                    .collect();
                if pods.is_empty() {
                    return Err(self.invalid(at, format!("{rel} holds no Pod document")));
                }
                pods
            }
        };
        pods.into_iter()
            .map(|(at, mut pod)| {
                if !self.pod_level_resources {
                    // The API server drops disabled fields (DropDisabledPodFields).
                    pod.spec.resources = None;
                }
                (at, pod)
            })
            .map(|(at, pod)| match pod.to_pod_spec() {
                Ok(spec) => Ok(Step::Admit {
                    at,
                    pod: Box::new(spec),
                    start,
                }),
                Err(source) => {
                    if !self.refusals {
                        return Err(ScenarioError::Pod {
                            origin: self.origin.to_string(),
                            at: at.clone(),
                            pod: pod.key(),
                            source: Box::new(source),
                        });
                    }
                    let (namespace, name) = split_key(&pod.key());
                    Ok(Step::Refused {
                        at,
                        namespace,
                        name,
                        error: source.to_string(),
                    })
                }
            })
            .collect()
    }
}

/// `namespace/name`, or `name` in namespace `default`.
fn split_key(pod: &str) -> (String, String) {
    let (namespace, name) = pod.split_once('/').unwrap_or(("default", pod));
    (namespace.to_string(), name.to_string())
}

fn removal(at: &str, r: &StrOr<RemoveSpec>) -> Step {
    let (pod, container) = match r {
        StrOr::Str(s) => (s.as_str(), None),
        StrOr::Inline(spec) => (spec.pod.as_str(), spec.container.clone()),
    };
    let (namespace, name) = split_key(pod);
    Step::Remove {
        at: at.to_string(),
        namespace,
        name,
        container,
    }
}

impl Loader<'_> {
    fn resize(&self, at: &str, spec: &ResizeSpec) -> Result<Step, ScenarioError> {
        let (namespace, name) = split_key(&spec.pod);
        let resources = spec
            .resources
            .to_resources(&format!("{at}.resources"))
            .map_err(|e| self.invalid(at, e.to_string()))?;
        Ok(Step::Resize {
            at: at.to_string(),
            namespace,
            name,
            container: spec.container.clone(),
            resources,
        })
    }
}

fn start(at: &str, spec: &StartSpec) -> Step {
    let (namespace, name) = split_key(&spec.pod);
    Step::Start {
        at: at.to_string(),
        namespace,
        name,
        containers: spec.containers.clone(),
    }
}

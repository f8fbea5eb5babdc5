//! Scenarios for `numa-shim simulate`: a machine, kubelet resource-manager settings and Pod
//! manifests admitted in order (with optional later admissions and removals), run through the
//! decision core, reported the way `simulate` prints them. See docs/simulate.md for the format.
//!
//! `scenario` owns the scenario file format, loading the files it names (paths are relative to
//! the scenario file), running the steps against a `placement::node::Node`, the report, the
//! `expect` comparison and the table view. It never decides placement itself.

pub mod expect;
mod load;
mod refs;
pub mod report;
pub mod table;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::cpuset::{CpuSet, CpuSetError};
use crate::k8s::{ConfigWarning, KubeletConfigError, KubeletConfiguration, PodError};
use crate::placement::node::{Node, NodeError};
use crate::placement::PodSpec;
use crate::topology::{Topology, TopologyError};

pub use expect::Mismatch;
pub use report::{ContainerReport, NodeReport, PodReport, Report};

/// A loaded scenario: every file it names already read, every pod already converted.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The scenario file (or `<string>`), for messages.
    pub origin: String,
    pub topology: Topology,
    pub kubelet: KubeletConfiguration,
    /// `unavailableCPUs`: CPUs held by workloads the node knew before (neither free nor reserved).
    pub unavailable_cpus: CpuSet,
    /// What happens, in order: the `pods` list (admissions), then `steps`.
    pub steps: Vec<Step>,
    /// The `expect` block, if any (ignored by `run`; see `expect::check`).
    pub expect: Option<serde_json::Value>,
}

/// One thing that happens to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A pod arrives; `at` names it in the scenario (`pods[2]`, `steps[0].admit`).
    Admit { at: String, pod: PodSpec },
    /// A pod (every live container) or one container goes away.
    Remove {
        at: String,
        namespace: String,
        name: String,
        container: Option<String>,
    },
}

/// The outcome of a run: the report plus the configuration warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub report: Report,
    pub warnings: Vec<ConfigWarning>,
}

/// Why a scenario could not be loaded or run; each variant names the file or scenario entry.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: {source}")]
    Parse {
        origin: String,
        #[source]
        source: Box<serde_yaml_ng::Error>,
    },
    #[error("{origin}: {field}: {reason}")]
    Invalid {
        origin: String,
        field: String,
        reason: String,
    },
    #[error("{origin}: topology: {source}")]
    Topology {
        origin: String,
        #[source]
        source: Box<TopologyError>,
    },
    #[error("{origin}: kubelet: {source}")]
    KubeletFormat {
        origin: String,
        #[source]
        source: Box<serde_json::Error>,
    },
    #[error("{origin}: kubelet: {source}")]
    Kubelet {
        origin: String,
        #[source]
        source: Box<KubeletConfigError>,
    },
    #[error("{origin}: unavailableCPUs: {source}")]
    UnavailableCpus {
        origin: String,
        #[source]
        source: Box<CpuSetError>,
    },
    #[error("{origin}: {at} ({pod}): {source}")]
    Pod {
        origin: String,
        at: String,
        pod: String,
        #[source]
        source: Box<PodError>,
    },
    #[error("{origin}: the node refuses to start: {source}")]
    Node {
        origin: String,
        #[source]
        source: Box<NodeError>,
    },
    #[error("{origin}: {at}: pod {pod} is already admitted (remove it first)")]
    DuplicatePod {
        origin: String,
        at: String,
        pod: String,
    },
    #[error("{origin}: {at}: no live pod {pod}")]
    UnknownPod {
        origin: String,
        at: String,
        pod: String,
    },
    #[error("{origin}: {at}: pod {pod} has no live container {container:?}")]
    UnknownContainer {
        origin: String,
        at: String,
        pod: String,
        container: String,
    },
}

impl Scenario {
    /// Reads a scenario file (YAML or JSON) and everything it names.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        load::from_str(&text, &path.display().to_string(), dir)
    }

    /// Parses a scenario text; relative paths in it are taken from `base_dir`.
    pub fn from_str(text: &str, base_dir: &Path) -> Result<Self, ScenarioError> {
        load::from_str(text, "<string>", base_dir)
    }

    /// Builds the node from the settings and plays every step.
    pub fn run(&self) -> Result<Outcome, ScenarioError> {
        let resolved =
            self.kubelet
                .resolve(&self.topology)
                .map_err(|source| ScenarioError::Kubelet {
                    origin: self.origin.clone(),
                    source: Box::new(source),
                })?;
        let node_err = |source| ScenarioError::Node {
            origin: self.origin.clone(),
            source: Box::new(source),
        };
        let mut node = Node::new(self.topology.clone(), resolved.config).map_err(node_err)?;
        if !self.unavailable_cpus.is_empty() {
            node.mark_unavailable(&self.unavailable_cpus)
                .map_err(node_err)?;
        }
        let mut book = report::Book::default();
        for step in &self.steps {
            match step {
                Step::Admit { at, pod } => {
                    let key = format!("{}/{}", pod.namespace, pod.name);
                    if book.live_uid(&key).is_some() {
                        return Err(ScenarioError::DuplicatePod {
                            origin: self.origin.clone(),
                            at: at.clone(),
                            pod: key,
                        });
                    }
                    let result = node.admit(pod);
                    book.admitted(pod, result.map(|_| ()));
                }
                Step::Remove {
                    at,
                    namespace,
                    name,
                    container,
                } => self.remove(
                    &mut node,
                    &mut book,
                    at,
                    namespace,
                    name,
                    container.as_deref(),
                )?,
            }
        }
        Ok(Outcome {
            report: book.report(&node),
            warnings: resolved.warnings,
        })
    }

    fn remove(
        &self,
        node: &mut Node,
        book: &mut report::Book,
        at: &str,
        namespace: &str,
        name: &str,
        container: Option<&str>,
    ) -> Result<(), ScenarioError> {
        let key = format!("{namespace}/{name}");
        let Some(uid) = book.live_uid(&key) else {
            return Err(ScenarioError::UnknownPod {
                origin: self.origin.clone(),
                at: at.to_string(),
                pod: key,
            });
        };
        match container {
            None => {
                node.remove_pod(&uid);
                book.removed(&key);
            }
            Some(c) => {
                if node.container(&uid, c).is_none() {
                    return Err(ScenarioError::UnknownContainer {
                        origin: self.origin.clone(),
                        at: at.to_string(),
                        pod: key,
                        container: c.to_string(),
                    });
                }
                node.remove_container(&uid, c);
                if node.placement(&uid).is_none() {
                    book.removed(&key);
                }
            }
        }
        Ok(())
    }
}

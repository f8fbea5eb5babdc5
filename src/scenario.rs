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
mod run;
pub mod steps;
pub mod table;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::cpuset::{CpuSet, CpuSetError};
use crate::k8s::{ConfigWarning, KubeletConfigError, KubeletConfiguration, PodError};
use crate::placement::node::NodeError;
use crate::placement::PodSpec;
use crate::topology::{Topology, TopologyError};

pub use expect::Mismatch;
pub use report::{ContainerReport, NodeReport, PodReport, Report};
pub use steps::{StepSnapshot, StepsReport};

/// A loaded scenario: every file it names already read, every pod already converted.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The scenario's `id`, if it has one (kubelet-oracle cases do).
    pub id: Option<String>,
    /// The scenario file (or `<string>`), for messages.
    pub origin: String,
    pub topology: Topology,
    pub kubelet: KubeletConfiguration,
    /// `unavailableCPUs`: CPUs held by workloads the node knew before (neither free nor reserved).
    pub unavailable_cpus: CpuSet,
    /// `devices`: device plugin resource → its devices (with their NUMA nodes), all healthy
    /// and free when the scenario starts.
    pub devices: std::collections::BTreeMap<String, Vec<crate::placement::device::Device>>,
    /// What happens, in order: the `pods` list (admissions), then `steps`.
    pub steps: Vec<Step>,
    /// The `expect` block, if any (ignored by `run`; see `expect::check`).
    pub expect: Option<serde_json::Value>,
}

/// One thing that happens to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A pod arrives; `at` names it in the scenario (`pods[2]`, `steps[0].admit`). With `start`
    /// its containers start right after an admission (init containers in spec order, then app
    /// containers); without, only `Start` steps start them.
    Admit {
        at: String,
        pod: Box<PodSpec>,
        start: bool,
    },
    /// Containers of an admitted pod start, in this order (kubelet `PreStartContainer`).
    Start {
        at: String,
        namespace: String,
        name: String,
        containers: Vec<String>,
    },
    /// A pod (every live container) or one container goes away.
    Remove {
        at: String,
        namespace: String,
        name: String,
        container: Option<String>,
    },
    /// An in-place resize (`kubectl patch --subresource resize`): a running container's
    /// resources, or the pod-level budget without `container`. A refusal is reported on the pod
    /// (`resizeError`) and changes nothing.
    Resize {
        at: String,
        namespace: String,
        name: String,
        container: Option<String>,
        resources: crate::placement::Resources,
    },
    /// A pod the API server would refuse (only when loaded with API refusals kept: see
    /// [`Scenario::from_str_keeping_refusals`]); `error` says why.
    Refused {
        at: String,
        namespace: String,
        name: String,
        error: String,
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
    #[error("{origin}: {at}: container {container:?} of pod {pod} has not started (only started containers are removed)")]
    NotStarted {
        origin: String,
        at: String,
        pod: String,
        container: String,
    },
}

impl Scenario {
    /// Reads a scenario file (YAML or JSON) and everything it names.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        Self::load_with(path, false)
    }

    /// [`Scenario::load`], keeping pods the API server would refuse as [`Step::Refused`].
    pub fn load_keeping_refusals(path: &Path) -> Result<Self, ScenarioError> {
        Self::load_with(path, true)
    }

    fn load_with(path: &Path, refusals: bool) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        load::from_str(&text, &path.display().to_string(), dir, refusals)
    }

    /// Parses a scenario text; relative paths in it are taken from `base_dir`.
    pub fn from_str(text: &str, base_dir: &Path) -> Result<Self, ScenarioError> {
        load::from_str(text, "<string>", base_dir, false)
    }

    /// [`Scenario::from_str`], keeping pods the API server would refuse as [`Step::Refused`].
    pub fn from_str_keeping_refusals(text: &str, base_dir: &Path) -> Result<Self, ScenarioError> {
        load::from_str(text, "<string>", base_dir, true)
    }

    /// Builds the node from the settings and plays every step; the report is the end state.
    pub fn run(&self) -> Result<Outcome, ScenarioError> {
        let (mut run, warnings) = run::Run::start(self, false, &|_| {})?;
        for step in &self.steps {
            run.step(step)?;
        }
        Ok(Outcome {
            report: run.report(),
            warnings,
        })
    }

    /// Plays every step and answers as kubelet-oracle does (integration/kubelet-oracle/
    /// PROTOCOL.md): a snapshot after each step, or the settings' error when the kubelet would
    /// refuse to start with them (here the static CPU policy without reserved CPUs is refused
    /// too, as by the kubelet).
    pub fn run_steps(&self) -> Result<StepsReport, ScenarioError> {
        self.run_steps_with(&|_| {})
    }

    /// [`Scenario::run_steps`] with the decision core's settings adjusted after they are read
    /// (the differential suite reproduces a kubelet quirk this way; see
    /// `Config::reproduce_kubelet_double_grants`).
    pub fn run_steps_with(
        &self,
        adjust: &dyn Fn(&mut crate::placement::Config),
    ) -> Result<StepsReport, ScenarioError> {
        let (mut run, _) = match run::Run::start(self, true, adjust) {
            Ok(started) => started,
            Err(e @ (ScenarioError::Kubelet { .. } | ScenarioError::Node { .. })) => {
                return Ok(StepsReport::refused(self.id.clone(), &e));
            }
            Err(e) => return Err(e),
        };
        let mut steps = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            run.step(step)?;
            steps.push(run.snapshot());
        }
        Ok(StepsReport {
            id: self.id.clone(),
            config_error: None,
            steps,
        })
    }
}

//! What CRI-O's own configuration would do against numa-shim: the settings with which CRI-O sets
//! or changes containers' cpusets, CPU quota and per-CPU tuning by itself — workload partitioning
//! (`[crio.runtime.workloads.*]`), `shared_cpuset` with the `cpu-shared.crio.io` annotation,
//! `infra_ctr_cpuset`, and the `*.crio.io` CPU performance annotations a runtime handler allows.
//!
//! The settings are read from CRI-O's configuration files (`crio.conf` and the drop-ins of
//! `crio.conf.d`, later files overriding earlier ones as CRI-O merges them) or from the `config`
//! JSON of CRI-O's verbose Status answer; [`CrioSettings::conflicts`] turns them into warnings.
//! Reads files only when asked to ([`load`]); never talks to a runtime (the caller passes the
//! Status info in) and never changes anything.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::cpuset::CpuSet;

mod files;
#[cfg(test)]
mod tests;

pub use files::load;

/// The CPU annotations a CRI-O runtime handler or workload may allow, and what CRI-O does with
/// a container that carries one.
pub const CPU_ANNOTATIONS: &[(&str, &str)] = &[
    (
        "cpu-shared.crio.io",
        "adds shared_cpuset to the container's cpuset",
    ),
    (
        "cpu-load-balancing.crio.io",
        "turns scheduler load balancing off on the container's CPUs; allowed anywhere, it makes \
         CRI-O turn it off in the cpuset cgroup of every container that stops, on cgroup v1",
    ),
    (
        "cpu-quota.crio.io",
        "turns the CFS quota off for the container",
    ),
    (
        "irq-load-balancing.crio.io",
        "moves device interrupts off the container's CPUs",
    ),
    (
        "cpu-c-states.crio.io",
        "sets the C-states of the container's CPUs",
    ),
    (
        "cpu-freq-governor.crio.io",
        "sets the frequency governor of the container's CPUs",
    ),
];

/// The CPU-related part of a CRI-O configuration. `None`: not set (CRI-O's default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrioSettings {
    /// `[crio.runtime] infra_ctr_cpuset`.
    pub infra_ctr_cpuset: Option<String>,
    /// `[crio.runtime] shared_cpuset`.
    pub shared_cpuset: Option<String>,
    /// `[crio.runtime.workloads.NAME]`.
    pub workloads: BTreeMap<String, Workload>,
    /// `[crio.runtime.runtimes.NAME]`.
    pub handlers: BTreeMap<String, Handler>,
}

/// One workload of CRI-O's workload partitioning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    pub activation_annotation: Option<String>,
    /// `resources.cpuset`: the cpuset CRI-O gives the workload's containers.
    pub cpuset: Option<String>,
    pub allowed_annotations: Option<Vec<String>>,
}

/// One runtime handler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handler {
    pub allowed_annotations: Option<Vec<String>>,
}

/// A CRI-O setting that fights numa-shim; its `Display` is the warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// Workload partitioning sets the cpuset of the activated pods' containers.
    Workload {
        name: String,
        annotation: String,
        cpuset: Option<String>,
    },
    /// `shared_cpuset` is added to annotated containers' cpusets.
    SharedCpuset {
        cpus: String,
        allowed_by: Vec<String>,
    },
    /// Infra containers run on CPUs numa-shim may grant exclusively.
    InfraCtrCpuset { cpus: String, reserved: CpuSet },
    /// Per-CPU tuning CRI-O applies to the CPUs a container starts on.
    Annotations {
        allowed_by: String,
        annotations: Vec<&'static str>,
    },
}

/// Why CRI-O's settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CrioError {
    #[error("cannot read CRI-O config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid CRI-O config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("CRI-O status info `config` is not the JSON CRI-O writes: {0}")]
    Info(#[source] serde_json::Error),
}

impl CrioSettings {
    /// The settings in the `config` entry of a verbose Status answer's `info`, when the runtime
    /// is CRI-O (its JSON has a `crio` object); `Ok(None)` for any other runtime.
    pub fn from_status_info(info: &HashMap<String, String>) -> Result<Option<Self>, CrioError> {
        let Some(text) = info.get("config") else {
            return Ok(None);
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(CrioError::Info)?;
        let Some(crio) = value.get("crio") else {
            return Ok(None);
        };
        let info: files::StatusConfig =
            serde_json::from_value(crio.clone()).map_err(CrioError::Info)?;
        Ok(Some(info.into()))
    }

    /// `later` laid over these settings as CRI-O decodes a drop-in file over its configuration:
    /// a key the later file sets wins; a workload or runtime handler it defines replaces the
    /// earlier one whole (the TOML decoder makes a new map entry).
    pub fn merge(&mut self, later: Self) {
        set(&mut self.infra_ctr_cpuset, later.infra_ctr_cpuset);
        set(&mut self.shared_cpuset, later.shared_cpuset);
        self.workloads.extend(later.workloads);
        self.handlers.extend(later.handlers);
    }

    /// Every setting that would fight numa-shim, given the CPUs numa-shim keeps reserved.
    pub fn conflicts(&self, reserved: &CpuSet) -> Vec<Conflict> {
        let mut out = Vec::new();
        for (name, w) in &self.workloads {
            if let Some(annotation) = w.activation_annotation.as_deref().filter(|a| !a.is_empty()) {
                out.push(Conflict::Workload {
                    name: name.clone(),
                    annotation: annotation.to_string(),
                    cpuset: w.cpuset.clone().filter(|c| !c.is_empty()),
                });
            }
        }
        // Who may carry which CPU annotation: runtime handlers, then workloads.
        let allowers = self
            .handlers
            .iter()
            .map(|(n, h)| (format!("runtime handler {n}"), &h.allowed_annotations))
            .chain(
                self.workloads
                    .iter()
                    .map(|(n, w)| (format!("workload {n}"), &w.allowed_annotations)),
            );
        let mut shared_allowed_by = Vec::new();
        for (who, allowed) in allowers {
            let allowed = allowed.as_deref().unwrap_or_default();
            let cpu: Vec<&'static str> = CPU_ANNOTATIONS
                .iter()
                .map(|(a, _)| *a)
                .filter(|a| allowed.iter().any(|x| x == a))
                .collect();
            if cpu.contains(&"cpu-shared.crio.io") {
                shared_allowed_by.push(who.clone());
            }
            let tuning: Vec<&'static str> = cpu
                .into_iter()
                .filter(|a| *a != "cpu-shared.crio.io")
                .collect();
            if !tuning.is_empty() {
                out.push(Conflict::Annotations {
                    allowed_by: who,
                    annotations: tuning,
                });
            }
        }
        if let Some(cpus) = self.shared_cpuset.as_deref().filter(|c| !c.is_empty()) {
            if !shared_allowed_by.is_empty() {
                out.push(Conflict::SharedCpuset {
                    cpus: cpus.to_string(),
                    allowed_by: shared_allowed_by,
                });
            }
        }
        if let Some(cpus) = self.infra_ctr_cpuset.as_deref().filter(|c| !c.is_empty()) {
            let inside = CpuSet::parse(cpus).is_ok_and(|set| set.is_subset(reserved));
            if !inside || reserved.is_empty() {
                out.push(Conflict::InfraCtrCpuset {
                    cpus: cpus.to_string(),
                    reserved: reserved.clone(),
                });
            }
        }
        out
    }
}

fn set<T>(slot: &mut Option<T>, later: Option<T>) {
    if later.is_some() {
        *slot = later;
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Workload {
                name,
                annotation,
                cpuset,
            } => {
                let cpus = cpuset
                    .as_deref()
                    .map_or_else(String::new, |c| format!(" ({c})"));
                write!(
                    f,
                    "CRI-O workload partitioning [crio.runtime.workloads.{name}]: containers of pods \
                     annotated {annotation} get their cpuset{cpus} and CPU shares from CRI-O, not \
                     from numa-shim, and numa-shim's drift check would set its own cpuset back; \
                     keep such pods off this node or remove the workload"
                )
            }
            Self::SharedCpuset { cpus, allowed_by } => write!(
                f,
                "CRI-O shared_cpuset = {cpus:?} with cpu-shared.crio.io allowed by {}: CRI-O adds \
                 these CPUs to the cpuset of annotated containers, numa-shim's drift check takes \
                 them away again, and they may be CPUs numa-shim grants exclusively; unset \
                 shared_cpuset or disallow the annotation",
                allowed_by.join(", ")
            ),
            Self::InfraCtrCpuset { cpus, reserved } => write!(
                f,
                "CRI-O infra_ctr_cpuset = {cpus:?} is not within numa-shim's reserved CPUs ({}): \
                 infra containers run on CPUs numa-shim grants exclusively; set it to the \
                 reservedSystemCPUs",
                if reserved.is_empty() {
                    "none".to_string()
                } else {
                    reserved.to_string()
                }
            ),
            Self::Annotations {
                allowed_by,
                annotations,
            } => {
                let what: Vec<String> = annotations
                    .iter()
                    .map(|a| {
                        let effect = CPU_ANNOTATIONS
                            .iter()
                            .find(|(n, _)| n == a)
                            .map_or("", |(_, e)| *e);
                        format!("{a} ({effect})")
                    })
                    .collect();
                write!(
                    f,
                    "CRI-O {allowed_by} allows {}: CRI-O applies them to the CPUs a container has \
                     when it starts and does not follow numa-shim when it moves a shared \
                     container to other CPUs",
                    what.join(", ")
                )
            }
        }
    }
}

/// Where CRI-O's drop-in directory for `config` is: `<config>.d` (`/etc/crio/crio.conf.d`).
pub fn drop_in_dir(config: &Path) -> PathBuf {
    let mut dir = config.as_os_str().to_owned();
    dir.push(".d");
    PathBuf::from(dir)
}

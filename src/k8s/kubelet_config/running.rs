//! The kubelet's configuration as the kubelet runs it — its main file with the drop-ins of its
//! `--config-dir` merged over it, the kubelet's way — and what that configuration must say for
//! the kubelet to run under numa-shim.
//!
//! Two things go wrong otherwise, both seen with a real kubelet: its own CPU or Memory Manager
//! left on rewrites the cpusets numa-shim set (and numa-shim rewrites its
//! UpdateContainerResources, so the kubelet's `cpu_manager_state` no longer says what runs); and
//! with its managers off the kubelet still admits pods by counting requests against its node
//! allocatable, so a kubelet that reserves fewer CPUs (or less memory) than numa-shim admits pods
//! numa-shim can only refuse, which then stay Pending instead of failing admission.
//!
//! Pure: texts and parsed settings in, findings out. Never reads a file.

use serde_json::{Map, Value};

use super::cpu::reservation_map;
use super::{KubeletConfigError, KubeletConfiguration};
use crate::cpuset::CpuSet;
use crate::k8s::{documents, DocumentError};
use crate::placement::config::{Config, CpuPolicy, MemoryPolicy};
use crate::quantity::Quantity;
use crate::topology::Topology;

/// The kubelet's `evictionHard` default on Linux, applied to the main file before drop-ins are
/// merged (the kubelet defaults the main file first, so a drop-in changes single signals).
const DEFAULT_EVICTION_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// Why the kubelet's running configuration could not be put together.
#[derive(Debug, thiserror::Error)]
pub enum RunningConfigError {
    #[error("{0}")]
    Document(#[from] DocumentError),
    /// A drop-in without `apiVersion`/`kind` (the kubelet refuses to start with it).
    #[error("drop-in {name}: not a kubelet.config.k8s.io/v1beta1 KubeletConfiguration document")]
    DropIn { name: String },
    #[error("merged configuration: {0}")]
    Merged(#[from] serde_json::Error),
}

/// How bad a finding is: `Error` breaks placement (check-config refuses it), `Warning` wastes
/// capacity or deserves a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One thing the kubelet's configuration gets wrong for numa-shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletFinding {
    pub severity: Severity,
    /// The kubelet field(s) to change.
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for KubeletFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kubelet {}: {}", self.field, self.message)
    }
}

impl KubeletConfiguration {
    /// The configuration the kubelet runs with: the `KubeletConfiguration` document of `main`,
    /// then each drop-in (name, text) merged over it as a JSON merge patch (RFC 7386, `null`
    /// deletes), in the order given — the kubelet walks its `--config-dir` in lexical order and
    /// only reads files ending in `.conf`; the caller picks and sorts them.
    pub fn running(main: &str, drop_ins: &[(String, String)]) -> Result<Self, RunningConfigError> {
        let mut base = main_document(main)?;
        if let Value::Object(map) = &mut base {
            map.entry("evictionHard").or_insert_with(|| {
                let defaults: Map<String, Value> = DEFAULT_EVICTION_HARD
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                    .collect();
                Value::Object(defaults)
            });
        }
        for (name, text) in drop_ins {
            let patch = drop_in_document(name, text)?;
            merge_patch(&mut base, patch);
        }
        Ok(serde_json::from_value(base)?)
    }

    /// What this configuration — the kubelet's, as it runs — gets wrong for a numa-shim running
    /// `shim` with `reserved` CPUs on `machine`.
    pub fn conflicts_with(
        &self,
        shim: &Config,
        reserved: &CpuSet,
        machine: &Topology,
    ) -> Vec<KubeletFinding> {
        let mut out = self.managers_on();
        out.extend(self.resize_gates());
        if shim.cpu_policy == CpuPolicy::Static {
            out.extend(self.cpu_mirror(reserved, machine));
        }
        if shim.memory_policy == MemoryPolicy::Static {
            out.extend(self.memory_mirror(shim, machine));
        }
        out
    }

    /// Feature gates that keep in-place resizes from reaching numa-shim (docs/resize.md §1.1):
    /// `InPlacePodVerticalScaling` (beta and on in v1.34, GA and locked on from v1.35) and
    /// `InPlacePodLevelResourcesVerticalScaling` (none in v1.34, alpha and off in v1.35, beta and
    /// on from v1.36). Only a gate turned off is reported: the defaults send both kinds on
    /// v1.36+, container resizes only on v1.34 and v1.35.
    fn resize_gates(&self) -> Vec<KubeletFinding> {
        let mut out = Vec::new();
        if self.feature_gates.get("InPlacePodVerticalScaling") == Some(&false) {
            out.push(KubeletFinding {
                severity: Severity::Warning,
                field: "featureGates",
                message: "InPlacePodVerticalScaling is off: kubelet v1.34 then never resizes a pod                           in place (numa-shim sees no UpdateContainerResources for it), and v1.35+                           refuse to start (the gate is GA and locked on); remove the setting"
                    .to_string(),
            });
        }
        if self
            .feature_gates
            .get("InPlacePodLevelResourcesVerticalScaling")
            == Some(&false)
        {
            out.push(KubeletFinding {
                severity: Severity::Warning,
                field: "featureGates",
                message: "InPlacePodLevelResourcesVerticalScaling is off: pod-level budgets                           (spec.resources) cannot be resized in place (kubelet v1.35 needs it                           true on the kubelet and the API server, v1.36+ have it on by default,                           v1.34 cannot resize pod-level budgets at all); container resizes still                           reach numa-shim"
                    .to_string(),
            });
        }
        out
    }

    /// The kubelet's own managers that are on.
    fn managers_on(&self) -> Vec<KubeletFinding> {
        let mut out = Vec::new();
        let fix = "turn it off in the kubelet's configuration (the drop-in \
                   packaging/kubelet/kubelet.conf.d/10-numa-shim.conf does; pass its directory as \
                   kubeletConfigDir so numa-shim sees it)";
        let cpu = self.cpu_manager_policy.as_deref().unwrap_or("none");
        if !matches!(cpu, "none" | "") {
            out.push(KubeletFinding {
                severity: Severity::Error,
                field: "cpuManagerPolicy",
                message: format!(
                    "the kubelet runs its own CPU manager ({cpu:?}): it sets cpusets numa-shim \
                     rewrites, and its cpu_manager_state no longer says what runs; {fix}"
                ),
            });
        }
        let memory = self.memory_manager_policy.as_deref().unwrap_or("None");
        if !matches!(memory, "None" | "") {
            out.push(KubeletFinding {
                severity: Severity::Error,
                field: "memoryManagerPolicy",
                message: format!(
                    "the kubelet runs its own memory manager ({memory:?}): it pins cpuset.mems \
                     numa-shim decides, and its memory_manager_state no longer says what runs; \
                     {fix}"
                ),
            });
        }
        let topology = self.topology_manager_policy.as_deref().unwrap_or("none");
        if !matches!(topology, "none" | "") {
            out.push(KubeletFinding {
                severity: Severity::Warning,
                field: "topologyManagerPolicy",
                message: format!(
                    "the kubelet runs its own topology manager ({topology:?}); with its CPU and \
                     memory managers off it aligns only devices, and can refuse pods numa-shim \
                     would place: set it to none unless devices need it"
                ),
            });
        }
        out
    }

    /// The kubelet's CPU reservation against numa-shim's `reserved` CPUs.
    fn cpu_mirror(&self, reserved: &CpuSet, machine: &Topology) -> Option<KubeletFinding> {
        let kubelet = match self.reserved_cpu_milli() {
            Ok(milli) => milli,
            Err(err) => return Some(unreadable("reservedSystemCPUs", &err)),
        };
        let shim = reserved.len() as u64 * 1000;
        if kubelet == shim {
            return None;
        }
        let capacity = machine.cpus.len() as u64 * 1000;
        let allocatable = capacity.saturating_sub(kubelet);
        let usable = capacity.saturating_sub(shim);
        let mirror = format!(
            "mirror numa-shim's reservation in the kubelet's configuration: reservedSystemCPUs: \
             \"{}\" (or kubeReserved/systemReserved cpu adding up to {})",
            reserved.to_list(),
            reserved.len()
        );
        let (severity, consequence) = if kubelet < shim {
            (
                Severity::Error,
                "it admits pods numa-shim must refuse, and those stay Pending instead of failing \
                 admission",
            )
        } else {
            (Severity::Warning, "it refuses pods numa-shim could place")
        };
        Some(KubeletFinding {
            severity,
            field: "reservedSystemCPUs",
            message: format!(
                "the kubelet reserves {} CPUs, numa-shim reserves {} ({}): the kubelet counts {} \
                 allocatable CPUs where numa-shim can place {}, so {consequence}; {mirror}",
                milli_text(kubelet),
                reserved.len(),
                reserved.to_list(),
                milli_text(allocatable),
                milli_text(usable),
            ),
        })
    }

    /// The kubelet's memory reservation against numa-shim's `reservedMemory` total.
    fn memory_mirror(&self, shim: &Config, machine: &Topology) -> Option<KubeletFinding> {
        let kubelet = match self.node_allocatable_memory(machine) {
            Ok(q) => u64::try_from(q.value()).unwrap_or(0),
            Err(err) => return Some(unreadable("kubeReserved/systemReserved/evictionHard", &err)),
        };
        let shim_total: u64 = shim.reserved_memory.iter().map(|r| r.memory).sum();
        if kubelet == shim_total {
            return None;
        }
        let (severity, consequence) = if kubelet < shim_total {
            (
                Severity::Error,
                "the kubelet admits pods whose memory numa-shim cannot pin, and those stay \
                 Pending",
            )
        } else {
            (
                Severity::Warning,
                "the kubelet refuses pods numa-shim could place",
            )
        };
        let bytes = |b: u64| crate::quantity::format_binary(b);
        Some(KubeletFinding {
            severity,
            field: "kubeReserved/systemReserved/evictionHard",
            message: format!(
                "the kubelet keeps {} of memory out of its allocatable (kubeReserved + \
                 systemReserved + evictionHard memory.available), numa-shim reserves {} \
                 (reservedMemory): {consequence}; make the kubelet's memory reservation add up to \
                 {} as numa-shim's does",
                bytes(kubelet),
                bytes(shim_total),
                bytes(shim_total),
            ),
        })
    }

    /// What the kubelet takes out of its CPU allocatable, in millicores: `reservedSystemCPUs`
    /// counted in whole CPUs (it overrides the cpu of kubeReserved/systemReserved), else
    /// `kubeReserved.cpu + systemReserved.cpu` (cmd/kubelet/app/server.go).
    pub fn reserved_cpu_milli(&self) -> Result<u64, KubeletConfigError> {
        if let Some(list) = self
            .reserved_system_cpus
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            let set = CpuSet::parse(list)
                .map_err(|source| KubeletConfigError::ReservedCpuList { source })?;
            return Ok(set.len() as u64 * 1000);
        }
        let kube = reservation_map("kubeReserved", &self.kube_reserved)?;
        let system = reservation_map("systemReserved", &self.system_reserved)?;
        Ok([kube.get("cpu"), system.get("cpu")]
            .into_iter()
            .flatten()
            .map(|q: &Quantity| u64::try_from(q.milli_value()).unwrap_or(0))
            .sum())
    }
}

fn unreadable(field: &'static str, err: &KubeletConfigError) -> KubeletFinding {
    KubeletFinding {
        severity: Severity::Error,
        field,
        message: format!("cannot read the kubelet's reservation: {err}"),
    }
}

/// Millicores as CPUs: `1`, `1.5`.
fn milli_text(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{}", milli as f64 / 1000.0)
    }
}

/// The one `KubeletConfiguration` document of the main file, as JSON.
fn main_document(text: &str) -> Result<Value, DocumentError> {
    let mut configs = documents::<Value>(text)?.into_iter().filter(|d| {
        matches!(
            d.get("kind").and_then(Value::as_str),
            None | Some("KubeletConfiguration")
        )
    });
    match (configs.next(), configs.next()) {
        (Some(c), None) => Ok(c),
        (None, _) => Err(DocumentError::Missing {
            kind: "KubeletConfiguration",
        }),
        (Some(_), Some(_)) => Err(DocumentError::Several {
            kind: "KubeletConfiguration",
        }),
    }
}

/// A drop-in: exactly one document with the kubelet's apiVersion and kind.
fn drop_in_document(name: &str, text: &str) -> Result<Value, RunningConfigError> {
    let docs = documents::<Value>(text)?;
    let bad = || RunningConfigError::DropIn {
        name: name.to_string(),
    };
    let [doc] = docs.as_slice() else {
        return Err(bad());
    };
    let is = |key: &str, want: &str| doc.get(key).and_then(Value::as_str) == Some(want);
    if !is("apiVersion", "kubelet.config.k8s.io/v1beta1") || !is("kind", "KubeletConfiguration") {
        return Err(bad());
    }
    Ok(doc.clone())
}

/// RFC 7386 JSON merge patch: objects merge key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(&key);
        } else {
            merge_patch(map.entry(key).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests;

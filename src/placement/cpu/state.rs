//! The CPU manager state: the default (shared) set, per-container assignments and per-pod
//! bubbles, serialisable for checkpoints, and kubelet's `validateState` for a restored state.

use std::collections::BTreeMap;

use super::CpuError;
use crate::cpuset::CpuSet;
use crate::placement::qos::IsolationLevel;

/// One container's recorded cpuset and how it is isolated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerAssignment {
    pub cpus: CpuSet,
    /// `container` for an exclusive slice, `pod` for the pod shared pool.
    pub isolation: IsolationLevel,
}

/// Everything the static policy remembers (kubelet's `cpu_manager_state` V4 content).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CpuState {
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// Pod UID → container name → assignment.
    pub entries: BTreeMap<String, BTreeMap<String, ContainerAssignment>>,
    /// Pod UID → pod bubble (pod-level resource managers).
    pub pod_entries: BTreeMap<String, CpuSet>,
}

impl CpuState {
    /// kubelet's `validateState` for a non-empty restored state; `all` is every CPU the policy
    /// manages (minus reserved with strict reservation).
    ///
    /// Deviation: the kubelet refuses an empty default set with assignments, because with its
    /// mandatory reservation that state is impossible. Without a reservation (numa-shim accepts
    /// `reservedSystemCPUs: ""`) or with strict reservation, handing out every CPU empties the
    /// shared pool legitimately; such a state is checked like any other instead.
    pub fn validate(&self, all: &CpuSet, reserved: &CpuSet, strict: bool) -> Result<(), CpuError> {
        let default = &self.default_cpu_set;
        if default.is_empty() {
            if self.entries.is_empty() {
                return Ok(());
            }
            if !reserved.is_empty() && !strict {
                return Err(CpuError::EmptyDefaultSet);
            }
        }
        if strict {
            let overlap = reserved.intersection(default);
            if !overlap.is_empty() {
                return Err(CpuError::StrictReservedInDefault {
                    reserved: overlap.to_string(),
                    default: default.to_string(),
                });
            }
        } else if &reserved.intersection(default) != reserved {
            return Err(CpuError::ReservedNotInDefault {
                reserved: reserved.to_string(),
                default: default.to_string(),
            });
        }
        let mut known = default.clone();
        for (pod, containers) in &self.entries {
            for (name, a) in containers {
                if !a.cpus.is_disjoint(default) {
                    return Err(CpuError::Overlap {
                        pod: pod.clone(),
                        container: name.clone(),
                        cpus: a.cpus.to_string(),
                        default: default.to_string(),
                    });
                }
                known = known.union(&a.cpus);
            }
        }
        for bubble in self.pod_entries.values() {
            known = known.union(bubble);
        }
        if &known != all {
            return Err(CpuError::StateMismatch {
                all: all.to_string(),
                known: known.to_string(),
            });
        }
        Ok(())
    }
}

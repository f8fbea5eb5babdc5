//! The policy names, scope, feature gates and Topology Manager options of a
//! KubeletConfiguration, with the kubelet's spellings and start-up checks.

use super::{parse_bool, unknown_policy, ConfigWarning, KubeletConfigError, KubeletConfiguration};
use crate::placement::config::{
    CpuPolicy, FeatureGates, MemoryPolicy, TopologyOptions, TopologyPolicy, TopologyScope,
};

impl KubeletConfiguration {
    pub(super) fn cpu_policy(&self) -> Result<CpuPolicy, KubeletConfigError> {
        match self.cpu_manager_policy.as_deref().unwrap_or("none") {
            "none" | "" => Ok(CpuPolicy::None),
            "static" => Ok(CpuPolicy::Static),
            other => Err(unknown_policy("cpuManagerPolicy", other, "none, static")),
        }
    }

    pub(super) fn memory_policy(&self) -> Result<MemoryPolicy, KubeletConfigError> {
        match self.memory_manager_policy.as_deref().unwrap_or("None") {
            "None" | "" => Ok(MemoryPolicy::None),
            "Static" => Ok(MemoryPolicy::Static),
            "BestEffort" => Err(KubeletConfigError::BestEffortMemoryPolicy),
            other => Err(unknown_policy("memoryManagerPolicy", other, "None, Static")),
        }
    }

    pub(super) fn topology_policy(&self) -> Result<TopologyPolicy, KubeletConfigError> {
        match self.topology_manager_policy.as_deref().unwrap_or("none") {
            "none" | "" => Ok(TopologyPolicy::None),
            "best-effort" => Ok(TopologyPolicy::BestEffort),
            "restricted" => Ok(TopologyPolicy::Restricted),
            "single-numa-node" => Ok(TopologyPolicy::SingleNumaNode),
            other => Err(unknown_policy(
                "topologyManagerPolicy",
                other,
                "none, best-effort, restricted, single-numa-node",
            )),
        }
    }

    pub(super) fn topology_scope(&self) -> Result<TopologyScope, KubeletConfigError> {
        match self
            .topology_manager_scope
            .as_deref()
            .unwrap_or("container")
        {
            "container" | "" => Ok(TopologyScope::Container),
            "pod" => Ok(TopologyScope::Pod),
            other => Err(KubeletConfigError::UnknownScope {
                value: other.to_string(),
            }),
        }
    }

    pub(super) fn gate(&self, name: &str) -> bool {
        self.feature_gates.get(name).copied().unwrap_or(true)
    }

    pub(super) fn gates(&self) -> Result<FeatureGates, KubeletConfigError> {
        if !self.gate("CPUManagerPolicyOptions") {
            return Err(KubeletConfigError::LockedGate {
                gate: "CPUManagerPolicyOptions",
            });
        }
        let gates = FeatureGates {
            pod_level_resources: self.gate("PodLevelResources"),
            pod_level_resource_managers: self.gate("PodLevelResourceManagers"),
        };
        if !gates.pod_level_resources {
            // The kubelet's gates that depend on PodLevelResources (PodLevelResourceManagers,
            // and in 1.37 three more that default on) must be off with it.
            const DEPENDENTS: [&str; 4] = [
                "PodLevelResourceManagers",
                "InPlacePodLevelResourcesVerticalScaling",
                "PodLevelResourcesFixDefaulting",
                "PodLevelResourcesFixKubeletQOSClass",
            ];
            if let Some(gate) = DEPENDENTS.into_iter().find(|g| self.gate(g)) {
                return Err(KubeletConfigError::GateDependency { gate });
            }
        }
        Ok(gates)
    }

    pub(super) fn topology_options(
        &self,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<TopologyOptions, KubeletConfigError> {
        const FIELD: &str = "topologyManagerPolicyOptions";
        let mut opts = TopologyOptions::default();
        for (name, value) in &self.topology_manager_policy_options {
            match name.as_str() {
                "prefer-closest-numa-nodes" => {
                    opts.prefer_closest_numa_nodes = parse_bool(FIELD, name, value)?;
                }
                "max-allowable-numa-nodes" => {
                    let n: i64 =
                        value
                            .trim()
                            .parse()
                            .map_err(|_| KubeletConfigError::BadOptionValue {
                                field: FIELD,
                                option: name.clone(),
                                value: value.clone(),
                                expected: "want an integer",
                            })?;
                    if n < 8 {
                        return Err(KubeletConfigError::MaxNumaTooSmall { value: n });
                    }
                    if n > 8 {
                        warnings.push(ConfigWarning {
                            field: format!("{FIELD}[{name}]"),
                            message: format!("{n} is more than the default recommended value 8"),
                        });
                    }
                    opts.max_allowable_numa_nodes = u32::try_from(n).unwrap_or(u32::MAX);
                }
                _ => {
                    return Err(KubeletConfigError::UnknownTopologyOption {
                        option: name.clone(),
                    })
                }
            }
        }
        Ok(opts)
    }
}

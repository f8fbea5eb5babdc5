//! CPU Manager settings: `cpuManagerPolicyOptions` (names, maturity gates, values, incompatible
//! pairs, machine checks of `policy_options.go`) and the reserved CPUs (`reservedSystemCPUs`, or
//! the CPU parts of `kubeReserved` + `systemReserved`).

use std::collections::BTreeMap;

use super::{
    online_cpus, parse_bool, parse_quantity, ConfigWarning, KubeletConfigError,
    KubeletConfiguration,
};
use crate::cpuset::CpuSet;
use crate::placement::config::{CpuPolicy, CpuPolicyOptions, ReservedCpus, TopologyPolicy};
use crate::quantity::Quantity;
use crate::topology::Topology;

const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
const DISTRIBUTE_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
const ALIGN_BY_SOCKET: &str = "align-by-socket";
const DISTRIBUTE_ACROSS_CORES: &str = "distribute-cpus-across-cores";
const STRICT_RESERVATION: &str = "strict-cpu-reservation";
const PREFER_UNCORE: &str = "prefer-align-cpus-by-uncorecache";

/// Option maturity as of kubelet 1.37: (name, level, gate). Stable options need no gate.
const OPTIONS: [(&str, Maturity); 6] = [
    (FULL_PCPUS_ONLY, Maturity::Stable),
    (STRICT_RESERVATION, Maturity::Stable),
    (DISTRIBUTE_ACROSS_NUMA, Maturity::Beta),
    (PREFER_UNCORE, Maturity::Beta),
    (ALIGN_BY_SOCKET, Maturity::Alpha),
    (DISTRIBUTE_ACROSS_CORES, Maturity::Alpha),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maturity {
    Alpha,
    Beta,
    Stable,
}

impl KubeletConfiguration {
    pub(super) fn cpu_options(
        &self,
        policy: CpuPolicy,
        topology_policy: TopologyPolicy,
        machine: &Topology,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<CpuPolicyOptions, KubeletConfigError> {
        const FIELD: &str = "cpuManagerPolicyOptions";
        let mut opts = CpuPolicyOptions::default();
        if policy == CpuPolicy::None {
            if !self.cpu_manager_policy_options.is_empty() {
                warnings.push(ConfigWarning {
                    field: FIELD.into(),
                    message: "ignored: the none CPU manager policy takes no options".into(),
                });
            }
            return Ok(opts);
        }
        for (name, value) in &self.cpu_manager_policy_options {
            let Some(&(_, maturity)) = OPTIONS.iter().find(|(n, _)| n == name) else {
                return Err(KubeletConfigError::UnknownCpuOption {
                    option: name.clone(),
                });
            };
            let gate = match maturity {
                Maturity::Alpha => Some(("Alpha", "CPUManagerPolicyAlphaOptions")),
                Maturity::Beta => Some(("Beta", "CPUManagerPolicyBetaOptions")),
                Maturity::Stable => None,
            };
            if let Some((level, gate)) = gate.filter(|(_, g)| !self.gate(g)) {
                return Err(KubeletConfigError::CpuOptionGate {
                    option: name.clone(),
                    level,
                    gate,
                });
            }
            let on = parse_bool(FIELD, name, value)?;
            let slot = match name.as_str() {
                FULL_PCPUS_ONLY => &mut opts.full_pcpus_only,
                DISTRIBUTE_ACROSS_NUMA => &mut opts.distribute_cpus_across_numa,
                ALIGN_BY_SOCKET => &mut opts.align_by_socket,
                DISTRIBUTE_ACROSS_CORES => &mut opts.distribute_cpus_across_cores,
                STRICT_RESERVATION => &mut opts.strict_cpu_reservation,
                _ => &mut opts.prefer_align_cpus_by_uncore_cache,
            };
            *slot = on;
        }
        check_pairs(&opts)?;
        if opts.align_by_socket {
            if topology_policy == TopologyPolicy::SingleNumaNode {
                return Err(KubeletConfigError::AlignBySocketSingleNuma);
            }
            let sockets = machine
                .cpus
                .iter()
                .map(|c| c.socket)
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let numa = super::numa_node_ids(machine).len();
            if sockets > numa {
                return Err(KubeletConfigError::AlignBySocketHardware { sockets, numa });
            }
        }
        Ok(opts)
    }

    pub(super) fn reserved_cpus(
        &self,
        policy: CpuPolicy,
        machine: &Topology,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Result<ReservedCpus, KubeletConfigError> {
        let kube = reservation_map("kubeReserved", &self.kube_reserved)?;
        let system = reservation_map("systemReserved", &self.system_reserved)?;
        let online = online_cpus(machine);
        if let Some(list) = self
            .reserved_system_cpus
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            let set = CpuSet::parse(list)
                .map_err(|source| KubeletConfigError::ReservedCpuList { source })?;
            if !set.is_subset(&online) {
                return Err(KubeletConfigError::ReservedCpusOffline {
                    value: list.to_string(),
                    online: online.to_list(),
                });
            }
            if kube.contains_key("cpu") || system.contains_key("cpu") {
                warnings.push(ConfigWarning {
                    field: "reservedSystemCPUs".into(),
                    message: "overrides the cpu of kubeReserved and systemReserved".into(),
                });
            }
            return Ok(ReservedCpus::Explicit(set));
        }
        let milli = [&kube, &system]
            .iter()
            .filter_map(|m| m.get("cpu"))
            .map(|q| u64::try_from(q.milli_value()).unwrap_or(0))
            .sum::<u64>();
        let wanted = milli.div_ceil(1000);
        if wanted > online.len() as u64 {
            return Err(KubeletConfigError::ReservedCpuCount {
                wanted,
                online: online.len(),
            });
        }
        if policy == CpuPolicy::Static && milli == 0 {
            warnings.push(ConfigWarning {
                field: "reservedSystemCPUs".into(),
                message: "the static CPU policy runs with no reserved CPU, so every CPU can be \
                          granted exclusively (the kubelet refuses this: set reservedSystemCPUs \
                          or kubeReserved/systemReserved cpu)"
                    .into(),
            });
        }
        Ok(ReservedCpus::Count { milli })
    }
}

/// `kubeReserved` / `systemReserved` as the kubelet's `parseResourceList` reads them.
pub(super) fn reservation_map(
    field: &'static str,
    map: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Quantity>, KubeletConfigError> {
    map.iter()
        .map(|(k, v)| match k.as_str() {
            "cpu" | "memory" | "ephemeral-storage" | "pid" => {
                Ok((k.clone(), parse_quantity(format!("{field}[{k}]"), v)?))
            }
            _ => Err(KubeletConfigError::CannotReserve {
                field,
                resource: k.clone(),
            }),
        })
        .collect()
}

/// The pairs `NewStaticPolicyOptions` refuses, in its order.
fn check_pairs(o: &CpuPolicyOptions) -> Result<(), KubeletConfigError> {
    let pairs = [
        (
            o.full_pcpus_only && o.distribute_cpus_across_cores,
            FULL_PCPUS_ONLY,
            DISTRIBUTE_ACROSS_CORES,
        ),
        (
            o.distribute_cpus_across_numa && o.distribute_cpus_across_cores,
            DISTRIBUTE_ACROSS_NUMA,
            DISTRIBUTE_ACROSS_CORES,
        ),
        (
            o.prefer_align_cpus_by_uncore_cache && o.distribute_cpus_across_cores,
            PREFER_UNCORE,
            DISTRIBUTE_ACROSS_CORES,
        ),
        (
            o.prefer_align_cpus_by_uncore_cache && o.distribute_cpus_across_numa,
            PREFER_UNCORE,
            DISTRIBUTE_ACROSS_NUMA,
        ),
    ];
    match pairs.iter().find(|(clash, _, _)| *clash) {
        Some(&(_, a, b)) => Err(KubeletConfigError::IncompatibleCpuOptions { a, b }),
        None => Ok(()),
    }
}

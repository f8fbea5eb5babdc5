//! What a SIGHUP may change: the reload decision as a pure function of the settings in force and
//! the settings just read. Resource-manager settings are refused as the kubelet refuses them
//! (they need a drained node); settings bound at start need a restart; the rest is applied.

use std::net::SocketAddr;

use super::Settings;
use crate::k8s::kubelet_config::KubeletConfiguration;
use crate::podresources::Options;

/// Why a changed setting is refused after a drained node.
pub const NEEDS_DRAIN: &str =
    "needs a drained node, as in the kubelet: drain, restart numa-shim with the new file (a new \
     policy also needs the checkpoint in stateDir removed), uncordon";
/// Why a changed setting is refused until a restart.
pub const NEEDS_RESTART: &str = "takes effect at the next restart of numa-shim";

/// The decision for one reload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Changes applied now.
    pub apply: Vec<Change>,
    /// Changed settings left as they were, with why.
    pub refused: Vec<Refusal>,
}

/// A change applied while serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Move `/metrics`, `/healthz`, `/readyz`, `/placement` (or turn them off).
    MetricsAddress(Option<SocketAddr>),
    /// Replace the log filter (`None`: back to `RUST_LOG`, else `info`).
    LogLevel(Option<String>),
}

/// A changed setting that is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The configuration key.
    pub field: &'static str,
    pub reason: &'static str,
}

/// Compares the settings in force with the new ones.
pub fn plan(old: &Settings, new: &Settings) -> ReloadPlan {
    let mut plan = ReloadPlan::default();
    if old.metrics_address != new.metrics_address {
        plan.apply.push(Change::MetricsAddress(new.metrics_address));
    }
    if old.log_level != new.log_level {
        plan.apply.push(Change::LogLevel(new.log_level.clone()));
    }
    // The PodResources server: turned on/off or moved, and its settings while on.
    let server = |s: &Settings| s.pod_resources.as_ref().map(|o| o.socket.clone());
    let while_on = |f: fn(&Options) -> String| match (&old.pod_resources, &new.pod_resources) {
        (Some(a), Some(b)) => f(a) != f(b),
        _ => false,
    };
    let restart: [(&'static str, bool); 18] = [
        ("listen", old.listen != new.listen),
        ("runtime", old.runtime != new.runtime),
        ("socketMode", old.socket.mode != new.socket.mode),
        ("socketGroup", old.socket.group != new.socket.group),
        (
            "shutdownGracePeriod",
            old.shutdown_grace != new.shutdown_grace,
        ),
        ("logFormat", old.log_format != new.log_format),
        ("stateDir", old.state_dir != new.state_dir),
        ("topology", old.topology != new.topology),
        ("podKnowledge", old.spec_source != new.spec_source),
        ("refusalReports", old.reports != new.reports),
        (
            "draClaims/draNumaAttributes/draClaimsTimeout",
            old.claims != new.claims,
        ),
        ("driftPeriod", old.drift_period != new.drift_period),
        ("crioConfig", old.crio_config != new.crio_config),
        (
            "devicePluginFront",
            old.device_plugin_front != new.device_plugin_front,
        ),
        (
            "kubeletConfig/kubeletConfigDir",
            old.kubelet_running != new.kubelet_running,
        ),
        ("podResourcesSocket", server(old) != server(new)),
        (
            "kubeletPodResourcesSocket",
            while_on(|o| format!("{:?}", o.kubelet_socket)),
        ),
        (
            "podResourcesQps/podResourcesBurst",
            while_on(|o| format!("{}/{}", o.qps, o.burst)),
        ),
    ];
    for (field, changed) in restart {
        if changed {
            plan.refused.push(Refusal {
                field,
                reason: NEEDS_RESTART,
            });
        }
    }
    for field in kubelet_changes(&old.kubelet, &new.kubelet) {
        plan.refused.push(Refusal {
            field,
            reason: NEEDS_DRAIN,
        });
    }
    plan
}

/// The settings in force after applying `plan` to `old` (refused changes stay out).
pub fn applied(old: &Settings, plan: &ReloadPlan) -> Settings {
    let mut next = old.clone();
    for change in &plan.apply {
        match change {
            Change::MetricsAddress(addr) => next.metrics_address = *addr,
            Change::LogLevel(level) => next.log_level = level.clone(),
        }
    }
    next
}

/// The resource-manager keys whose values differ.
fn kubelet_changes(a: &KubeletConfiguration, b: &KubeletConfiguration) -> Vec<&'static str> {
    // Names every field, so that a new one fails to compile here instead of being dropped
    // silently on reload (neither applied nor refused).
    let KubeletConfiguration {
        api_version: _,
        kind: _,
        feature_gates: _,
        cpu_manager_policy: _,
        cpu_manager_policy_options: _,
        reserved_system_cpus: _,
        kube_reserved: _,
        system_reserved: _,
        eviction_hard: _,
        merge_default_eviction_settings: _,
        memory_manager_policy: _,
        reserved_memory: _,
        topology_manager_policy: _,
        topology_manager_scope: _,
        topology_manager_policy_options: _,
    } = a;
    let fields: [(&'static str, bool); 13] = [
        ("featureGates", a.feature_gates != b.feature_gates),
        (
            "cpuManagerPolicy",
            a.cpu_manager_policy != b.cpu_manager_policy,
        ),
        (
            "cpuManagerPolicyOptions",
            a.cpu_manager_policy_options != b.cpu_manager_policy_options,
        ),
        (
            "reservedSystemCPUs",
            a.reserved_system_cpus != b.reserved_system_cpus,
        ),
        ("kubeReserved", a.kube_reserved != b.kube_reserved),
        ("systemReserved", a.system_reserved != b.system_reserved),
        ("evictionHard", a.eviction_hard != b.eviction_hard),
        (
            "mergeDefaultEvictionSettings",
            a.merge_default_eviction_settings != b.merge_default_eviction_settings,
        ),
        (
            "memoryManagerPolicy",
            a.memory_manager_policy != b.memory_manager_policy,
        ),
        ("reservedMemory", a.reserved_memory != b.reserved_memory),
        (
            "topologyManagerPolicy",
            a.topology_manager_policy != b.topology_manager_policy,
        ),
        (
            "topologyManagerScope",
            a.topology_manager_scope != b.topology_manager_scope,
        ),
        (
            "topologyManagerPolicyOptions",
            a.topology_manager_policy_options != b.topology_manager_policy_options,
        ),
    ];
    fields
        .into_iter()
        .filter_map(|(field, changed)| changed.then_some(field))
        .collect()
}

#[cfg(test)]
mod tests;

//! Admission errors with the kubelet's reasons (`Type()`) and messages (`Error()`).

/// Why a pod was not admitted. `reason()` is the pod status reason the kubelet would set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The merged hint does not satisfy the topology policy.
    #[error("Resources cannot be allocated with Topology locality")]
    TopologyAffinity,
    /// The merged hint does not satisfy the topology policy once the NUMA nodes of the pod's DRA
    /// devices are merged in, and would without them: the kubelet's reason and message, followed
    /// by the claims (`ResourceClaim ns/name (devices on NUMA node 1)`; docs/devices.md).
    #[error("Resources cannot be allocated with Topology locality: {claims}")]
    ClaimTopologyAffinity { claims: String },
    /// The same for a pod with pod-level resources (PodLevelResourceManagers on): kubelet's
    /// `PodLevelTopologyAffinityError`, whose text names the scope.
    #[error("Pod Scope {}", scope.text())]
    PodLevelTopologyAffinity { scope: RefusingScope },
    /// Pod-level resources leave no room for shared containers; the message is the kubelet's.
    #[error("{message}")]
    EmptyPodSharedPool { message: String },
    /// full-pcpus-only could not be honoured.
    #[error("{}", smt_message(*requested_cpus, *cpus_per_core, *available_physical_cpus, *caused_by_physical_cpus))]
    SmtAlignment {
        requested_cpus: usize,
        cpus_per_core: usize,
        available_physical_cpus: usize,
        caused_by_physical_cpus: bool,
    },
    /// Any other allocation failure (e.g. not enough CPUs), wrapped as the kubelet does.
    #[error("Allocate failed due to {0}, which is unexpected")]
    Unexpected(String),
}

impl AdmissionError {
    /// The kubelet's reason string for the pod status and event.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TopologyAffinity
            | Self::ClaimTopologyAffinity { .. }
            | Self::PodLevelTopologyAffinity { .. } => "TopologyAffinityError",
            Self::EmptyPodSharedPool { .. } => "EmptyPodSharedPoolError",
            Self::SmtAlignment { .. } => "SMTAlignmentError",
            Self::Unexpected(_) => "UnexpectedAdmissionError",
        }
    }
}

/// The Topology Manager scope that refused a pod with pod-level resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusingScope {
    Pod,
    Container,
}

impl RefusingScope {
    /// The texts of kubelet's `scope_pod.go` and `scope_container.go`.
    fn text(self) -> &'static str {
        match self {
            Self::Pod => "pod with pod-level resources failed admission under pod-scope topology manager",
            Self::Container => {
                "pod with pod-level resources failed admission with a container-level topology manager"
            }
        }
    }
}

fn smt_message(requested: usize, per_core: usize, available: usize, physical: bool) -> String {
    if physical {
        format!(
            "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {per_core}"
        )
    } else {
        format!("SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}")
    }
}

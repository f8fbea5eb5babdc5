//! What `simulate` reports: per pod, admitted or rejected (kubelet reason and message), the pod
//! CPU budget in pod scope, and per live container the cpuset it would run on at the end of the
//! scenario (exclusive slice, pod shared pool or node shared pool), the CFS quota and the
//! memory NUMA nodes; plus the node's reserved and shared CPUs. Serializes to the JSON of
//! docs/simulate.md.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::placement::node::{ContainerPlacement, CpuQuota, Node};
use crate::placement::{AdmissionError, ContainerRole, NumaMask, PodSpec};

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub pods: Vec<PodReport>,
    pub node: NodeReport,
}

/// One pod, in the order pods first arrived. Removed pods are left out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub admitted: bool,
    /// The kubelet's pod status reason when rejected (`TopologyAffinityError`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The pod CPU budget ("bubble") in pod scope with pod-level resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// The NUMA nodes of the pod memory budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<String>,
    /// Live containers, init containers first, in spec order (empty when rejected).
    pub containers: Vec<ContainerReport>,
}

/// One live container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerReport {
    pub name: String,
    pub role: ContainerRole,
    /// The cpuset it runs on now: its exclusive slice, the pod shared pool or the node shared pool.
    pub cpus: String,
    pub exclusive: bool,
    /// CRI `cpu_quota` for a 100ms period: -1 unlimited (exclusive), 0 no limit, else µs.
    pub cpu_quota: i64,
    /// `cpuset.mems`, when the memory manager pins the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<String>,
}

/// The node's pools at the end.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeReport {
    #[serde(rename = "reservedCPUs")]
    pub reserved_cpus: String,
    /// The node shared pool (kubelet's default CPU set).
    #[serde(rename = "sharedCPUs")]
    pub shared_cpus: String,
}

#[derive(Debug, Clone)]
enum State {
    Admitted,
    Rejected(AdmissionError),
    Removed,
}

/// The pods seen so far and what became of them.
#[derive(Debug, Default)]
pub(super) struct Book {
    order: Vec<(String, PodSpec, State)>,
    index: BTreeMap<String, usize>,
}

impl Book {
    pub(super) fn admitted(&mut self, pod: &PodSpec, result: Result<(), AdmissionError>) {
        let key = format!("{}/{}", pod.namespace, pod.name);
        let state = match result {
            Ok(()) => State::Admitted,
            Err(e) => State::Rejected(e),
        };
        match self.index.get(&key) {
            Some(&i) => self.order[i] = (key, pod.clone(), state),
            None => {
                self.index.insert(key.clone(), self.order.len());
                self.order.push((key, pod.clone(), state));
            }
        }
    }

    /// The uid of a pod that is admitted and not removed.
    pub(super) fn live_uid(&self, key: &str) -> Option<String> {
        let (_, pod, state) = &self.order[*self.index.get(key)?];
        matches!(state, State::Admitted).then(|| pod.uid.clone())
    }

    pub(super) fn removed(&mut self, key: &str) {
        if let Some(&i) = self.index.get(key) {
            self.order[i].2 = State::Removed;
        }
    }

    pub(super) fn report(&self, node: &Node) -> Report {
        let pods = self
            .order
            .iter()
            .filter_map(|(_, pod, state)| match state {
                State::Removed => None,
                State::Rejected(e) => Some(PodReport {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    admitted: false,
                    reason: Some(e.reason().to_string()),
                    message: Some(e.to_string()),
                    cpus: None,
                    memory_nodes: None,
                    containers: Vec::new(),
                }),
                State::Admitted => admitted_report(node, pod),
            })
            .collect();
        Report {
            pods,
            node: NodeReport {
                reserved_cpus: node.reserved_cpus().to_list(),
                shared_cpus: node.shared_cpus().to_list(),
            },
        }
    }
}

fn admitted_report(node: &Node, pod: &PodSpec) -> Option<PodReport> {
    let placement = node.placement(&pod.uid)?;
    let memory_nodes: CpuSet = placement
        .memory
        .iter()
        .flat_map(|b| b.numa.iter().copied())
        .collect();
    Some(PodReport {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        admitted: true,
        reason: None,
        message: None,
        cpus: placement.cpus.as_ref().map(CpuSet::to_list),
        memory_nodes: (!memory_nodes.is_empty()).then(|| memory_nodes.to_list()),
        containers: placement
            .containers
            .iter()
            .map(|c| container_report(node, pod, c))
            .collect(),
    })
}

fn container_report(node: &Node, pod: &PodSpec, c: &ContainerPlacement) -> ContainerReport {
    ContainerReport {
        name: c.name.clone(),
        role: c.role,
        cpus: c.cpus.to_list(),
        exclusive: c.exclusive,
        cpu_quota: match c.cpu_quota {
            CpuQuota::Unlimited => -1,
            CpuQuota::Keep => cfs_quota(effective_cpu_limit(node, pod, &c.name)),
        },
        memory_nodes: c.memory_nodes.map(mask_list),
    }
}

/// The container's CPU limit, or the pod-level limit when it has none (`getCPULimit`).
fn effective_cpu_limit(node: &Node, pod: &PodSpec, name: &str) -> u64 {
    let own = pod
        .init_containers
        .iter()
        .chain(&pod.containers)
        .find(|c| c.name == name)
        .and_then(|c| c.resources.limits.cpu_milli);
    let pod_level = pod
        .resources
        .as_ref()
        .filter(|_| node.config().gates.pod_level_resources)
        .and_then(|r| r.limits.cpu_milli);
    own.or(pod_level).unwrap_or(0)
}

/// `MilliCPUToQuota` with the 100ms period: 0 without a limit, at least 1000µs.
fn cfs_quota(milli: u64) -> i64 {
    if milli == 0 {
        return 0;
    }
    i64::try_from(milli.saturating_mul(100))
        .unwrap_or(i64::MAX)
        .max(1000)
}

fn mask_list(m: NumaMask) -> String {
    m.ids().collect::<CpuSet>().to_list()
}

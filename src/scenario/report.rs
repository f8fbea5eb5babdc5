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
    /// Why the last `resize` step of the pod was refused (it changed nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize_error: Option<String>,
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

/// What became of a pod.
#[derive(Debug, Clone)]
pub(super) enum State {
    Admitted,
    Rejected(AdmissionError),
    /// The API server would refuse the pod (it never reaches the node).
    Refused(String),
    /// Removed as a whole.
    Removed,
}

/// One pod the book has seen.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) namespace: String,
    pub(super) name: String,
    /// The pod as admitted (none for a refused pod).
    pub(super) pod: Option<PodSpec>,
    pub(super) state: State,
    /// The last refused resize.
    pub(super) resize_error: Option<String>,
}

/// The pods seen so far and what became of them.
#[derive(Debug, Default)]
pub(super) struct Book {
    order: Vec<Entry>,
    index: BTreeMap<String, usize>,
}

impl Book {
    fn record(&mut self, namespace: &str, name: &str, pod: Option<PodSpec>, state: State) {
        let key = format!("{namespace}/{name}");
        let entry = Entry {
            namespace: namespace.to_string(),
            name: name.to_string(),
            pod,
            state,
            resize_error: None,
        };
        match self.index.get(&key) {
            Some(&i) => self.order[i] = entry,
            None => {
                self.index.insert(key, self.order.len());
                self.order.push(entry);
            }
        }
    }

    pub(super) fn admitted(&mut self, pod: &PodSpec, result: Result<(), AdmissionError>) {
        let state = match result {
            Ok(()) => State::Admitted,
            Err(e) => State::Rejected(e),
        };
        self.record(&pod.namespace, &pod.name, Some(pod.clone()), state);
    }

    pub(super) fn refused(&mut self, namespace: &str, name: &str, error: String) {
        self.record(namespace, name, None, State::Refused(error));
    }

    /// The uid of a pod that is admitted and not removed.
    pub(super) fn live_uid(&self, key: &str) -> Option<String> {
        let entry = &self.order[*self.index.get(key)?];
        match (&entry.state, &entry.pod) {
            (State::Admitted, Some(pod)) => Some(pod.uid.clone()),
            _ => None,
        }
    }

    fn set_state(&mut self, key: &str, state: State) {
        if let Some(&i) = self.index.get(key) {
            self.order[i].state = state;
        }
    }

    /// A resize step: on success (`error` none) the recorded spec takes the new resources.
    pub(super) fn resized(
        &mut self,
        key: &str,
        container: Option<&str>,
        resources: &crate::placement::Resources,
        error: Option<String>,
    ) {
        let Some(&i) = self.index.get(key) else {
            return;
        };
        let entry = &mut self.order[i];
        if error.is_none() {
            if let Some(pod) = entry.pod.as_mut() {
                match container {
                    None => pod.resources = Some(resources.clone()),
                    Some(name) => {
                        if let Some(c) = pod
                            .init_containers
                            .iter_mut()
                            .chain(pod.containers.iter_mut())
                            .find(|c| c.name == name)
                        {
                            c.resources = resources.clone();
                        }
                    }
                }
            }
        }
        entry.resize_error = error;
    }

    pub(super) fn removed(&mut self, key: &str) {
        self.set_state(key, State::Removed);
    }

    /// Whether the pod was refused by the API server or the node (and not removed).
    pub(super) fn is_refused_or_rejected(&self, key: &str) -> bool {
        self.index
            .get(key)
            .is_some_and(|&i| matches!(self.order[i].state, State::Refused(_) | State::Rejected(_)))
    }

    /// Every pod seen, in first-arrival order.
    pub(super) fn entries(&self) -> &[Entry] {
        &self.order
    }

    /// The end report; `stopped` (pod uid → containers) are left out of their pods.
    pub(super) fn report(&self, node: &Node, stopped: &Stopped) -> Report {
        let pods = self
            .order
            .iter()
            .filter_map(|e| {
                let rejected = |reason: Option<&str>, message: String| PodReport {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    admitted: false,
                    reason: reason.map(str::to_string),
                    message: Some(message),
                    cpus: None,
                    memory_nodes: None,
                    containers: Vec::new(),
                    resize_error: None,
                };
                match (&e.state, &e.pod) {
                    (State::Removed, _) => None,
                    (State::Rejected(err), _) => {
                        Some(rejected(Some(err.reason()), err.to_string()))
                    }
                    (State::Refused(msg), _) => Some(rejected(None, msg.clone())),
                    (State::Admitted, Some(pod)) => {
                        admitted_report(node, pod, stopped).map(|mut r| {
                            r.resize_error = e.resize_error.clone();
                            r
                        })
                    }
                    (State::Admitted, None) => None,
                }
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

/// Pod uid → containers that stopped (kept by the node, left out of reports).
pub(super) type Stopped = BTreeMap<String, std::collections::BTreeSet<String>>;

fn admitted_report(node: &Node, pod: &PodSpec, stopped: &Stopped) -> Option<PodReport> {
    let placement = node.placement(&pod.uid)?;
    let gone = stopped.get(&pod.uid);
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
            .filter(|c| gone.is_none_or(|g| !g.contains(&c.name)))
            .map(|c| container_report(node, pod, c))
            .collect(),
        resize_error: None,
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

//! The front's `GetPreferredAllocation` answer: the pod the kubelet is allocating for, numa-shim's
//! own admission of it run as a dry run on a copy of the decision core with the kubelet's
//! available devices, and the devices that gives the container; else the kubelet's own choice
//! with topology visible, and why (docs/devices.md, "The device plugin front").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::choice::{asking, from_decision, kubelet_choice, pick_pod, Wanted};
use crate::knowledge::PodMeta;
use crate::lifecycle::Placer;
use crate::placement::device::alloc::Ids;
use crate::placement::device::Device;
use crate::placement::PodSpec;

/// How long the front waits for the pod being admitted to reach numa-shim's pod sources (the
/// kubelet tells its Pods API watchers asynchronously).
pub const POD_WAIT: Duration = Duration::from_secs(2);
/// How long one pod's dry-run decision is reused for its next containers' calls.
const MEMO_FOR: Duration = Duration::from_secs(30);

/// Where an answer came from (logged, and counted by tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// numa-shim's decision for pod `namespace/name`, container `container`.
    Decision { pod: String, container: String },
    /// The kubelet's own choice, because of `reason`.
    Fallback { reason: String },
}

/// One pod's dry-run decision: container → resource → ids, and which containers were answered.
#[derive(Debug, Clone)]
struct Memo {
    decided: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    answered: BTreeMap<String, Vec<String>>,
    at: Instant,
}

/// Chooses devices for the kubelet's `GetPreferredAllocation` calls.
#[derive(Debug)]
pub struct Chooser {
    placer: Option<Arc<Placer>>,
    /// The kubelet's PodResources: pods it already gave devices of the resource are not the one
    /// being admitted (a pod numa-shim refused at RunPodSandbox keeps them and stays pending).
    kubelet: Option<Arc<crate::podresources::KubeletSource>>,
    /// The kubelet's Pods API socket: its `ListPods` has the pod being admitted, which the
    /// watch stream delivers only after admission, and no pod the kubelet has deleted.
    pods_api: Option<std::path::PathBuf>,
    memo: Mutex<HashMap<String, Memo>>,
    pod_wait: Duration,
}

impl Chooser {
    /// `placer`: numa-shim's decisions (`None`: always the kubelet's own choice).
    pub fn new(placer: Option<Arc<Placer>>) -> Self {
        Self {
            placer,
            kubelet: None,
            pods_api: None,
            memo: Mutex::new(HashMap::new()),
            pod_wait: POD_WAIT,
        }
    }

    /// Reads which pods already hold devices from the kubelet's PodResources.
    pub fn with_kubelet(mut self, kubelet: Arc<crate::podresources::KubeletSource>) -> Self {
        self.kubelet = Some(kubelet);
        self
    }

    /// Lists the kubelet's pods through its Pods API socket as well.
    pub fn with_pods_api(mut self, socket: std::path::PathBuf) -> Self {
        self.pods_api = Some(socket);
        self
    }

    /// Sets how long to wait for the pod to become known (tests).
    pub fn pod_wait(mut self, wait: Duration) -> Self {
        self.pod_wait = wait;
        self
    }

    /// The devices to prefer for `wanted`, given the resource's devices with their true
    /// topology (healthy ones), and where the answer came from.
    pub async fn choose(&self, devices: &[Device], wanted: &Wanted) -> (Ids, Answered) {
        match self.decided(devices, wanted).await {
            Ok((ids, answered)) => (ids, answered),
            Err(reason) => {
                let nodes = self.machine_nodes(devices);
                let ids = kubelet_choice(devices, &nodes, wanted);
                (ids, Answered::Fallback { reason })
            }
        }
    }

    fn machine_nodes(&self, devices: &[Device]) -> Vec<u32> {
        match &self.placer {
            Some(p) => p
                .registry()
                .node()
                .topology()
                .numa
                .iter()
                .map(|n| n.id)
                .collect(),
            None => {
                let mut n: Vec<u32> = devices.iter().flat_map(|d| d.numa_nodes.clone()).collect();
                n.sort_unstable();
                n.dedup();
                n
            }
        }
    }

    async fn decided(
        &self,
        devices: &[Device],
        wanted: &Wanted,
    ) -> Result<(Ids, Answered), String> {
        let placer = self
            .placer
            .as_ref()
            .ok_or("numa-shim places no pods (its policies are none)")?;
        let pod = self.find_pod(placer, wanted).await?;
        let key = format!("{}/{}", pod.namespace, pod.name);
        let containers: Vec<String> = asking(&pod, &wanted.resource, wanted.size)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        // The next container of the pod not answered yet for this resource (the kubelet
        // allocates them in order, one call each).
        let memo = self.memo_of(&pod.uid);
        let answered = memo
            .as_ref()
            .and_then(|m| m.answered.get(&wanted.resource).cloned())
            .unwrap_or_default();
        let container = containers
            .iter()
            .find(|c| !answered.contains(c))
            .or(containers.first())
            .cloned()
            .ok_or("no container of the pod asks this many devices")?;
        if let Some(m) = &memo {
            if let Ok(ids) = from_decision(&m.decided, &container, wanted) {
                self.remember(&pod.uid, m.decided.clone(), &wanted.resource, &container);
                return Ok((
                    ids,
                    Answered::Decision {
                        pod: key,
                        container,
                    },
                ));
            }
        }
        let decided = self.dry_run(placer, &pod, devices, wanted).await?;
        let ids =
            from_decision(&decided, &container, wanted).map_err(|e| format!("pod {key}: {e}"))?;
        self.remember(&pod.uid, decided, &wanted.resource, &container);
        Ok((
            ids,
            Answered::Decision {
                pod: key,
                container,
            },
        ))
    }

    /// The pod being admitted: waits up to the pod wait for one to be known.
    async fn find_pod(&self, placer: &Placer, wanted: &Wanted) -> Result<PodSpec, String> {
        let deadline = Instant::now() + self.pod_wait;
        let holders = self.holders(&wanted.resource).await;
        let recent: Vec<String> = {
            let memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            memo.iter()
                .filter(|(_, m)| m.at.elapsed() < MEMO_FOR)
                .map(|(uid, _)| uid.clone())
                .collect()
        };
        loop {
            // The kubelet's pods now, where its Pods API answers, are the truth: a pod it
            // deleted (terminating, or its deletion not yet through the watch) is not being
            // admitted. Else the pods numa-shim's sources watch.
            let known = match self.listed_pods().await {
                Some(listed) => listed,
                None => placer.knowledge().all_pods(),
            };
            let mut pods = not_admitted(placer, known);
            pods.retain(|(p, _)| {
                recent.contains(&p.uid) || !holders.contains(&(p.namespace.clone(), p.name.clone()))
            });
            if let Some(pod) = pick_pod(&pods, &wanted.resource, wanted.size) {
                return Ok(pod.clone());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no pod known on this node without a sandbox asks {} {} ({} pods known)",
                    wanted.size,
                    wanted.resource,
                    pods.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The pods the kubelet's Pods API `ListPods` has, if it is configured and answers.
    async fn listed_pods(&self) -> Option<Vec<(PodSpec, PodMeta)>> {
        let socket = self.pods_api.as_ref()?;
        match crate::knowledge::pods_api::list_pods(socket, Duration::from_secs(1)).await {
            Ok(listed) => Some(listed),
            Err(status) => {
                tracing::debug!(socket = %socket.display(), code = ?status.code(), message = status.message(), "pods api ListPods did not answer; pods from the watched sources only");
                None
            }
        }
    }

    /// Pods (namespace, name) the kubelet lists with devices of `resource`.
    async fn holders(&self, resource: &str) -> std::collections::HashSet<(String, String)> {
        let Some(kubelet) = &self.kubelet else {
            return Default::default();
        };
        let Some(list) = kubelet.list().await else {
            return Default::default();
        };
        list.pod_resources
            .iter()
            .filter(|p| {
                p.containers
                    .iter()
                    .flat_map(|c| &c.devices)
                    .any(|d| d.resource_name == resource && !d.device_ids.is_empty())
            })
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect()
    }

    /// numa-shim's admission of `pod` on a copy of the decision core, with the kubelet's devices
    /// and, for this resource, the front's true devices of which only the offered ones are free.
    async fn dry_run(
        &self,
        placer: &Placer,
        pod: &PodSpec,
        devices: &[Device],
        wanted: &Wanted,
    ) -> Result<BTreeMap<String, BTreeMap<String, Vec<String>>>, String> {
        let mut facts = placer.device_facts(pod).await.unwrap_or_default();
        let claims = placer.claim_facts(pod).await;
        facts
            .allocatable
            .insert(wanted.resource.clone(), devices.to_vec());
        let own: Ids = facts
            .allocated
            .values()
            .filter_map(|r| r.get(&wanted.resource))
            .flatten()
            .cloned()
            .collect();
        let busy: std::collections::BTreeSet<String> = devices
            .iter()
            .map(|d| d.id.clone())
            .filter(|id| {
                !wanted.available.contains(id) && !wanted.must.contains(id) && !own.contains(id)
            })
            .collect();
        facts.in_use.insert(wanted.resource.clone(), busy);
        let spec = pod.clone();
        let decided = placer
            .dry_run("GetPreferredAllocation", move |registry| {
                let mut node = registry.into_node();
                node.set_claims(claims);
                node.admit_with_devices(&spec, facts).map(|_| {
                    spec.init_containers
                        .iter()
                        .chain(&spec.containers)
                        .map(|c| {
                            // A pod-level pod under the pod scope gets its devices when each
                            // container starts, with the pod's hint (the kubelet's own
                            // pod-level resource managers); behind numa-shim the kubelet asks
                            // at admission, so the start is played now.
                            if node.device_manager().needs_allocation(&spec, c) {
                                node.start_container(&spec.uid, &c.name);
                            }
                            let held = node.device_manager().container_devices(&spec.uid, &c.name);
                            (c.name.clone(), held)
                        })
                        .collect::<BTreeMap<_, _>>()
                })
            })
            .await;
        match decided {
            Ok(Ok(decided)) => Ok(decided),
            Ok(Err(err)) => Err(format!(
                "numa-shim's admission refuses pod {}/{} ({}: {err}); it is refused at RunPodSandbox",
                pod.namespace,
                pod.name,
                err.reason()
            )),
            Err(err) => Err(format!("the dry-run decision failed: {err}")),
        }
    }

    fn memo_of(&self, uid: &str) -> Option<Memo> {
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        memo.retain(|_, m| m.at.elapsed() < MEMO_FOR);
        memo.get(uid).cloned()
    }

    fn remember(
        &self,
        uid: &str,
        decided: BTreeMap<String, BTreeMap<String, Vec<String>>>,
        resource: &str,
        container: &str,
    ) {
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        let entry = memo.entry(uid.to_string()).or_insert_with(|| Memo {
            decided: decided.clone(),
            answered: BTreeMap::new(),
            at: Instant::now(),
        });
        entry.decided = decided;
        let answered = entry.answered.entry(resource.to_string()).or_default();
        if !answered.iter().any(|c| c == container) {
            answered.push(container.to_string());
        }
    }
}

/// The pods of `known` that numa-shim has not admitted (no sandbox yet).
fn not_admitted(placer: &Placer, known: Vec<(PodSpec, PodMeta)>) -> Vec<(PodSpec, PodMeta)> {
    let registry = placer.registry();
    known
        .into_iter()
        .filter(|(pod, _)| registry.pods().get(&pod.uid).is_none_or(|r| !r.active))
        .collect()
}

/// Logs one answer, fields first.
pub fn log_answer(resource: &str, wanted: &Wanted, ids: &Ids, answered: &Answered) {
    let available: Vec<&String> = wanted.available.iter().collect();
    let chosen: Vec<&String> = ids.iter().collect();
    match answered {
        Answered::Decision { pod, container } => {
            info!(resource, pod = %pod, container = %container, size = wanted.size, ?available, ?chosen, "device plugin front: preferred allocation from numa-shim's decision")
        }
        Answered::Fallback { reason } => {
            warn!(resource, size = wanted.size, ?available, ?chosen, reason = %reason, "device plugin front: preferred allocation is the kubelet's own choice")
        }
    }
}

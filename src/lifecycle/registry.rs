//! `Registry`: the decision core plus what ties its pods to CRI ids — sandbox ids, container
//! ids, and the cpusets numa-shim last applied to each container.
//!
//! Pure and synchronous: the hook calls it under a short lock and carries the answers out
//! (patches, runtime updates) after the lock is released. Every method leaves the registry
//! consistent on its own; reserve → commit or roll back is expressed as two calls.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::knowledge::SpecOrigin;
use crate::placement::node::{
    ContainerPlacement, CpuQuota, Isolation, Node, NodeError, NodeSnapshot,
};
use crate::placement::{AdmissionError, ContainerRole, ContainerSpec, PodSpec, Resources};

pub use adopt::{Adoption, FoundContainer, FoundPod};
pub use resize::{ResizeRefused, ResizeTarget, ResizeUndo, Resized, Undone};

/// Where a pod's spec came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The kubelet Pods API or the API server: the whole spec, admitted at RunPodSandbox.
    Spec,
    /// Inferred from CRI requests; containers are added as CreateContainer calls arrive.
    Inferred,
    /// Found running at start-up without a checkpoint: kept exactly where it runs, never
    /// re-admitted; its CPUs are held until it goes.
    Adopted,
}

/// One pod numa-shim admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    pub spec: PodSpec,
    pub source: Source,
    /// Set once the runtime created the sandbox; `None` while RunPodSandbox is in flight.
    pub sandbox_id: Option<String>,
    /// False after StopPodSandbox: resources are released, the record waits for removal.
    pub active: bool,
    /// Which source told the spec (`Source::Spec`: the Pods API or the API server; `Inferred`:
    /// CRI); unknown for pods restored from an older checkpoint or adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SpecOrigin>,
}

impl PodRecord {
    /// Where the pod's spec came from, as logs, metrics and `inspect` name it: `pods-api`,
    /// `apiserver`, `inferred`, `adopted` (`spec` when a watched source it was, but not which).
    pub fn source_name(&self) -> &'static str {
        match (self.source, self.origin) {
            (Source::Spec, Some(origin)) => origin.as_str(),
            (Source::Spec, None) => "spec",
            (Source::Inferred, _) => "inferred",
            (Source::Adopted, _) => "adopted",
        }
    }
}

/// One container numa-shim let through CreateContainer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub pod_uid: String,
    pub name: String,
    /// The cpuset numa-shim last sent for this container.
    pub cpus: CpuSet,
    /// The `cpuset_mems` numa-shim last sent, if any.
    pub mems: Option<String>,
    /// Whether the container holds an exclusive slice (CFS quota lifted).
    #[serde(default)]
    pub exclusive: bool,
    /// Adopted with CPUs of its own (exclusive slice or pod pool): never moved.
    #[serde(default)]
    pub pinned: bool,
}

impl ContainerRecord {
    /// The CFS quota numa-shim decided: `Some(-1)` (lifted) for an exclusive slice, `None` where
    /// the kubelet's value is kept.
    pub fn cpu_quota(&self) -> Option<i64> {
        self.exclusive.then_some(-1)
    }
}

/// What to write into a container's CRI resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDecision {
    pub cpus: CpuSet,
    pub mems: Option<String>,
    /// `Some(-1)` to lift the CFS quota (exclusive CPUs); `None` keeps the kubelet's value.
    pub cpu_quota: Option<i64>,
    pub exclusive: bool,
    /// Exclusive slice, pod shared pool, or node shared pool (host).
    pub isolation: Isolation,
}

/// A cpuset change numa-shim must push to a running container (a pool change, or what the
/// drift check puts back): its cpus, its mems and the CFS quota numa-shim decided, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpusetUpdate {
    pub container_id: String,
    pub cpus: CpuSet,
    pub mems: Option<String>,
    /// `Some(-1)` for a container whose quota numa-shim lifted; `None` keeps the runtime's.
    pub cpu_quota: Option<i64>,
}

/// The serialisable part of a registry (the checkpoint payload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistrySnapshot {
    pub node: NodeSnapshot,
    pub pods: BTreeMap<String, PodRecord>,
    pub containers: BTreeMap<String, ContainerRecord>,
}

/// The decision core and its CRI bookkeeping.
#[derive(Debug, Clone)]
pub struct Registry {
    node: Node,
    /// Pod UID → record.
    pods: BTreeMap<String, PodRecord>,
    /// Container id → record.
    containers: BTreeMap<String, ContainerRecord>,
    /// Sandbox id → pod UID, kept in step with `pods` (every change of a pod record's presence
    /// or sandbox id goes through `put_pod`, `take_pod` or `commit_sandbox`).
    by_sandbox: HashMap<String, String>,
    /// Pod UID → revision: a fresh number whenever the pod's record, its containers' records
    /// or its holdings change (see [`Registry::revision`]). Not part of the checkpoint.
    revisions: HashMap<String, u64>,
    /// The last revision handed out; also bumped by `restore`, which changes every pod.
    last_revision: u64,
}

impl Registry {
    pub fn new(node: Node) -> Self {
        Self {
            node,
            pods: BTreeMap::new(),
            containers: BTreeMap::new(),
            by_sandbox: HashMap::new(),
            revisions: HashMap::new(),
            last_revision: 0,
        }
    }

    /// The pod's revision: equal values mean nothing readers see of the pod (its record, its
    /// containers' records, its CPUs and memory) changed in between. Revisions are unique
    /// across pods and never reused, so a reader can key per-pod caches by `(uid, revision)`.
    pub fn revision(&self, pod_uid: &str) -> u64 {
        self.revisions.get(pod_uid).copied().unwrap_or(0)
    }

    /// Moves whenever anything in the registry changes (the newest pod revision handed out):
    /// equal values before and after a call mean the call changed nothing.
    pub fn last_revision(&self) -> u64 {
        self.last_revision
    }

    /// Gives the pod a fresh revision: called by every method that changes it.
    fn touch(&mut self, pod_uid: &str) {
        self.last_revision += 1;
        self.revisions
            .insert(pod_uid.to_string(), self.last_revision);
    }

    /// Forgets a pod's revision (the pod is gone).
    fn forget(&mut self, pod_uid: &str) {
        self.revisions.remove(pod_uid);
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The decision core alone, for a decision that is thrown away ([`crate::lifecycle::Placer::dry_run`]).
    pub fn into_node(self) -> Node {
        self.node
    }

    pub fn pods(&self) -> &BTreeMap<String, PodRecord> {
        &self.pods
    }

    pub fn containers(&self) -> &BTreeMap<String, ContainerRecord> {
        &self.containers
    }

    /// What the kubelet's device manager holds, for the next admission (`None`: it could not be
    /// read; the devices known before stay, none of them as given to the next pod).
    pub fn set_devices(&mut self, facts: Option<crate::placement::device::DeviceFacts>) {
        let facts = facts.unwrap_or_else(|| crate::placement::device::DeviceFacts {
            allocated: Default::default(),
            ..self.node.device_manager().facts().clone()
        });
        self.node.set_devices(facts);
    }

    /// The DRA claims of the pod admitted next (docs/devices.md, "DRA claims").
    pub fn set_claims(&mut self, claims: crate::placement::device::claims::ClaimFacts) {
        self.node.set_claims(claims);
    }

    /// Reserves resources for a pod (RunPodSandbox, before forwarding). A pod already admitted
    /// (a sandbox re-created for the same UID) keeps what it has: never re-admitted or moved.
    pub fn admit(&mut self, spec: PodSpec, source: Source) -> Result<(), AdmissionError> {
        if let Some(record) = self.pods.get_mut(&spec.uid) {
            if record.active {
                return Ok(());
            }
        }
        self.node.admit(&spec)?;
        self.touch(&spec.uid);
        let record = PodRecord {
            spec: spec.clone(),
            source,
            sandbox_id: None,
            active: true,
            origin: None,
        };
        self.put_pod(spec.uid, record);
        Ok(())
    }

    /// Records which source told the pod's spec, if nothing is recorded yet. Readers of
    /// revisions (PodResources) do not see it, so the revision stays.
    pub fn set_origin(&mut self, pod_uid: &str, origin: SpecOrigin) {
        if let Some(record) = self.pods.get_mut(pod_uid) {
            record.origin.get_or_insert(origin);
        }
    }

    /// The runtime created the sandbox: the reservation becomes the pod's.
    pub fn commit_sandbox(&mut self, pod_uid: &str, sandbox_id: &str) {
        if let Some(record) = self.pods.get_mut(pod_uid) {
            if let Some(old) = record.sandbox_id.replace(sandbox_id.to_string()) {
                self.by_sandbox.remove(&old);
            }
            self.by_sandbox
                .insert(sandbox_id.to_string(), pod_uid.to_string());
            self.touch(pod_uid);
        }
    }

    /// The runtime refused the sandbox: a first attempt's reservation is released.
    pub fn abort_sandbox(&mut self, pod_uid: &str) {
        if self
            .pods
            .get(pod_uid)
            .is_some_and(|r| r.sandbox_id.is_none())
        {
            self.drop_pod(pod_uid);
        }
    }

    /// Whether [`Registry::decide_container`] would infer container `name` of the sandbox from
    /// its CRI resources (an inferred pod seeing the container for the first time).
    pub fn infers(&self, sandbox_id: &str, name: &str) -> bool {
        self.uid_of_sandbox(sandbox_id)
            .and_then(|uid| self.pods.get(&uid))
            .is_some_and(|r| {
                r.active && r.source == Source::Inferred && !has_container(&r.spec, name)
            })
    }

    /// The spec numa-shim inferred for container `name` of an inferred pod, once the pod lists
    /// it (annotated on the container so recovery can rebuild the pod without a checkpoint).
    pub fn inferred_container(&self, sandbox_id: &str, name: &str) -> Option<ContainerSpec> {
        let uid = self.uid_of_sandbox(sandbox_id)?;
        let record = self
            .pods
            .get(&uid)
            .filter(|r| r.source == Source::Inferred)?;
        record
            .spec
            .containers
            .iter()
            .find(|c| c.name == name)
            .cloned()
    }

    /// Where container `name` of the sandbox should run (CreateContainer, before forwarding).
    /// `None`: numa-shim does not manage the sandbox (created before it, or not through it).
    pub fn decide_container(
        &mut self,
        sandbox_id: &str,
        name: &str,
        inferred: impl FnOnce(&PodSpec) -> ContainerSpec,
    ) -> Result<Option<ContainerDecision>, AdmissionError> {
        let Some(uid) = self.uid_of_sandbox(sandbox_id) else {
            return Ok(None);
        };
        let Some(record) = self.pods.get(&uid) else {
            return Ok(None);
        };
        if !record.active {
            return Ok(None);
        }
        if record.source == Source::Inferred && !has_container(&record.spec, name) {
            let container = inferred(&record.spec);
            self.touch(&uid);
            self.extend_inferred(&uid, container)?;
        }
        let placement = self.node.container(&uid, name);
        Ok(Some(match placement {
            Some(p) => decision(&p),
            None => self.unlisted(&uid),
        }))
    }

    /// Where a container the pod's spec does not list runs: an inferred container the pod could
    /// not be extended with, in its pod's shared pool; anything else (e.g. an ephemeral
    /// container) in the node shared pool.
    fn unlisted(&self, uid: &str) -> ContainerDecision {
        let inferred = self
            .pods
            .get(uid)
            .is_some_and(|p| p.source == Source::Inferred);
        inferred
            .then(|| self.pod_pool(uid))
            .flatten()
            .unwrap_or_else(|| ContainerDecision {
                cpus: self.node.shared_cpus(),
                mems: None,
                cpu_quota: None,
                exclusive: false,
                isolation: Isolation::Host,
            })
    }

    /// The pod's shared pool (its bubble without the exclusive slices), if it has a bubble
    /// and something is left of it.
    fn pod_pool(&self, uid: &str) -> Option<ContainerDecision> {
        let placement = self.node.placement(uid)?;
        let slices = placement
            .containers
            .iter()
            .filter(|c| c.exclusive)
            .fold(CpuSet::new(), |acc, c| acc.union(&c.cpus));
        let cpus = placement.cpus?.difference(&slices);
        if cpus.is_empty() {
            return None;
        }
        Some(ContainerDecision {
            cpus,
            mems: placement.containers.first().and_then(|c| c.cpuset_mems()),
            cpu_quota: None,
            exclusive: false,
            isolation: Isolation::Pod,
        })
    }

    /// The runtime created the container with `decision` applied. This is where the kubelet's
    /// `PreStartContainer` calls its managers' `AddContainer` (after CreateContainer succeeded,
    /// before StartContainer): the Memory Manager gives back what the pod's regular init
    /// containers before this one held.
    pub fn commit_container(
        &mut self,
        container_id: &str,
        sandbox_id: &str,
        name: &str,
        decision: &ContainerDecision,
    ) {
        let Some(pod_uid) = self.uid_of_sandbox(sandbox_id) else {
            return;
        };
        self.touch(&pod_uid);
        self.node.start_container(&pod_uid, name);
        let record = ContainerRecord {
            pod_uid,
            name: name.to_string(),
            cpus: decision.cpus.clone(),
            mems: decision.mems.clone(),
            exclusive: decision.exclusive,
            pinned: false,
        };
        self.containers.insert(container_id.to_string(), record);
    }

    /// The cpuset numa-shim keeps for a container it placed (UpdateContainerResources).
    pub fn applied(&self, container_id: &str) -> Option<&ContainerRecord> {
        self.containers.get(container_id)
    }

    /// numa-shim pushed `cpus` to the container.
    pub fn mark_applied(&mut self, container_id: &str, cpus: &CpuSet) {
        if let Some(record) = self.containers.get_mut(container_id) {
            record.cpus = cpus.clone();
            let uid = record.pod_uid.clone();
            self.touch(&uid);
        }
    }

    /// RemoveContainer succeeded: the container is forgotten, its CPUs and memory are not given
    /// back. As in kubelet v1.37.2, a container's resources stay with its pod while the pod is
    /// active (the kubelet's PostStopContainer reaches only the Topology Manager; the CPU and
    /// Memory Managers release a pod once it is no longer active): they go back with the
    /// sandbox, and a new instance of the container gets the same ones.
    pub fn remove_container(&mut self, container_id: &str) {
        let Some(record) = self.containers.remove(container_id) else {
            return;
        };
        self.touch(&record.pod_uid);
        if record.pinned {
            // CPUs held for it (adopted without its pod's spec) go back, unless another held
            // container still runs on them.
            let still = self
                .containers
                .values()
                .filter(|c| c.pinned)
                .fold(CpuSet::new(), |acc, c| acc.union(&c.cpus));
            self.node
                .release_unavailable(&record.cpus.difference(&still));
        }
    }

    /// StopPodSandbox succeeded: everything the pod holds goes back to the node.
    pub fn stop_sandbox(&mut self, sandbox_id: &str) {
        if let Some(uid) = self.uid_of_sandbox(sandbox_id) {
            self.release_pod(&uid);
            if let Some(record) = self.pods.get_mut(&uid) {
                record.active = false;
            }
            self.touch(&uid);
        }
    }

    /// RemovePodSandbox succeeded: the pod and its containers are forgotten.
    pub fn remove_sandbox(&mut self, sandbox_id: &str) {
        if let Some(uid) = self.uid_of_sandbox(sandbox_id) {
            self.drop_pod(&uid);
        }
    }

    /// Releases the pod's holdings and forgets it and its containers.
    fn drop_pod(&mut self, uid: &str) {
        self.release_pod(uid);
        self.take_pod(uid);
        self.containers.retain(|_, c| c.pod_uid != uid);
        self.forget(uid);
    }

    /// Running containers whose cpuset differs from what they should have now (pool changes).
    pub fn pending_updates(&self) -> Vec<CpusetUpdate> {
        self.stale()
            .map(|(id, c, want)| CpusetUpdate {
                container_id: id.clone(),
                cpus: want,
                mems: c.mems.clone(),
                cpu_quota: c.cpu_quota(),
            })
            .collect()
    }

    /// Whether [`Registry::pending_updates`] would list anything (stops at the first).
    pub fn has_pending_updates(&self) -> bool {
        self.stale().next().is_some()
    }

    /// Recorded containers whose cpuset is not what they should have now, with what they should.
    fn stale(&self) -> impl Iterator<Item = (&String, &ContainerRecord, CpuSet)> {
        self.containers.iter().filter_map(|(id, c)| {
            let want = self.desired(c)?;
            (want != c.cpus).then_some((id, c, want))
        })
    }

    /// What a recorded container should run on now; `None` if its pod is no longer active.
    pub fn desired(&self, c: &ContainerRecord) -> Option<CpuSet> {
        if !self.pods.get(&c.pod_uid).is_some_and(|p| p.active) {
            return None;
        }
        if c.pinned {
            return Some(c.cpus.clone());
        }
        Some(
            self.node
                .container(&c.pod_uid, &c.name)
                .map_or_else(|| self.unlisted(&c.pod_uid).cpus, |p| p.cpus),
        )
    }

    /// The checkpoint payload.
    pub fn snapshot(&self) -> RegistrySnapshot {
        RegistrySnapshot {
            node: self.node.snapshot(),
            pods: self.pods.clone(),
            containers: self.containers.clone(),
        }
    }

    /// Restores a checkpoint taken with the same topology and config.
    pub fn restore(&mut self, snapshot: RegistrySnapshot) -> Result<(), NodeError> {
        self.node.restore(snapshot.node)?;
        self.pods = snapshot.pods;
        self.by_sandbox = self
            .pods
            .iter()
            .filter_map(|(uid, p)| Some((p.sandbox_id.clone()?, uid.clone())))
            .collect();
        self.containers = snapshot.containers;
        self.revisions.clear();
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in &uids {
            self.touch(uid);
        }
        Ok(())
    }

    /// Forgets containers the runtime no longer has and releases pods whose sandbox is gone
    /// (recovery); returns how many records were dropped.
    pub fn retain_known(&mut self, sandboxes: &[String], containers: &[String]) -> usize {
        let stale_pods: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.sandbox_id
                    .as_ref()
                    .is_none_or(|id| !sandboxes.contains(id))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        let stale_containers: Vec<String> = self
            .containers
            .keys()
            .filter(|id| !containers.contains(id))
            .cloned()
            .collect();
        for id in &stale_containers {
            self.remove_container(id);
        }
        for uid in &stale_pods {
            self.drop_pod(uid);
        }
        stale_pods.len() + stale_containers.len()
    }

    /// The pod whose sandbox is `sandbox_id`.
    pub fn pod_of_sandbox(&self, sandbox_id: &str) -> Option<&PodRecord> {
        self.pods.get(self.by_sandbox.get(sandbox_id)?)
    }

    fn uid_of_sandbox(&self, sandbox_id: &str) -> Option<String> {
        self.by_sandbox.get(sandbox_id).cloned()
    }

    /// Inserts (or replaces) a pod record and indexes its sandbox.
    fn put_pod(&mut self, uid: String, record: PodRecord) {
        let new_id = record.sandbox_id.clone();
        if let Some(old) = self.pods.insert(uid.clone(), record) {
            if let Some(id) = old.sandbox_id.filter(|id| Some(id) != new_id.as_ref()) {
                self.by_sandbox.remove(&id);
            }
        }
        if let Some(id) = new_id {
            self.by_sandbox.insert(id, uid);
        }
    }

    /// Removes a pod record and its sandbox's index entry.
    fn take_pod(&mut self, uid: &str) -> Option<PodRecord> {
        let old = self.pods.remove(uid)?;
        if let Some(id) = &old.sandbox_id {
            self.by_sandbox.remove(id);
        }
        Some(old)
    }

    fn release_pod(&mut self, uid: &str) {
        self.touch(uid);
        self.node.remove_pod(uid);
        if self
            .pods
            .get(uid)
            .is_some_and(|p| p.source == Source::Adopted)
        {
            let held = self
                .containers
                .values()
                .filter(|c| c.pod_uid == uid && c.pinned)
                .fold(CpuSet::new(), |acc, c| acc.union(&c.cpus));
            // Only CPUs this registry marked are released; nothing else can be affected.
            self.node.release_unavailable(&held);
        }
    }

    /// Adds an inferred container to an inferred pod by re-admitting the pod with it. Kept only
    /// if every exclusive slice handed out so far stays where it is (shared containers follow
    /// the pod pool through pool updates); otherwise the pod stays as it was and the new
    /// container runs in the pod's shared pool (it is simply not in the spec).
    fn extend_inferred(
        &mut self,
        uid: &str,
        container: ContainerSpec,
    ) -> Result<(), AdmissionError> {
        let Some(record) = self.pods.get(uid) else {
            return Ok(());
        };
        let mut spec = record.spec.clone();
        spec.containers.retain(|c| c.name != PLACEHOLDER);
        spec.containers.push(container);
        // Exclusive slices never move; containers in the pool follow it (pool updates).
        let before: Vec<(String, CpuSet)> = self
            .containers
            .values()
            .filter(|c| c.pod_uid == uid && c.exclusive)
            .map(|c| (c.name.clone(), c.cpus.clone()))
            .collect();
        let saved = self.node.clone();
        self.node.remove_pod(uid);
        if let Err(err) = self.node.admit(&spec) {
            self.node = saved;
            return Err(err);
        }
        let kept = before.iter().all(|(name, cpus)| {
            self.node
                .container(uid, name)
                .is_some_and(|p| &p.cpus == cpus)
        });
        if kept {
            if let Some(record) = self.pods.get_mut(uid) {
                record.spec = spec;
            }
        } else {
            self.node = saved;
        }
        Ok(())
    }
}

/// The name of the stand-in container an inferred pod is admitted with at RunPodSandbox: no
/// resources of its own, so the whole budget is the pod shared pool until real containers come.
pub const PLACEHOLDER: &str = "numa-shim.pod-pool";

/// An inferred pod's spec at RunPodSandbox: its budget and the stand-in container.
pub fn inferred_sandbox_spec(mut spec: PodSpec) -> PodSpec {
    spec.containers = vec![ContainerSpec {
        name: PLACEHOLDER.to_string(),
        role: ContainerRole::App,
        resources: Resources::default(),
    }];
    spec
}

fn has_container(spec: &PodSpec, name: &str) -> bool {
    containers_of(spec).any(|c| c.name == name)
}

fn containers_of(spec: &PodSpec) -> impl Iterator<Item = &ContainerSpec> {
    spec.init_containers.iter().chain(&spec.containers)
}

fn decision(p: &ContainerPlacement) -> ContainerDecision {
    ContainerDecision {
        cpus: p.cpus.clone(),
        mems: p.cpuset_mems(),
        cpu_quota: (p.cpu_quota == CpuQuota::Unlimited).then_some(-1),
        exclusive: p.exclusive,
        isolation: p.isolation,
    }
}

mod adopt;
mod resize;
#[cfg(test)]
mod tests;

//! Recovery's side of the registry: pods found running put back where they run, whole
//! ([`Registry::adopt_pod`], with their spec), or container by container when their spec is
//! unknown ([`Registry::adopt_container`], holding the CPUs they run on).

use super::{ContainerRecord, PodRecord, Registry, Source};
use crate::cpuset::CpuSet;
use crate::placement::node::{AdoptError, Found, NodeError};
use crate::placement::PodSpec;

/// A pod found running at start-up with its spec (the checkpoint's record or the sandbox's
/// annotation) and where its containers run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPod {
    pub spec: PodSpec,
    pub source: Source,
    pub sandbox_id: String,
    /// Where the decision core is told the pod runs.
    pub found: Found,
    /// Its containers that run (or are created), as found.
    pub containers: Vec<FoundContainer>,
}

/// One container of a [`FoundPod`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundContainer {
    pub id: String,
    pub name: String,
    /// The cpuset it runs on now (from the kernel when it could be read).
    pub cpus: CpuSet,
    pub mems: Option<String>,
    pub exclusive: bool,
}

/// A container found running at start-up whose pod cannot be put back whole, as its
/// annotations and the kernel describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    pub container_id: String,
    pub sandbox_id: String,
    /// The pod as far as the runtime tells (uid, namespace, name; no containers).
    pub pod: PodSpec,
    pub name: String,
    pub cpus: CpuSet,
    pub mems: Option<String>,
    pub exclusive: bool,
    /// The container ran on CPUs of its own (exclusive slice or pod shared pool).
    pub pinned: bool,
}

impl Registry {
    /// Puts a pod found running back where it runs: into the decision core (its CPU budget,
    /// slices and memory) and the records, as if admitted. Nothing changes on error.
    pub fn adopt_pod(&mut self, pod: &FoundPod) -> Result<(), AdoptError> {
        let uid = &pod.spec.uid;
        if self.pods.contains_key(uid) {
            return Err(AdoptError::AlreadyAdmitted(uid.clone()));
        }
        self.node.adopt(&pod.spec, &pod.found)?;
        self.touch(uid);
        let record = PodRecord {
            spec: pod.spec.clone(),
            source: pod.source,
            sandbox_id: Some(pod.sandbox_id.clone()),
            active: true,
            origin: None,
        };
        self.put_pod(uid.clone(), record);
        for c in &pod.containers {
            let record = ContainerRecord {
                pod_uid: uid.clone(),
                name: c.name.clone(),
                cpus: c.cpus.clone(),
                mems: c.mems.clone(),
                exclusive: c.exclusive,
                pinned: false,
            };
            self.containers.insert(c.id.clone(), record);
        }
        Ok(())
    }

    /// Marks CPUs held by containers numa-shim does not know (recovery without a checkpoint),
    /// so they are never granted again. Only free, non-reserved CPUs can be marked; the others
    /// are left as they are.
    pub fn hold_foreign(&mut self, cpus: &CpuSet) -> Result<(), NodeError> {
        let free = self
            .node
            .shared_cpus()
            .difference(&self.node.reserved_cpus());
        self.node.mark_unavailable(&cpus.intersection(&free))
    }

    /// Gives back CPUs [`Registry::hold_foreign`] marked (recovery holds every CPU it found in
    /// use while it puts pods back one by one).
    pub fn release_foreign(&mut self, cpus: &CpuSet) {
        self.node.release_unavailable(cpus);
    }

    /// Gives back CPUs marked held that no held container runs on any more (a checkpoint written
    /// by an older numa-shim could keep them after their containers went); returns them.
    pub fn release_unheld(&mut self) -> CpuSet {
        let held = self
            .containers
            .values()
            .filter(|c| c.pinned)
            .fold(CpuSet::new(), |acc, c| acc.union(&c.cpus));
        let stale = self.node.unavailable_cpus().difference(&held);
        if !stale.is_empty() {
            self.node.release_unavailable(&stale);
        }
        stale
    }

    /// Records a container found running at start-up whose pod is not known whole, from what
    /// numa-shim annotated on it and where it runs. `pinned` containers keep their CPUs, which
    /// are held so they are never granted again; the others follow the node shared pool.
    pub fn adopt_container(&mut self, found: Adoption) -> Result<(), NodeError> {
        if !self.pods.contains_key(&found.pod.uid) {
            let record = PodRecord {
                spec: found.pod.clone(),
                source: Source::Adopted,
                sandbox_id: Some(found.sandbox_id),
                active: true,
                origin: None,
            };
            self.put_pod(found.pod.uid.clone(), record);
        }
        self.touch(&found.pod.uid);
        let managed = self.node.container(&found.pod.uid, &found.name).is_some();
        let pinned = found.pinned && !managed;
        if pinned {
            self.hold_foreign(&found.cpus)?;
        }
        let record = ContainerRecord {
            pod_uid: found.pod.uid,
            name: found.name,
            cpus: found.cpus,
            mems: found.mems,
            exclusive: found.exclusive,
            pinned,
        };
        self.containers.insert(found.container_id, record);
        Ok(())
    }
}

//! In-place resize over CRI (docs/resize.md): the kubelet actuates a resize with
//! `UpdateContainerResources` (one per changed container and pass) and announces pod cgroup
//! changes with `UpdatePodSandboxResources`; both come here through the hook.
//!
//! `before`: the request's CPU and memory values are read as the container's (or the pod
//! budget's) new resources and applied through the decision core on the registry
//! (`Registry::resize_container` / `resize_sandbox`), the checkpoint is written, and the call
//! goes to the runtime with the container's new cpuset (a pod budget's call unchanged). The pool
//! updater pushes every pool that moved to the running containers. A resize the core refuses
//! is answered with a gRPC status that says what was asked and what is free where, and nothing
//! changes. `after`: a runtime that refused the call has the resize undone
//! (`Registry::undo_resize`), so the checkpoint, the pools and PodResources say what runs.
//! No lock is held across the runtime call.

use tonic::Code;
use tracing::{info, warn};

use super::placer::Placer;
use super::placer::{cri_resources, PlacementError, ResizeAnswer};
use super::registry::{Registry, ResizeRefused, ResizeTarget, Resized, Undone};
use crate::proto::cri::v1 as cri;
use crate::report::{Refusal, Stage};

/// The Event reason of a refused resize (with `refusalReports`).
pub const RESIZE_REFUSED: &str = "ResizeRefused";

impl Placer {
    /// Applies an UpdateContainerResources of a container numa-shim placed. `None`: not one
    /// numa-shim resizes (the call passes as it came).
    pub async fn resize_container(
        &self,
        req: &cri::UpdateContainerResourcesRequest,
    ) -> Result<Option<Resized>, PlacementError> {
        if self.registry().applied(&req.container_id).is_none() {
            return Ok(None);
        }
        let cri = cri_resources(req.linux.as_ref());
        cri.check("linux")?;
        let id = req.container_id.clone();
        self.resize("UpdateContainerResources", move |r| {
            r.resize_container(&id, &cri)
        })
        .await
    }

    /// Applies an UpdatePodSandboxResources to a pod-level budget. `None`: a sandbox numa-shim
    /// does not know or a pod without `spec.resources` (the call passes as it came).
    pub async fn resize_sandbox(
        &self,
        req: &cri::UpdatePodSandboxResourcesRequest,
    ) -> Result<Option<Resized>, PlacementError> {
        if self
            .registry()
            .pod_of_sandbox(&req.pod_sandbox_id)
            .is_none_or(|p| p.spec.resources.is_none())
        {
            return Ok(None);
        }
        let cri = cri_resources(req.resources.as_ref());
        cri.check("resources")?;
        let id = req.pod_sandbox_id.clone();
        self.resize("UpdatePodSandboxResources", move |r| {
            r.resize_sandbox(&id, &cri)
        })
        .await
    }

    async fn resize<F>(&self, what: &'static str, f: F) -> Result<Option<Resized>, PlacementError>
    where
        F: Fn(&mut Registry) -> Result<Option<Resized>, ResizeRefused> + Send + Sync + 'static,
    {
        let resized = match self.decide(what, f).await? {
            Ok(Some(resized)) => resized,
            Ok(None) => return Ok(None),
            Err(refused) => {
                self.metrics().resize("refused");
                warn!(pod = %refused.pod, target = %refused.what, asked = %refused.asked, reason = %refused.error, "resize refused; the kubelet retries it at each pod sync");
                self.report_resize(&refused);
                return Err(PlacementError::Resize(refused));
            }
        };
        if resized.undo.is_some() {
            self.pool_changed();
            if let Err(err) = self.persist().await {
                self.undo(&resized, "checkpoint not written");
                return Err(err.into());
            }
        }
        Ok(Some(resized))
    }

    /// The runtime answered a resized call: kept on success, undone otherwise.
    pub(super) fn resize_done(&self, resized: &Resized, answer: ResizeAnswer) {
        if resized.undo.is_none() {
            return;
        }
        let pod_budget = matches!(resized.target, ResizeTarget::Pod { .. });
        if answer == ResizeAnswer::Accepted
            || (answer == ResizeAnswer::NotImplemented && pod_budget)
        {
            self.metrics().resize("applied");
            info!(pod = %resized.pod, target = ?resized.target, cpus = ?resized.decision.as_ref().map(|d| d.cpus.to_string()), "resized");
            return;
        }
        if answer == ResizeAnswer::CutOff
            && resized.undo.as_ref().is_some_and(|u| u.keep_unanswered())
        {
            self.metrics().resize("unanswered_kept");
            warn!(pod = %resized.pod, target = ?resized.target, ?answer, "resize cut off before the runtime answered; a grow is kept (the runtime may have applied it, the kubelet retries it)");
            return;
        }
        self.undo(resized, "the runtime refused the call");
        self.persist_soon();
    }

    fn undo(&self, resized: &Resized, why: &str) {
        let Some(undo) = &resized.undo else {
            return;
        };
        let undone = self.registry().undo_resize(resized, undo);
        match &undone {
            Undone::Exact | Undone::Reversed => {
                self.metrics().resize("rolled_back");
                warn!(pod = %resized.pod, target = ?resized.target, why, how = ?undone, "resize rolled back");
            }
            Undone::Kept(err) => {
                self.metrics().resize("rollback_kept");
                warn!(pod = %resized.pod, target = ?resized.target, why, error = %err, "resize could not be rolled back (its CPUs went elsewhere meanwhile); the resized placement stays");
            }
        }
        self.pool_changed();
    }

    /// A refused resize as an Event on the pod (with `refusalReports`).
    fn report_resize(&self, refused: &ResizeRefused) {
        let Some(reporter) = self.reporter() else {
            return;
        };
        let (namespace, name) = refused.pod.split_once('/').unwrap_or(("", &refused.pod));
        let uid = self
            .registry()
            .pods()
            .iter()
            .find(|(_, p)| p.spec.namespace == namespace && p.spec.name == name)
            .map(|(uid, _)| uid.clone());
        let Some(uid) = uid else {
            return;
        };
        reporter.refused(Refusal {
            uid,
            namespace: namespace.to_string(),
            name: name.to_string(),
            reason: RESIZE_REFUSED.to_string(),
            message: refused.to_string(),
            stage: Stage::Resize,
        });
    }
}

/// An UpdatePodSandboxResources the runtime does not implement (containerd up to 2.4 answers
/// UNIMPLEMENTED, "unknown method"; containerd 2.2 UNKNOWN "not implemented yet"). The kubelet
/// treats the call as a best-effort notice and goes on to resize the pod cgroup itself
/// (v1.37.2 kuberuntime_container.go:432-452), so the budget's resize stands.
impl ResizeRefused {
    /// RESOURCE_EXHAUSTED when the pod's NUMA nodes lack room, FAILED_PRECONDITION when a rule
    /// refuses it (promised CPUs, QoS change, pool emptied), NOT_FOUND for a target the core
    /// does not have.
    pub fn code(&self) -> Code {
        use crate::placement::node::ResizeError as E;
        match self.error.as_ref() {
            e if e.is_exhausted() => Code::ResourceExhausted,
            E::UnknownPod(_) | E::UnknownContainer { .. } => Code::NotFound,
            _ => Code::FailedPrecondition,
        }
    }
}

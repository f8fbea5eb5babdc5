//! [`PlacementHook`]: the relay hook, the one way an intercepted call goes through placement.
//! `before` asks the `Placer` for a decision and turns it into the wire patch (`annotations`) plus
//! the decision as a value; `after` gets that value back with the runtime's outcome and records
//! it. Errors become gRPC statuses in one place, [`PlacementError::status`]; refusals by the
//! kubelet's rules (first or repeated) are also handed to the refusal reporter. the `Placer` logs
//! refusals (a warning once per pod and reason); the hook logs the other errors.
//!
//! Nothing here waits on the runtime while holding a lock: the relay forwards between `before`
//! and `after`.

use std::sync::Arc;

use tonic::{Code, Status};
use tracing::warn;

use super::annotations::{container_patch, resources_patch, sandbox_patch};
use super::placer::{DecideError, Decided, PlacementError, Placer};
use crate::proto::cri::v1 as cri;
use crate::relay::{CriRequest, Decision, Hook, Outcome, Patch};
use crate::report::Stage;

/// The relay hook.
#[derive(Debug, Clone)]
pub struct PlacementHook {
    placer: Arc<Placer>,
}

impl PlacementError {
    /// The gRPC status the caller gets, the one place placement errors become statuses:
    /// FAILED_PRECONDITION with the kubelet's reason for an admission refusal, INVALID_ARGUMENT
    /// for unreadable input, RESOURCE_EXHAUSTED when the state directory is full and
    /// UNAVAILABLE when it cannot be written otherwise (both transient: the kubelet retries,
    /// and the same call succeeds once the disk recovers); INTERNAL for a decision that
    /// panicked and UNAVAILABLE for one the registry kept changing under (nothing placed
    /// either way).
    pub fn status(&self) -> Status {
        let code = match self {
            Self::Admission(_) | Self::Again { .. } => Code::FailedPrecondition,
            Self::Input(_) => Code::InvalidArgument,
            Self::State(e) if e.is_full() => Code::ResourceExhausted,
            Self::State(_) => Code::Unavailable,
            Self::Decide(DecideError::Failed { .. }) => Code::Internal,
            Self::Decide(DecideError::Busy { .. }) => Code::Unavailable,
            Self::Resize(refused) => refused.code(),
        };
        Status::new(code, self.to_string())
    }
}

impl PlacementHook {
    pub fn new(placer: Arc<Placer>) -> Self {
        Self { placer }
    }

    async fn run_pod_sandbox(&self, req: &cri::RunPodSandboxRequest) -> Decision<Decided> {
        let Some(meta) = req.config.as_ref().and_then(|c| c.metadata.as_ref()) else {
            return Decision::Continue;
        };
        match self.placer.admit(req, meta).await {
            Ok(admission) => Decision::Forward {
                patch: sandbox_patch(&admission.spec, admission.source),
                decided: Decided::Admitted {
                    uid: admission.spec.uid,
                },
            },
            Err(err) => {
                self.refused(Some(meta), &err, Stage::Admission);
                if !err.is_refusal() {
                    warn!(pod = %meta.uid, error = %err, "sandbox refused");
                }
                Decision::Reject(err.status())
            }
        }
    }

    async fn create_container(&self, req: &cri::CreateContainerRequest) -> Decision<Decided> {
        match self.placer.place(req).await {
            Ok(Some(placement)) => Decision::Forward {
                patch: container_patch(&placement.decision, placement.inferred.as_ref()),
                decided: Decided::Placed {
                    name: placement.name,
                    decision: placement.decision,
                },
            },
            Ok(None) => Decision::Continue,
            Err(err) => {
                let meta = req
                    .sandbox_config
                    .as_ref()
                    .and_then(|c| c.metadata.as_ref());
                self.refused(meta, &err, Stage::Container);
                if !err.is_refusal() {
                    warn!(sandbox = %req.pod_sandbox_id, error = %err, "container refused");
                }
                Decision::Reject(err.status())
            }
        }
    }

    /// Hands a refusal by the kubelet's rules to the reporter (other errors are not the pod's).
    fn refused(&self, meta: Option<&cri::PodSandboxMetadata>, err: &PlacementError, stage: Stage) {
        match err {
            PlacementError::Admission(refusal) => {
                self.placer
                    .refused(meta, refusal.reason(), &refusal.to_string(), stage);
            }
            PlacementError::Again { reason, message } => {
                self.placer.refused(meta, reason, message, stage);
            }
            PlacementError::Input(_)
            | PlacementError::State(_)
            | PlacementError::Decide(_)
            | PlacementError::Resize(_) => {}
        }
    }

    /// An in-place resize (docs/resize.md): the container's new placement goes to the
    /// runtime; a resize that changes nothing keeps numa-shim's cpuset.
    async fn update_container_resources(
        &self,
        req: &cri::UpdateContainerResourcesRequest,
    ) -> Decision<Decided> {
        match self.placer.resize_container(req).await {
            Ok(Some(resized)) if resized.undo.is_some() => {
                let patch = resized
                    .decision
                    .as_ref()
                    .map_or_else(Patch::default, |d| Patch {
                        resources: resources_patch(&d.cpus, d.mems.clone(), d.cpu_quota),
                        ..Patch::default()
                    });
                return Decision::Forward {
                    patch,
                    decided: Decided::Resized(Box::new(resized)),
                };
            }
            Ok(_) => {}
            Err(err) => {
                if !matches!(err, PlacementError::Resize(_)) {
                    warn!(container = %req.container_id, error = %err, "resize refused");
                }
                return Decision::Reject(err.status());
            }
        }
        let Some(record) = self.placer.kept(req) else {
            return Decision::Continue;
        };
        // Only the resources: numa-shim's annotations were set when the container was created.
        Decision::Forward {
            patch: Patch {
                resources: resources_patch(
                    &record.cpus,
                    record.mems,
                    record.exclusive.then_some(-1),
                ),
                ..Patch::default()
            },
            decided: Decided::Kept,
        }
    }
}

impl Hook for PlacementHook {
    type Decided = Decided;

    async fn before(&self, request: &CriRequest) -> Decision<Decided> {
        match request {
            CriRequest::RunPodSandbox(req) => self.run_pod_sandbox(req).await,
            CriRequest::CreateContainer(req) => self.create_container(req).await,
            CriRequest::UpdateContainerResources(req) => self.update_container_resources(req).await,
            CriRequest::UpdatePodSandboxResources(req) => {
                match self.placer.resize_sandbox(req).await {
                    Ok(Some(resized)) if resized.undo.is_some() => Decision::Forward {
                        patch: Patch::default(),
                        decided: Decided::Resized(Box::new(resized)),
                    },
                    Ok(_) => Decision::Continue,
                    Err(err) => {
                        if !matches!(err, PlacementError::Resize(_)) {
                            warn!(sandbox = %req.pod_sandbox_id, error = %err, "pod resize refused");
                        }
                        Decision::Reject(err.status())
                    }
                }
            }
            _ => Decision::Continue,
        }
    }

    async fn after(&self, request: &CriRequest, decided: Option<Decided>, outcome: &Outcome) {
        self.placer.record(request, decided, outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::infer::InferError;
    use crate::lifecycle::store::StoreError;
    use crate::placement::AdmissionError;
    use crate::state::StateError;

    fn write_error(errno: i32) -> StoreError {
        StoreError::State(StateError::Write {
            path: "/var/lib/numa-shim/numa-shim-state.tmp".into(),
            source: std::io::Error::from_raw_os_error(errno),
        })
    }

    /// Every way numa-shim answers an intercepted call itself, with the code and the words the
    /// caller gets.
    #[test]
    fn every_placement_error_maps_to_one_status() {
        let admission = [
            AdmissionError::TopologyAffinity,
            AdmissionError::ClaimTopologyAffinity {
                claims: "ResourceClaim default/gpu (devices on NUMA node 1)".into(),
            },
            AdmissionError::PodLevelTopologyAffinity {
                scope: crate::placement::error::RefusingScope::Pod,
            },
            AdmissionError::EmptyPodSharedPool {
                message: "pod rejected, x".into(),
            },
            AdmissionError::SmtAlignment {
                requested_cpus: 3,
                cpus_per_core: 2,
                available_physical_cpus: 0,
                caused_by_physical_cpus: false,
            },
            AdmissionError::Unexpected("not enough cpus".into()),
        ];
        for err in admission {
            let status = PlacementError::Admission(err.clone()).status();
            assert_eq!(status.code(), Code::FailedPrecondition);
            assert_eq!(status.message(), format!("{}: {err}", err.reason()));
            // A replayed refusal answers the same, word for word.
            let again = PlacementError::Again {
                reason: err.reason().to_string(),
                message: err.to_string(),
            }
            .status();
            assert_eq!(again.code(), status.code());
            assert_eq!(again.message(), status.message());
        }
        let cases: Vec<(PlacementError, Code, &str)> = vec![
            (
                InferError::OutOfRange {
                    at: "config.linux.resources",
                    field: "cpu_shares",
                    value: 1 << 62,
                    max: 1 << 18,
                    why: "the kernel's MAX_SHARES",
                }
                .into(),
                Code::InvalidArgument,
                "config.linux.resources.cpu_shares: 4611686018427387904 is out of range",
            ),
            (
                write_error(28).into(),
                Code::ResourceExhausted,
                "numa-shim cannot record this placement, so nothing was placed: checkpoint \
                 /var/lib/numa-shim/numa-shim-state.tmp: write failed: No space left on device",
            ),
            (
                write_error(122).into(),
                Code::ResourceExhausted,
                "quota exceeded",
            ),
            (
                write_error(30).into(),
                Code::Unavailable,
                "Read-only file system",
            ),
            (
                DecideError::Failed {
                    reason: "panicked: boom".into(),
                }
                .into(),
                Code::Internal,
                "the placement decision failed (panicked: boom); nothing was placed",
            ),
            (
                DecideError::Busy { attempts: 3 }.into(),
                Code::Unavailable,
                "changed during the decision 3 times",
            ),
            (
                StoreError::Task {
                    path: "/s/numa-shim-state.json".into(),
                    reason: "panicked".into(),
                }
                .into(),
                Code::Unavailable,
                "checkpoint /s/numa-shim-state.json: writer task failed: panicked",
            ),
        ];
        for (err, code, words) in cases {
            let status = err.status();
            assert_eq!(status.code(), code, "{err}");
            assert!(
                status
                    .message()
                    .to_lowercase()
                    .contains(&words.to_lowercase()),
                "{}",
                status.message()
            );
        }
    }
}

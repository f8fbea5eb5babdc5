//! [`LifecycleHook`]: the relay hook over the pod lifecycle, the one way an intercepted call
//! goes through placement. `before` asks the [`Placer`] for a decision and turns it into the
//! wire patch (numa-shim's annotations from `lifecycle::annotations` plus the resource fields)
//! and the decision as a value ([`Decided`]); `after` gets that value back with the runtime's
//! answer, turns both into a plain [`lifecycle::Outcome`] and has the `Placer` record it: the
//! lifecycle never sees CRI answers or gRPC codes, and the runtime's answer reaches the caller as
//! it was sent whatever is recorded. Errors become gRPC statuses in one place,
//! [`PlacementError::status`]; refusals by the kubelet's rules (first or repeated) are also
//! handed to the refusal reporter. The `Placer` logs refusals (a warning once per pod and
//! reason); the hook logs the other errors.
//!
//! Nothing here waits on the runtime while holding a lock: the relay forwards between `before`
//! and `after`.

use std::sync::Arc;

use tonic::{Code, Status};
use tracing::warn;

use super::hook::{CriRequest, CriResponse, Decision, Hook, Outcome, Patch, ResourcesPatch};
use crate::cpuset::CpuSet;
use crate::lifecycle::annotations::{container_annotations, sandbox_annotations};
use crate::lifecycle::placer::DecideError;
use crate::lifecycle::registry::{ContainerDecision, Resized};
use crate::lifecycle::{self, PlacementError, Placer};
use crate::proto::cri::v1 as cri;
use crate::report::Stage;

/// The relay hook over the pod lifecycle.
#[derive(Debug, Clone)]
pub struct LifecycleHook {
    placer: Arc<Placer>,
}

/// What `before` decided for one call, handed to `after` with the runtime's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// RunPodSandbox: the pod is admitted (or already was).
    Admitted { uid: String },
    /// CreateContainer: where container `name` runs.
    Placed {
        name: String,
        decision: ContainerDecision,
    },
    /// UpdateContainerResources: numa-shim's own cpuset was kept.
    Kept,
    /// UpdateContainerResources / UpdatePodSandboxResources: an in-place resize, applied and
    /// undone if the runtime refuses the call.
    Resized(Box<Resized>),
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

impl LifecycleHook {
    pub fn new(placer: Arc<Placer>) -> Self {
        Self { placer }
    }

    async fn run_pod_sandbox(&self, req: &cri::RunPodSandboxRequest) -> Decision<Decided> {
        let Some(meta) = req.config.as_ref().and_then(|c| c.metadata.as_ref()) else {
            return Decision::Continue;
        };
        match self.placer.admit(req, meta).await {
            Ok(admission) => Decision::Forward {
                patch: Patch {
                    annotations: sandbox_annotations(&admission.spec, admission.source),
                    ..Patch::default()
                },
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
                patch: Patch {
                    resources: resources_patch(
                        &placement.decision.cpus,
                        placement.decision.mems.clone(),
                        placement.decision.cpu_quota,
                    ),
                    annotations: container_annotations(
                        &placement.decision,
                        placement.inferred.as_ref(),
                    ),
                },
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

impl Hook for LifecycleHook {
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
        if let Some(outcome) = lifecycle_outcome(request, decided, outcome) {
            self.placer.record(outcome).await;
        }
    }
}

/// What the runtime did with a forwarded call, for the lifecycle: read from the CRI answer
/// (success and the ids it gave) with what `before` decided. `None`: nothing to record.
fn lifecycle_outcome(
    request: &CriRequest,
    decided: Option<Decided>,
    outcome: &Outcome,
) -> Option<lifecycle::Outcome> {
    let ok = outcome.status.code() == Code::Ok;
    if let Some(Decided::Resized(resized)) = decided {
        return Some(lifecycle::Outcome::Resized {
            resized,
            answer: resize_answer(&outcome.status),
        });
    }
    match (request, decided, outcome.response.as_ref()) {
        (
            CriRequest::RunPodSandbox(_),
            Some(Decided::Admitted { uid }),
            Some(CriResponse::RunPodSandbox(resp)),
        ) if ok => Some(lifecycle::Outcome::SandboxRun {
            uid,
            sandbox: resp.pod_sandbox_id.clone(),
        }),
        (CriRequest::RunPodSandbox(_), Some(Decided::Admitted { uid }), _) => {
            Some(lifecycle::Outcome::SandboxFailed { uid })
        }
        (
            CriRequest::CreateContainer(req),
            Some(Decided::Placed { name, decision }),
            Some(CriResponse::CreateContainer(resp)),
        ) if ok => Some(lifecycle::Outcome::Created {
            container: resp.container_id.clone(),
            sandbox: req.pod_sandbox_id.clone(),
            name,
            decision,
        }),
        (CriRequest::RemoveContainer(req), _, _) if ok => {
            Some(lifecycle::Outcome::ContainerRemoved {
                container: req.container_id.clone(),
            })
        }
        (CriRequest::StopPodSandbox(req), _, _) if ok => Some(lifecycle::Outcome::SandboxStopped {
            sandbox: req.pod_sandbox_id.clone(),
        }),
        (CriRequest::RemovePodSandbox(req), _, _) if ok => {
            Some(lifecycle::Outcome::SandboxRemoved {
                sandbox: req.pod_sandbox_id.clone(),
            })
        }
        _ => None,
    }
}

/// The resource fields numa-shim sets for a container with `cpus`.
fn resources_patch(cpus: &CpuSet, mems: Option<String>, cpu_quota: Option<i64>) -> ResourcesPatch {
    // An empty set would mean "every CPU" to the runtime: leave the field as the kubelet sent it.
    ResourcesPatch {
        cpuset_cpus: (!cpus.is_empty()).then(|| cpus.to_string()),
        cpuset_mems: mems,
        cpu_quota,
        ..Default::default()
    }
}

/// A resize's answer from the runtime's status. A runtime that does not implement the call says
/// UNIMPLEMENTED (containerd 2.4) or UNKNOWN "... not implemented" (containerd 2.2).
fn resize_answer(status: &tonic::Status) -> lifecycle::ResizeAnswer {
    use lifecycle::ResizeAnswer as A;
    match status.code() {
        Code::Ok => A::Accepted,
        Code::Unimplemented => A::NotImplemented,
        Code::Unknown if status.message().contains("not implemented") => A::NotImplemented,
        Code::DeadlineExceeded | Code::Cancelled => A::CutOff,
        _ => A::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::infer::InferError;
    use crate::lifecycle::store::StoreError;
    use crate::placement::AdmissionError;
    use crate::state::StateError;

    /// How each answer of the runtime reaches the lifecycle: successes with the ids the runtime
    /// gave, a RunPodSandbox that did not run as a release, failed releases as nothing.
    #[test]
    fn every_answer_becomes_one_lifecycle_outcome() {
        use crate::lifecycle::registry::ResizeTarget;
        use crate::lifecycle::Outcome as Did;
        use crate::placement::node::Isolation;
        let answer = |code: Code, response: Option<CriResponse>| Outcome {
            status: Status::new(code, ""),
            response,
        };
        let decision = ContainerDecision {
            cpus: CpuSet::parse("2-3").unwrap(),
            mems: Some("1".into()),
            cpu_quota: Some(-1),
            exclusive: true,
            isolation: Isolation::Container,
        };
        let resized = Box::new(Resized {
            pod_uid: "u".into(),
            pod: "ns/p".into(),
            target: ResizeTarget::Pod {
                sandbox_id: "s1".into(),
            },
            decision: None,
            undo: None,
        });
        let run = CriRequest::RunPodSandbox(Box::default());
        let ran = Some(CriResponse::RunPodSandbox(cri::RunPodSandboxResponse {
            pod_sandbox_id: "s1".into(),
        }));
        let admitted = || Some(Decided::Admitted { uid: "u".into() });
        let create = CriRequest::CreateContainer(Box::new(cri::CreateContainerRequest {
            pod_sandbox_id: "s1".into(),
            ..Default::default()
        }));
        let created = Some(CriResponse::CreateContainer(cri::CreateContainerResponse {
            container_id: "c1".into(),
        }));
        let placed = || {
            Some(Decided::Placed {
                name: "app".into(),
                decision: decision.clone(),
            })
        };
        let update = CriRequest::UpdateContainerResources(Box::default());
        let stop = CriRequest::StopPodSandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: "s1".into(),
        });
        let remove = CriRequest::RemovePodSandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: "s1".into(),
        });
        let remove_container = CriRequest::RemoveContainer(cri::RemoveContainerRequest {
            container_id: "c1".into(),
        });
        let stop_container = CriRequest::StopContainer(cri::StopContainerRequest {
            container_id: "c1".into(),
            timeout: 0,
        });
        let cases: Vec<(&CriRequest, Option<Decided>, Outcome, Option<Did>)> = vec![
            (
                &run,
                admitted(),
                answer(Code::Ok, ran.clone()),
                Some(Did::SandboxRun {
                    uid: "u".into(),
                    sandbox: "s1".into(),
                }),
            ),
            (
                &run,
                admitted(),
                answer(Code::Unknown, None),
                Some(Did::SandboxFailed { uid: "u".into() }),
            ),
            (
                &run,
                admitted(),
                answer(Code::DeadlineExceeded, None),
                Some(Did::SandboxFailed { uid: "u".into() }),
            ),
            // A success whose answer did not decode has no sandbox id: released.
            (
                &run,
                admitted(),
                answer(Code::Ok, None),
                Some(Did::SandboxFailed { uid: "u".into() }),
            ),
            (&run, None, answer(Code::Ok, ran), None),
            (
                &create,
                placed(),
                answer(Code::Ok, created.clone()),
                Some(Did::Created {
                    container: "c1".into(),
                    sandbox: "s1".into(),
                    name: "app".into(),
                    decision: decision.clone(),
                }),
            ),
            (&create, placed(), answer(Code::Internal, None), None),
            (&create, None, answer(Code::Ok, created), None),
            (
                &update,
                Some(Decided::Resized(resized.clone())),
                answer(Code::Ok, None),
                Some(Did::Resized {
                    resized: resized.clone(),
                    answer: lifecycle::ResizeAnswer::Accepted,
                }),
            ),
            (
                &update,
                Some(Decided::Resized(resized.clone())),
                answer(Code::InvalidArgument, None),
                Some(Did::Resized {
                    resized,
                    answer: lifecycle::ResizeAnswer::Refused,
                }),
            ),
            (&update, Some(Decided::Kept), answer(Code::Ok, None), None),
            (
                &stop,
                None,
                answer(Code::Ok, None),
                Some(Did::SandboxStopped {
                    sandbox: "s1".into(),
                }),
            ),
            (&stop, None, answer(Code::Unavailable, None), None),
            (
                &remove,
                None,
                answer(Code::Ok, None),
                Some(Did::SandboxRemoved {
                    sandbox: "s1".into(),
                }),
            ),
            (&remove, None, answer(Code::NotFound, None), None),
            (
                &remove_container,
                None,
                answer(Code::Ok, None),
                Some(Did::ContainerRemoved {
                    container: "c1".into(),
                }),
            ),
            (&remove_container, None, answer(Code::Unknown, None), None),
            (&stop_container, None, answer(Code::Ok, None), None),
        ];
        for (request, decided, answer, expected) in cases {
            let what = format!("{request:?} {decided:?} {:?}", answer.status.code());
            assert_eq!(
                lifecycle_outcome(request, decided, &answer),
                expected,
                "{what}"
            );
        }
    }

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

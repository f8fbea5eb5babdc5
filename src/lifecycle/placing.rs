//! What the intercepted calls decide and record, on the [`Placer`]: admit at RunPodSandbox,
//! place at CreateContainer, keep numa-shim's cpuset at UpdateContainerResources, and record
//! what the runtime did (commit, roll back, release). A decision is made once, in `before`,
//! and handed to `after` as a value ([`Decided`]); nothing here reads numa-shim's annotations.
//!
//! Every decision that changes the registry is on disk before the call is forwarded; one that
//! cannot be written is rolled back and refused ([`PlacementError::State`]). What the runtime
//! then did (a sandbox's or container's id, a stop, a removal) is recorded in memory before the
//! answer goes back and written by the state writer afterwards, off the call's path: recovery
//! reads it back from the runtime (a reservation whose sandbox exists, containers adopted from
//! their annotations, records of what is gone dropped) if numa-shim stops before that write.
//! So a pod start waits for one durable write, the reservation. A refusal is remembered
//! (`placer::refused`): the kubelet's retry of the same pod while nothing changed is answered the
//! same without deciding again ([`PlacementError::Again`]). The registry lock is held only to
//! decide or record, never across an `.await`.

use tonic::Code;
use tracing::{debug, info, warn};

use super::gauges::{admission_allocations, container_assignments};
use super::placer::{DecideError, Placer};
use super::refusals::Recorded;
use super::registry::{
    inferred_sandbox_spec, ContainerDecision, ContainerRecord, ResizeRefused, Resized, Source,
};
use super::store::StoreError;
use crate::knowledge::infer::{self, CriResources, InferError};
use crate::knowledge::SpecOrigin;
use crate::placement::config::TopologyScope;
use crate::placement::{AdmissionError, ContainerSpec, PodSpec};
use crate::proto::cri::v1 as cri;
use crate::relay::{CriRequest, CriResponse, Outcome};

/// Why an intercepted call is answered by numa-shim instead of the runtime (the hook turns
/// each into one gRPC status).
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// The kubelet's own admission refusal (its reason and message).
    #[error("{reason}: {0}", reason = .0.reason())]
    Admission(#[from] AdmissionError),
    /// The same pod refused again: the kubelet's retry of a pod refused before while nothing
    /// changed, or refused anew with the same reason (logged and counted once).
    #[error("{reason}: {message}")]
    Again { reason: String, message: String },
    /// CRI values inference cannot read.
    #[error(transparent)]
    Input(#[from] InferError),
    /// The decision could not be recorded: nothing was placed.
    #[error("numa-shim cannot record this placement, so nothing was placed: {0}")]
    State(#[from] StoreError),
    /// The decision did not come back (it panicked, or the registry kept changing under it).
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// An in-place resize the decision core refuses: nothing changed.
    #[error(transparent)]
    Resize(#[from] ResizeRefused),
}

impl PlacementError {
    /// A refusal by the kubelet's rules (first or repeated), which `placing` has logged.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Admission(_) | Self::Again { .. })
    }
}

/// What `before` decided for one call, handed to `after` with the runtime's outcome.
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

/// An admitted pod: what the sandbox annotation records.
#[derive(Debug, Clone)]
pub struct Admission {
    pub spec: PodSpec,
    pub source: Source,
}

/// A placed container: its decision and, for an inferred pod, the spec it was inferred as.
#[derive(Debug, Clone)]
pub struct Placement {
    pub name: String,
    pub decision: ContainerDecision,
    pub inferred: Option<ContainerSpec>,
}

impl Placer {
    /// Admits the pod of a RunPodSandbox and records the reservation on disk; a reservation
    /// that cannot be recorded is rolled back.
    pub async fn admit(
        &self,
        req: &cri::RunPodSandboxRequest,
        meta: &cri::PodSandboxMetadata,
    ) -> Result<Admission, PlacementError> {
        self.durable().await?;
        let sandbox = cri_resources(
            req.config
                .as_ref()
                .and_then(|c| c.linux.as_ref())
                .and_then(|l| l.resources.as_ref()),
        );
        let (spec, source, origin) = match self.knowledge().pod(&meta.uid).await {
            Some((spec, origin)) => (spec, Source::Spec, origin),
            None => {
                sandbox.check("config.linux.resources")?;
                let pod = infer::pod_from_sandbox(&meta.uid, &meta.namespace, &meta.name, &sandbox);
                // The stand-in container only matters for the pod scope's bubble; in container
                // scope it would be a container without requests, which the Static memory
                // manager refuses, so every inferred Guaranteed pod would be rejected.
                let pod_scope =
                    self.registry().node().config().topology_scope == TopologyScope::Pod;
                let spec = if pod_scope {
                    inferred_sandbox_spec(pod)
                } else {
                    pod
                };
                (spec, Source::Inferred, SpecOrigin::Cri)
            }
        };
        // The kubelet retries a refused pod for ever: the same pod in the same state gets the
        // same answer without deciding, logging a warning or counting an error again.
        if let Some((reason, message)) = self.replay_refusal(&spec) {
            debug!(pod = %meta.uid, namespace = %meta.namespace, name = %meta.name, reason, "refused again (nothing changed)");
            return Err(PlacementError::Again { reason, message });
        }
        // The kubelet's devices, read before the registry is locked (I/O).
        let devices = self.device_facts(&spec).await;
        // Its DRA claims' devices and their NUMA nodes (API server reads, before the lock too).
        let claims = self.claim_facts(&spec).await;
        let (result, allocations, changed, revision) = {
            let (spec, uid) = (spec.clone(), spec.uid.clone());
            self.decide("RunPodSandbox", move |registry| {
                registry.set_devices(devices.clone());
                registry.set_claims(claims.clone());
                let fresh = !registry.pods().contains_key(&uid);
                let before = registry.last_revision();
                let result = registry.admit(spec.clone(), source);
                if result.is_ok() {
                    registry.set_origin(&uid, origin);
                }
                let allocations = match &result {
                    Ok(()) if fresh => Some(admission_allocations(registry.node(), &uid)),
                    Ok(()) => Some(Vec::new()),
                    Err(_) => None,
                };
                (
                    result,
                    allocations,
                    registry.last_revision() != before,
                    before,
                )
            })
            .await?
        };
        if let Err(err) = result {
            return Err(match self.record_refusal(&spec, revision, &err) {
                Recorded::First => {
                    // One allocation error per pod, as the kubelet counts its one attempt.
                    self.count_admission(&spec, None);
                    warn!(pod = %meta.uid, namespace = %meta.namespace, name = %meta.name, reason = err.reason(), message = %err, "refused; the kubelet retries RunPodSandbox and the pod stays Pending until it fits");
                    err.into()
                }
                Recorded::Again => {
                    debug!(pod = %meta.uid, namespace = %meta.namespace, name = %meta.name, reason = err.reason(), "refused again");
                    again(&err)
                }
            });
        }
        // A pod already admitted (a sandbox re-created) keeps what it has: nothing to write or
        // to move.
        if changed {
            if let Err(err) = self.persist().await {
                self.registry().abort_sandbox(&spec.uid);
                // The pool updater may have pushed the reservation's pool meanwhile.
                self.pool_changed();
                return Err(err.into());
            }
            self.pool_changed();
        }
        self.count_admission(&spec, allocations);
        let source_name = match source {
            Source::Spec => origin.as_str(),
            _ => "inferred",
        };
        match self.clear_refusal(&spec.uid) {
            Some(times) => {
                info!(pod = %meta.uid, namespace = %meta.namespace, name = %meta.name, source = source_name, refused_before = times, "admitted after refusals")
            }
            None => {
                info!(pod = %meta.uid, namespace = %meta.namespace, name = %meta.name, source = source_name, "admitted")
            }
        }
        Ok(Admission { spec, source })
    }

    /// Decides where a CreateContainer's container runs (`None`: a sandbox numa-shim does not
    /// manage). A decision that changed the registry (an inferred pod extended by it) is on disk
    /// before the container is created.
    pub async fn place(
        &self,
        req: &cri::CreateContainerRequest,
    ) -> Result<Option<Placement>, PlacementError> {
        let Some(config) = req.config.as_ref() else {
            return Ok(None);
        };
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let own = cri_resources(config.linux.as_ref().and_then(|l| l.resources.as_ref()));
        let (infers, inferred_before) = {
            let registry = self.registry();
            (
                registry.infers(&req.pod_sandbox_id, &name),
                registry.inferred_container(&req.pod_sandbox_id, &name),
            )
        };
        if infers {
            own.check("config.linux.resources")?;
        }
        // Rule C4 of the inference: a container holding devices declared its own resources.
        let holds_devices = infers && self.holds_devices(&req.pod_sandbox_id, config, &name).await;
        // An inferred pod's container is decided by its extension, which must be on disk before
        // the container is created: also on a retry whose first attempt could not write it.
        if infers || inferred_before.is_some() {
            self.durable().await?;
        }
        let (decided, inferred, pool_moved, changed, revision) = {
            let (sandbox, name) = (req.pod_sandbox_id.clone(), name.clone());
            self.decide("CreateContainer", move |registry| {
                let before = registry.node().shared_cpus();
                let revision = registry.last_revision();
                let decided = registry.decide_container(&sandbox, &name, |pod| {
                    infer::container(pod, &name, &own, holds_devices)
                });
                let inferred = registry.inferred_container(&sandbox, &name);
                let pool_moved = registry.node().shared_cpus() != before;
                let changed = registry.last_revision() != revision;
                (decided, inferred, pool_moved, changed, revision)
            })
            .await?
        };
        // Extending an inferred pod re-admits it, which can move its bubble: running
        // containers on the node shared pool must follow.
        if pool_moved {
            self.pool_changed();
        }
        let decided = match decided {
            Ok(decided) => decided,
            Err(err) => {
                return Err(self.container_refused(&req.pod_sandbox_id, &name, revision, err))
            }
        };
        let Some(decision) = decided else {
            return Ok(None);
        };
        if changed {
            // The extended pod stays in memory like a reservation whose container is not
            // created yet; the kubelet's retry finds it there.
            self.persist().await?;
        }
        Ok(Some(Placement {
            name,
            decision,
            inferred,
        }))
    }

    /// Counts and shows a CreateContainer refusal like a refused sandbox (an inferred pod that
    /// grew past its budget); the kubelet shows this one as the container's
    /// CreateContainerError. Warns once per pod and reason.
    fn container_refused(
        &self,
        sandbox_id: &str,
        name: &str,
        revision: u64,
        err: AdmissionError,
    ) -> PlacementError {
        let spec = self
            .registry()
            .pod_of_sandbox(sandbox_id)
            .map(|p| p.spec.clone());
        let recorded = spec.map(|spec| self.record_refusal(&spec, revision, &err));
        if recorded == Some(Recorded::Again) {
            debug!(sandbox = %sandbox_id, container = %name, reason = err.reason(), "container refused again");
            again(&err)
        } else {
            warn!(sandbox = %sandbox_id, container = %name, reason = err.reason(), message = %err, "container refused");
            err.into()
        }
    }

    /// Whether container `name` of the sandbox holds devices, for inference (rule C4): device
    /// plugin device nodes or CDI devices in its CreateContainer, else devices the kubelet's
    /// PodResources lists for it (a plugin may hand out only environment variables or mounts).
    async fn holds_devices(
        &self,
        sandbox_id: &str,
        config: &cri::ContainerConfig,
        name: &str,
    ) -> bool {
        if !config.devices.is_empty() || !config.cdi_devices.is_empty() {
            return true;
        }
        let pod = {
            let registry = self.registry();
            registry.pod_of_sandbox(sandbox_id).map(|p| p.spec.clone())
        };
        let Some(pod) = pod else {
            return false;
        };
        self.device_facts(&pod).await.is_some_and(|facts| {
            facts
                .allocated
                .get(name)
                .is_some_and(|held| held.values().any(|ids| !ids.is_empty()))
        })
    }

    /// The cpuset numa-shim keeps for a container it placed (UpdateContainerResources).
    pub fn kept(&self, req: &cri::UpdateContainerResourcesRequest) -> Option<ContainerRecord> {
        self.registry().applied(&req.container_id).cloned()
    }

    /// Records what the runtime did with a forwarded call and what `before` decided for it,
    /// has the state writer put it on disk (without waiting: what the runtime did is read back
    /// from it at start-up if numa-shim stops first) and wakes the pool updater if running
    /// containers may need new cpusets. What the runtime did is answered as it did it.
    pub async fn record(&self, request: &CriRequest, decided: Option<Decided>, outcome: &Outcome) {
        let ok = outcome.status.code() == Code::Ok;
        if let Some(Decided::Resized(resized)) = &decided {
            self.resize_done(resized, &outcome.status);
            return;
        }
        let (changed, pools) = self.record_outcome(request, decided, outcome.response.as_ref(), ok);
        if changed {
            self.persist_soon();
        }
        if pools {
            self.pool_changed();
        }
    }

    /// Returns whether the registry changed and whether running containers may need new
    /// cpusets.
    fn record_outcome(
        &self,
        request: &CriRequest,
        decided: Option<Decided>,
        response: Option<&CriResponse>,
        ok: bool,
    ) -> (bool, bool) {
        let mut registry = self.registry();
        let before = registry.last_revision();
        let pools = match (request, decided, response) {
            (
                CriRequest::RunPodSandbox(_),
                Some(Decided::Admitted { uid }),
                Some(CriResponse::RunPodSandbox(resp)),
            ) if ok => {
                registry.commit_sandbox(&uid, &resp.pod_sandbox_id);
                false
            }
            (CriRequest::RunPodSandbox(_), Some(Decided::Admitted { uid }), _) => {
                registry.abort_sandbox(&uid);
                true
            }
            (
                CriRequest::CreateContainer(req),
                Some(Decided::Placed { name, decision }),
                Some(CriResponse::CreateContainer(resp)),
            ) if ok => {
                registry.commit_container(
                    &resp.container_id,
                    &req.pod_sandbox_id,
                    &name,
                    &decision,
                );
                let pod = registry.containers().get(&resp.container_id);
                let assignments = pod.map_or_else(Vec::new, |c| {
                    container_assignments(registry.node(), &c.pod_uid, &name)
                });
                for (resource, kind) in assignments {
                    self.metrics().container_assignment(resource, kind);
                }
                // The pool may have changed while the call was in flight (another pod admitted
                // or released), or this container took a slice out of its pod's shared pool
                // (an inferred pod): running containers whose cpuset is now stale must be
                // updated, or they keep it until the next drift tick.
                registry.has_pending_updates()
            }
            (CriRequest::RemoveContainer(req), _, _) if ok => {
                registry.remove_container(&req.container_id);
                true
            }
            (CriRequest::StopPodSandbox(req), _, _) if ok => {
                // Registry before refusals: the lock order `placer::refused` asks for.
                if let Some(pod) = registry.pod_of_sandbox(&req.pod_sandbox_id) {
                    self.clear_refusal(&pod.spec.uid);
                }
                registry.stop_sandbox(&req.pod_sandbox_id);
                true
            }
            (CriRequest::RemovePodSandbox(req), _, _) if ok => {
                registry.remove_sandbox(&req.pod_sandbox_id);
                true
            }
            _ => false,
        };
        let changed = registry.last_revision() != before;
        // Releases of ids numa-shim does not know change nothing; a stale cpuset found after
        // CreateContainer counts even if this call changed nothing itself.
        let creates = matches!(request, CriRequest::CreateContainer(_));
        (changed, pools && (changed || creates))
    }
}

/// A refusal repeated with the same reason, logged and counted once.
fn again(err: &AdmissionError) -> PlacementError {
    PlacementError::Again {
        reason: err.reason().to_string(),
        message: err.to_string(),
    }
}

/// The CFS and memory fields inference reads from CRI resources.
pub(super) fn cri_resources(r: Option<&cri::LinuxContainerResources>) -> CriResources {
    r.map(|r| CriResources {
        cpu_period: r.cpu_period,
        cpu_quota: r.cpu_quota,
        cpu_shares: r.cpu_shares,
        memory_limit_in_bytes: r.memory_limit_in_bytes,
    })
    .unwrap_or_default()
}

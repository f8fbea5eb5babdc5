//! Admission at RunPodSandbox: the pod's spec (known or inferred from CRI), a refusal replayed
//! while nothing changed, else the decision core's admission, the reservation on disk before the
//! call is forwarded.

use tracing::{debug, info, warn};

use super::{again, cri_resources, PlacementError, Placer};
use crate::knowledge::infer;
use crate::knowledge::SpecOrigin;
use crate::lifecycle::gauges::admission_allocations;
use crate::lifecycle::refusals::Recorded;
use crate::lifecycle::registry::{inferred_sandbox_spec, Source};
use crate::placement::config::TopologyScope;
use crate::placement::PodSpec;
use crate::proto::cri::v1 as cri;

/// An admitted pod: what the sandbox annotation records.
#[derive(Debug, Clone)]
pub struct AdmittedPod {
    pub spec: PodSpec,
    pub source: Source,
}

impl Placer {
    /// Admits the pod of a RunPodSandbox and records the reservation on disk; a reservation
    /// that cannot be recorded is rolled back.
    pub async fn admit(
        &self,
        req: &cri::RunPodSandboxRequest,
        meta: &cri::PodSandboxMetadata,
    ) -> Result<AdmittedPod, PlacementError> {
        self.durable().await?;
        let sandbox = cri_resources(
            req.config
                .as_ref()
                .and_then(|c| c.linux.as_ref())
                .and_then(|l| l.resources.as_ref()),
        );
        let (spec, source, origin) = match self.knowledge().spec_of(&meta.uid).await {
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
        Ok(AdmittedPod { spec, source })
    }
}

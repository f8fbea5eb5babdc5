//! Placement of a container at CreateContainer (an inferred pod extended by it on disk before
//! the container is created), and the cpuset numa-shim keeps at an UpdateContainerResources.

use tracing::{debug, warn};

use super::{again, cri_resources, PlacementError, Placer};
use crate::knowledge::infer;
use crate::lifecycle::refusals::Recorded;
use crate::lifecycle::registry::{ContainerDecision, ContainerRecord};
use crate::placement::{AdmissionError, ContainerSpec};
use crate::proto::cri::v1 as cri;

/// A placed container: its decision and, for an inferred pod, the spec it was inferred as.
#[derive(Debug, Clone)]
pub struct PlacedContainer {
    pub name: String,
    pub decision: ContainerDecision,
    pub inferred: Option<ContainerSpec>,
}

impl Placer {
    /// Decides where a CreateContainer's container runs (`None`: a sandbox numa-shim does not
    /// manage). A decision that changed the registry (an inferred pod extended by it) is on disk
    /// before the container is created.
    pub async fn place(
        &self,
        req: &cri::CreateContainerRequest,
    ) -> Result<Option<PlacedContainer>, PlacementError> {
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
        Ok(Some(PlacedContainer {
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
}

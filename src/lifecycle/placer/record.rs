//! What the runtime did with a forwarded call, recorded in memory before the answer goes back
//! (commit, roll back, release) and put on disk by the state writer afterwards.

use tonic::Code;

use super::Placer;
use crate::lifecycle::gauges::container_assignments;
use crate::lifecycle::registry::{ContainerDecision, Resized};
use crate::relay::{CriRequest, CriResponse, Outcome};

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

impl Placer {
    /// Records what the runtime did with a forwarded call and what `before` decided for it,
    /// has the state writer put it on disk (without waiting: what the runtime did is read back
    /// from it at start-up if numa-shim stops first) and wakes the pool updater if running
    /// containers may need new cpusets. What the runtime did is answered as it did it.
    pub async fn record(&self, request: &CriRequest, decided: Option<Decided>, outcome: &Outcome) {
        let ok = outcome.status.code() == Code::Ok;
        if let Some(Decided::Resized(resized)) = &decided {
            self.resize_done(resized, outcome.status.code());
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

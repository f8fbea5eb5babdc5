//! What the runtime did with a forwarded call, recorded in memory before the answer goes back
//! (commit, roll back, release) and put on disk by the state writer afterwards. The relay's hook
//! reads it from the CRI answer ([`Outcome`]); nothing here knows CRI answers or gRPC codes.

use super::Placer;
use crate::lifecycle::gauges::container_assignments;
use crate::lifecycle::registry::{ContainerDecision, Resized};

/// What the runtime did with a forwarded call, in the lifecycle's terms, with what was decided
/// for it before it was forwarded. Calls that change nothing numa-shim keeps (a refused
/// StopPodSandbox, an UpdateContainerResources whose cpuset was only kept, a CreateContainer
/// the runtime refused) have no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// RunPodSandbox: the runtime ran the sandbox of the admitted pod `uid`.
    SandboxRun { uid: String, sandbox: String },
    /// RunPodSandbox: the runtime did not run the admitted pod's sandbox (it refused, or the
    /// call was cut off and the runtime shows nothing of it).
    SandboxFailed { uid: String },
    /// CreateContainer: the runtime created container `name` of `sandbox`, placed as
    /// `decision`.
    Created {
        container: String,
        sandbox: String,
        name: String,
        decision: ContainerDecision,
    },
    /// UpdateContainerResources / UpdatePodSandboxResources: an in-place resize and how the
    /// runtime answered it (kept or undone: `Placer::resize_done`).
    Resized {
        resized: Box<Resized>,
        answer: ResizeAnswer,
    },
    /// RemoveContainer succeeded.
    ContainerRemoved { container: String },
    /// StopPodSandbox succeeded.
    SandboxStopped { sandbox: String },
    /// RemovePodSandbox succeeded.
    SandboxRemoved { sandbox: String },
}

/// How the runtime answered a resize, in the lifecycle's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeAnswer {
    /// It applied the new resources.
    Accepted,
    /// It does not implement the call (containerd 2.4 answers UpdatePodSandboxResources
    /// UNIMPLEMENTED, 2.2 UNKNOWN "not implemented"): the kubelet goes on and resizes the pod's
    /// cgroup itself, so a pod budget's resize is kept.
    NotImplemented,
    /// The caller's deadline passed or it hung up before the runtime answered: the runtime may
    /// have applied it.
    CutOff,
    /// It refused the call.
    Refused,
}

impl Placer {
    /// Records what the runtime did with a forwarded call, has the state writer put it on disk
    /// (without waiting: what the runtime did is read back from it at start-up if numa-shim
    /// stops first) and wakes the pool updater if running containers may need new cpusets.
    pub async fn record(&self, outcome: Outcome) {
        if let Outcome::Resized { resized, answer } = &outcome {
            self.resize_done(resized, *answer);
            return;
        }
        let (changed, pools) = self.record_outcome(outcome);
        if changed {
            self.persist_soon();
        }
        if pools {
            self.pool_changed();
        }
    }

    /// Returns whether the registry changed and whether running containers may need new
    /// cpusets.
    fn record_outcome(&self, outcome: Outcome) -> (bool, bool) {
        // A stale cpuset found after CreateContainer counts even if this call changed nothing
        // itself.
        let creates = matches!(outcome, Outcome::Created { .. });
        let mut registry = self.registry();
        let before = registry.last_revision();
        let pools = match outcome {
            Outcome::SandboxRun { uid, sandbox } => {
                registry.commit_sandbox(&uid, &sandbox);
                false
            }
            Outcome::SandboxFailed { uid } => {
                registry.abort_sandbox(&uid);
                true
            }
            Outcome::Created {
                container,
                sandbox,
                name,
                decision,
            } => {
                registry.commit_container(&container, &sandbox, &name, &decision);
                let pod = registry.containers().get(&container);
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
            Outcome::ContainerRemoved { container } => {
                registry.remove_container(&container);
                true
            }
            Outcome::SandboxStopped { sandbox } => {
                // Registry before refusals: the lock order `placer::refused` asks for.
                if let Some(pod) = registry.pod_of_sandbox(&sandbox) {
                    self.clear_refusal(&pod.spec.uid);
                }
                registry.stop_sandbox(&sandbox);
                true
            }
            Outcome::SandboxRemoved { sandbox } => {
                registry.remove_sandbox(&sandbox);
                true
            }
            // Recorded by `record` itself.
            Outcome::Resized { .. } => false,
        };
        let changed = registry.last_revision() != before;
        // Releases of ids numa-shim does not know change nothing.
        (changed, pools && (changed || creates))
    }
}

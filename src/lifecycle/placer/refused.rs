//! The placer's side of refused pods: the table of [`Refusals`] behind its own lock, replays of
//! an unchanged refusal, and the metrics that show them. Takes the refusals lock only; never the
//! registry's (callers read what they need from the registry first, or hold it and take this one
//! after: registry before refusals, never the other way).

use std::sync::MutexGuard;
use std::time::Instant;

use super::Placer;
use crate::lifecycle::refusals::{Recorded, RefusalView, Refusals};
use crate::placement::{AdmissionError, PodSpec};

impl Placer {
    /// The pods refused now (refusals nobody asked about again for a while are dropped first).
    pub fn refusals(&self) -> Vec<RefusalView> {
        let mut refusals = self.lock_refusals();
        if refusals.forget_stale(Instant::now()) > 0 {
            self.publish_refusals(&refusals);
        }
        refusals.views()
    }

    fn lock_refusals(&self) -> MutexGuard<'_, Refusals> {
        self.refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn publish_refusals(&self, refusals: &Refusals) {
        let views = refusals.views();
        let rows: Vec<_> = views
            .iter()
            .map(|v| {
                (
                    v.namespace.as_str(),
                    v.name.as_str(),
                    v.reason.as_str(),
                    v.message.as_str(),
                    v.count,
                )
            })
            .collect();
        self.metrics().replace_refusals(&rows);
    }

    /// The refusal already given to `spec` (reason, message), if nothing changed in the
    /// registry since: counted as one more refusal.
    pub(in crate::lifecycle) fn replay_refusal(&self, spec: &PodSpec) -> Option<(String, String)> {
        let revision = self.registry().last_revision();
        let mut refusals = self.lock_refusals();
        let replayed = refusals.replay(spec, revision, Instant::now())?;
        self.publish_refusals(&refusals);
        Some(replayed)
    }

    /// Records a refusal decided at `revision`: whether it is the pod's first.
    pub(in crate::lifecycle) fn record_refusal(
        &self,
        spec: &PodSpec,
        revision: u64,
        err: &AdmissionError,
    ) -> Recorded {
        let mut refusals = self.lock_refusals();
        let recorded = refusals.record(spec, revision, err, Instant::now());
        self.publish_refusals(&refusals);
        recorded
    }

    /// The pod was admitted or its sandbox stopped: forgets its refusal; how often it had been
    /// refused.
    pub(in crate::lifecycle) fn clear_refusal(&self, uid: &str) -> Option<u64> {
        let mut refusals = self.lock_refusals();
        let count = refusals.admitted(uid)?;
        self.publish_refusals(&refusals);
        Some(count)
    }
}

//! Pods numa-shim refused at RunPodSandbox. The kubelet cannot be told through CRI that a pod
//! will never fit: whatever the status code, a failed RunPodSandbox leaves the pod Pending and
//! the kubelet retries it every 10–15 s (pod worker back-off) for as long as the pod exists. So
//! numa-shim remembers each refusal: a retry of the same pod while nothing changed in the
//! registry gets the same answer without deciding again, without a warning line and without
//! counting another allocation error; `inspect` and the metrics show the reason, the message and
//! how often the kubelet asked. A refusal no retry came for within [`STALE_AFTER`] is forgotten
//! (the kubelet gave the pod up).
//!
//! Pure bookkeeping: callers pass the time. Never decides admission and never logs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::placement::{AdmissionError, PodSpec};

/// A refusal not asked about again for this long is dropped.
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// What [`Refusals::record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The pod's first refusal (or the first with this reason).
    First,
    /// Refused again after deciding again (the registry had changed).
    Again,
}

/// One refused pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    spec: PodSpec,
    reason: String,
    message: String,
    count: u64,
    first: SystemTime,
    last: SystemTime,
    last_seen: Instant,
    /// The registry revision the refusal was decided at.
    revision: u64,
}

/// A refused pod as `/placement` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusalView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The kubelet's reason (`TopologyAffinityError`, `EmptyPodSharedPoolError`, ...).
    pub reason: String,
    pub message: String,
    /// RunPodSandbox calls refused for this pod.
    pub count: u64,
    /// Unix seconds of the first and the latest refusal.
    pub first_refused: u64,
    pub last_refused: u64,
}

/// Every pod currently refused, by UID.
#[derive(Debug, Default)]
pub struct Refusals {
    by_uid: BTreeMap<String, Refusal>,
}

impl Refusals {
    /// The refusal to answer again (the kubelet's reason and message) if `spec` was refused at
    /// `revision` and nothing has changed since (same spec, same registry revision); counts the
    /// retry.
    pub fn replay(
        &mut self,
        spec: &PodSpec,
        revision: u64,
        now: Instant,
    ) -> Option<(String, String)> {
        let refusal = self.by_uid.get_mut(&spec.uid)?;
        if refusal.revision != revision || &refusal.spec != spec {
            return None;
        }
        refusal.count += 1;
        refusal.last = SystemTime::now();
        refusal.last_seen = now;
        Some((refusal.reason.clone(), refusal.message.clone()))
    }

    /// Records a refusal decided at `revision`.
    pub fn record(
        &mut self,
        spec: &PodSpec,
        revision: u64,
        err: &AdmissionError,
        now: Instant,
    ) -> Recorded {
        let reason = err.reason().to_string();
        let wall = SystemTime::now();
        match self.by_uid.get_mut(&spec.uid) {
            Some(r) if r.reason == reason => {
                r.count += 1;
                r.last = wall;
                r.last_seen = now;
                r.revision = revision;
                r.spec = spec.clone();
                r.message = err.to_string();
                Recorded::Again
            }
            _ => {
                let count = self.by_uid.get(&spec.uid).map_or(0, |r| r.count) + 1;
                self.by_uid.insert(
                    spec.uid.clone(),
                    Refusal {
                        spec: spec.clone(),
                        reason,
                        message: err.to_string(),
                        count,
                        first: wall,
                        last: wall,
                        last_seen: now,
                        revision,
                    },
                );
                Recorded::First
            }
        }
    }

    /// The pod was admitted after all: returns how often it had been refused.
    pub fn admitted(&mut self, uid: &str) -> Option<u64> {
        self.by_uid.remove(uid).map(|r| r.count)
    }

    /// Drops refusals no retry came for within [`STALE_AFTER`]; returns how many.
    pub fn forget_stale(&mut self, now: Instant) -> usize {
        let before = self.by_uid.len();
        self.by_uid
            .retain(|_, r| now.duration_since(r.last_seen) < STALE_AFTER);
        before - self.by_uid.len()
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }

    /// Every refused pod, by UID.
    pub fn views(&self) -> Vec<RefusalView> {
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        };
        self.by_uid
            .iter()
            .map(|(uid, r)| RefusalView {
                uid: uid.clone(),
                namespace: r.spec.namespace.clone(),
                name: r.spec.name.clone(),
                reason: r.reason.clone(),
                message: r.message.clone(),
                count: r.count,
                first_refused: unix(r.first),
                last_refused: unix(r.last),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(uid: &str, cpu: u64) -> PodSpec {
        PodSpec {
            uid: uid.into(),
            namespace: "default".into(),
            name: format!("pod-{uid}"),
            resources: Some(crate::placement::Resources {
                requests: crate::placement::ResourceList {
                    cpu_milli: Some(cpu),
                    ..Default::default()
                },
                ..Default::default()
            }),
            init_containers: vec![],
            containers: vec![],
        }
    }

    #[test]
    fn a_retry_of_the_same_pod_in_the_same_state_is_replayed_and_counted() {
        let mut r = Refusals::default();
        let now = Instant::now();
        let pod = spec("a", 2000);
        assert_eq!(r.replay(&pod, 7, now), None);
        let err = AdmissionError::TopologyAffinity;
        assert_eq!(r.record(&pod, 7, &err, now), Recorded::First);
        let again = Some((
            "TopologyAffinityError".to_string(),
            "Resources cannot be allocated with Topology locality".to_string(),
        ));
        assert_eq!(r.replay(&pod, 7, now), again);
        assert_eq!(r.replay(&pod, 7, now), again);
        // The registry moved (a pod left): decide again.
        assert_eq!(r.replay(&pod, 8, now), None);
        assert_eq!(r.record(&pod, 8, &err, now), Recorded::Again);
        // A different spec for the same UID (resized) is decided again too.
        assert_eq!(r.replay(&spec("a", 1000), 8, now), None);
        let views = r.views();
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].count, 4);
        assert_eq!(views[0].reason, "TopologyAffinityError");
        assert_eq!(
            views[0].message,
            "Resources cannot be allocated with Topology locality"
        );
        assert_eq!(r.admitted("a"), Some(4));
        assert!(r.is_empty());
    }

    #[test]
    fn refusals_nobody_asks_about_go_away() {
        let mut r = Refusals::default();
        let start = Instant::now();
        let err = AdmissionError::TopologyAffinity;
        r.record(&spec("a", 1000), 1, &err, start);
        r.record(&spec("b", 1000), 1, &err, start + STALE_AFTER / 2);
        assert_eq!(r.forget_stale(start + STALE_AFTER), 1);
        assert_eq!(r.views()[0].uid, "b");
    }

    #[test]
    fn a_new_reason_is_a_first_refusal_again() {
        let mut r = Refusals::default();
        let now = Instant::now();
        let pod = spec("a", 1000);
        r.record(&pod, 1, &AdmissionError::TopologyAffinity, now);
        let empty = AdmissionError::EmptyPodSharedPool {
            message: "pod rejected".into(),
        };
        assert_eq!(r.record(&pod, 2, &empty, now), Recorded::First);
        assert_eq!(r.views()[0].count, 2);
    }
}

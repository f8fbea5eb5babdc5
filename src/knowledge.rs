//! Pod knowledge: what numa-shim knows of a pod beyond what one CRI call carries.
//!
//! Sources, best first: the kubelet Pods API, the API server, then inference from CRI requests
//! alone (`infer`, rules in docs/pod-knowledge.md). Each watched source fills a `PodCache` and
//! says whether it is live; [`Knowledge`] asks them in order and names the one that answered.
//! This module turns each source into the decision core's `PodSpec`; it never decides placement.

pub mod apiserver;
pub mod infer;
pub mod pods_api;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::placement::PodSpec;

/// How long RunPodSandbox waits for a pod a live source has not delivered yet.
pub const SPEC_WAIT: Duration = Duration::from_secs(2);

/// Where numa-shim learned a pod's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpecOrigin {
    /// The kubelet Pods API.
    PodsApi,
    /// The Kubernetes API server.
    #[serde(rename = "apiserver")]
    ApiServer,
    /// Inferred from the CRI requests alone.
    Cri,
}

impl SpecOrigin {
    /// The name logs, metrics and `inspect` use (`pods-api`, `apiserver`, `cri`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodsApi => "pods-api",
            Self::ApiServer => "apiserver",
            Self::Cri => "cri",
        }
    }
}

/// Whether a watched source can deliver pods now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Not there (the Pods API socket does not exist): nothing to wait for.
    Absent,
    /// There but not streaming yet, or reconnecting: a pod may arrive shortly.
    Connecting,
    /// Streaming.
    Live,
}

/// Pod specs by UID, filled by a watcher (kubelet Pods API or API server), with the watcher's
/// link state.
#[derive(Debug)]
pub struct PodCache {
    pods: Mutex<Entries>,
    changed: Notify,
    link: AtomicU8,
    /// The Pods API socket: while the link is `Absent`, a socket that appeared since the watcher
    /// last looked counts as `Connecting` (the kubelet is up; its pods are coming).
    socket: Option<PathBuf>,
}

/// What a source says of a pod beyond its spec, for finding the pod the kubelet admits now
/// (the device plugin front: the kubelet admits pods oldest first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodMeta {
    /// `metadata.creationTimestamp`, seconds since the epoch; `None`: not given.
    pub created: Option<i64>,
    /// `status.phase` is `Succeeded` or `Failed` (a refused pod is `Failed`).
    pub finished: bool,
}

impl PodMeta {
    /// From a `creationTimestamp` (RFC 3339, `2026-12-06T03:54:38Z`) and a phase.
    pub fn from_api(created: Option<&str>, phase: Option<&str>) -> Self {
        Self {
            created: created.and_then(rfc3339_seconds),
            finished: matches!(phase, Some("Succeeded" | "Failed")),
        }
    }
}

/// Seconds since the epoch of an RFC 3339 time in UTC as the API server writes it
/// (`YYYY-MM-DDTHH:MM:SSZ`, fractions ignored); `None` for anything else.
pub fn rfc3339_seconds(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { text.get(r)?.parse().ok() };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

#[derive(Debug, Default)]
struct Entries {
    pods: HashMap<String, (PodSpec, u64, PodMeta)>,
    /// Bumped when a watch stream starts over; entries older than the last full sync go.
    generation: u64,
}

impl Default for PodCache {
    fn default() -> Self {
        Self::new(None)
    }
}

impl PodCache {
    /// A cache whose watcher is connecting; `socket` is the Pods API socket it watches, if any.
    pub fn new(socket: Option<PathBuf>) -> Self {
        Self {
            pods: Mutex::new(Entries::default()),
            changed: Notify::new(),
            link: AtomicU8::new(Link::Connecting as u8),
            socket,
        }
    }

    pub fn insert(&self, spec: PodSpec) {
        self.insert_with(spec, PodMeta::default());
    }

    /// Inserts a pod with what its source says of its age and phase.
    pub fn insert_with(&self, spec: PodSpec, meta: PodMeta) {
        let mut entries = self.lock();
        let generation = entries.generation;
        entries
            .pods
            .insert(spec.uid.clone(), (spec, generation, meta));
        drop(entries);
        self.changed.notify_waiters();
    }

    pub fn remove(&self, uid: &str) {
        self.lock().pods.remove(uid);
    }

    pub fn get(&self, uid: &str) -> Option<PodSpec> {
        self.lock().pods.get(uid).map(|(spec, _, _)| spec.clone())
    }

    /// Every pod known, with its meta.
    pub fn list(&self) -> Vec<(PodSpec, PodMeta)> {
        self.lock()
            .pods
            .values()
            .map(|(spec, _, meta)| (spec.clone(), *meta))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new stream starts: what it delivers is the new generation.
    pub fn begin_sync(&self) {
        self.lock().generation += 1;
    }

    /// The stream delivered every pod: pods it did not deliver are gone (deleted while the
    /// source was away). Returns how many were dropped.
    pub fn end_sync(&self) -> usize {
        let mut entries = self.lock();
        let generation = entries.generation;
        let before = entries.pods.len();
        entries.pods.retain(|_, (_, g, _)| *g == generation);
        before - entries.pods.len()
    }

    /// The watcher's link.
    pub fn link(&self) -> Link {
        let link = match self.link.load(Ordering::Acquire) {
            0 => Link::Absent,
            2 => Link::Live,
            _ => Link::Connecting,
        };
        match (&self.socket, link) {
            (Some(socket), Link::Absent) if socket.exists() => Link::Connecting,
            _ => link,
        }
    }

    /// Sets the link; returns the previous one (as the watcher last set it).
    pub fn set_link(&self, link: Link) -> Link {
        let value = match link {
            Link::Absent => 0,
            Link::Connecting => 1,
            Link::Live => 2,
        };
        match self.link.swap(value, Ordering::AcqRel) {
            0 => Link::Absent,
            2 => Link::Live,
            _ => Link::Connecting,
        }
    }

    /// The spec for `uid`, waiting up to `wait` for the watcher to deliver it.
    pub async fn wait_for(&self, uid: &str, wait: Duration) -> Option<PodSpec> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            if let Some(spec) = self.get(uid) {
                return Some(spec);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.get(uid);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.pods
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One watched source and its cache.
#[derive(Debug, Clone)]
pub struct Watched {
    pub origin: SpecOrigin,
    pub cache: Arc<PodCache>,
}

/// Where the placement hook gets pod specs.
#[derive(Debug, Clone, Default)]
pub enum Knowledge {
    /// Inference from CRI alone.
    #[default]
    CriOnly,
    /// Watched sources, best first (Pods API, API server), feeding these caches.
    Watched(Vec<Watched>),
}

impl Knowledge {
    /// The pod's spec and who told it: the first source that has it; else the first source that
    /// is live or connecting, waited on for up to [`SPEC_WAIT`]; `None` to infer from CRI.
    pub async fn spec_of(&self, uid: &str) -> Option<(PodSpec, SpecOrigin)> {
        let Self::Watched(sources) = self else {
            return None;
        };
        for source in sources {
            if let Some(spec) = source.cache.get(uid) {
                return Some((spec, source.origin));
            }
        }
        let waiting = sources.iter().find(|s| s.cache.link() != Link::Absent)?;
        if let Some(spec) = waiting.cache.wait_for(uid, SPEC_WAIT).await {
            return Some((spec, waiting.origin));
        }
        sources
            .iter()
            .find_map(|s| s.cache.get(uid).map(|spec| (spec, s.origin)))
    }

    /// Every pod the watched sources know, each once (the best source's), with its meta.
    pub fn all_pods(&self) -> Vec<(PodSpec, PodMeta)> {
        let Self::Watched(sources) = self else {
            return Vec::new();
        };
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for source in sources {
            for (spec, meta) in source.cache.list() {
                if seen.insert(spec.uid.clone()) {
                    out.push((spec, meta));
                }
            }
        }
        out
    }

    /// The watched sources and whether each is live (for logs and metrics).
    pub fn links(&self) -> Vec<(SpecOrigin, Link)> {
        match self {
            Self::CriOnly => Vec::new(),
            Self::Watched(sources) => sources.iter().map(|s| (s.origin, s.cache.link())).collect(),
        }
    }
}

#[cfg(test)]
mod tests;

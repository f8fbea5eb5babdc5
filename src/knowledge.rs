//! Pod knowledge: what numa-shim knows of a pod beyond what one CRI call carries.
//!
//! Sources, best first: the kubelet Pods API, the API server, then inference from CRI requests
//! alone (`infer`, rules in docs/pod-knowledge.md). This module turns each source into the
//! decision core's `PodSpec`; it never decides placement.

pub mod apiserver;
pub mod infer;
pub mod pods_api;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::placement::PodSpec;

/// How long RunPodSandbox waits for a pod the cache has not seen yet.
pub const SPEC_WAIT: Duration = Duration::from_secs(2);

/// Pod specs by UID, filled by a watcher (kubelet Pods API or API server).
#[derive(Debug, Default)]
pub struct PodCache {
    pods: Mutex<HashMap<String, PodSpec>>,
    changed: Notify,
}

impl PodCache {
    pub fn insert(&self, spec: PodSpec) {
        self.lock().insert(spec.uid.clone(), spec);
        self.changed.notify_waiters();
    }

    pub fn remove(&self, uid: &str) {
        self.lock().remove(uid);
    }

    pub fn get(&self, uid: &str) -> Option<PodSpec> {
        self.lock().get(uid).cloned()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PodSpec>> {
        self.pods
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where the placement hook gets pod specs.
#[derive(Debug, Clone, Default)]
pub enum Knowledge {
    /// Inference from CRI alone.
    #[default]
    CriOnly,
    /// A watched source (Pods API or API server) feeding this cache.
    Watched(Arc<PodCache>),
}

impl Knowledge {
    /// The pod's spec, if a watched source knows it (waiting briefly for a late update).
    pub async fn pod(&self, uid: &str) -> Option<PodSpec> {
        match self {
            Self::CriOnly => None,
            Self::Watched(cache) => cache.wait_for(uid, SPEC_WAIT).await,
        }
    }
}

//! The API server source: lists the pods bound to this node (`fieldSelector=spec.nodeName=`),
//! then watches from the list's resourceVersion (newline-delimited JSON watch events, bookmarks
//! on), feeding every pod into the `PodCache` and removing deleted ones. Re-lists when the
//! resourceVersion expires (410 Gone), reconnects with back-off otherwise, and counts what it
//! did (`WatchStats`). Connection settings come from a kubeconfig or the in-cluster service
//! account (`connection`); `http` sends the requests, also those of the refusal reports
//! (`crate::report`). The watcher never writes to the API server and never decides placement.
//! `claims` reads a pod's DRA claims and their devices' NUMA nodes for the decision.

pub mod claims;
mod connection;
pub(crate) mod http;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::{debug, info, warn};

pub use connection::{Connection, SERVICE_ACCOUNT_DIR};

use super::{Link, PodCache};
use crate::k8s::pod::Pod;
use crate::placement::PodSpec;

/// How long the server keeps one watch open before the watcher re-watches.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(300);
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Why the API server source could not be set up or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("kubeconfig {path}: {field}: {reason}")]
    Kubeconfig {
        path: PathBuf,
        field: String,
        reason: String,
    },
    #[error("in-cluster config: {reason}")]
    InCluster { reason: String },
    #[error("cannot determine the node name: {reason}")]
    NodeName { reason: String },
    #[error("invalid request {url}: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("tls handshake with {url}: {source}")]
    Tls {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("http error from {url}: {source}")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{method} {url}: status {status}: {body}")]
    Status {
        method: String,
        url: String,
        status: u16,
        body: String,
    },
    #[error("GET {url}: resource version expired (410 gone)")]
    Gone { url: String },
    #[error("GET {url}: watch error {code}: {message}")]
    WatchError {
        url: String,
        code: u16,
        message: String,
    },
    #[error("GET {url}: invalid json: {source}")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

/// What the API server source is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerOptions {
    /// A kubeconfig file; `None` uses the in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    /// Where the in-cluster token and `ca.crt` are (default `SERVICE_ACCOUNT_DIR`).
    pub service_account_dir: PathBuf,
    /// The node whose pods are watched.
    pub node_name: String,
}

impl ApiServerOptions {
    /// Options for `node_name`, or the machine's hostname (lowercased, as the kubelet does).
    pub fn new(
        kubeconfig: Option<PathBuf>,
        node_name: Option<String>,
    ) -> Result<Self, ApiServerError> {
        let node_name = match node_name.filter(|n| !n.is_empty()) {
            Some(name) => name,
            None => hostname()?,
        };
        Ok(Self {
            kubeconfig,
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
            node_name,
        })
    }

    /// Resolves the connection: the kubeconfig, else the in-cluster config from the process
    /// environment and `service_account_dir`.
    pub fn connection(&self) -> Result<Connection, ApiServerError> {
        match &self.kubeconfig {
            Some(path) => Connection::from_kubeconfig(path),
            None => Connection::in_cluster(|k| std::env::var(k).ok(), &self.service_account_dir),
        }
    }
}

/// The machine's hostname, lowercased (the kubelet's default node name).
pub fn hostname() -> Result<String, ApiServerError> {
    let path = "/proc/sys/kernel/hostname";
    let name = std::fs::read_to_string(path)
        .map_err(|e| ApiServerError::NodeName {
            reason: format!("{path}: {e}"),
        })?
        .trim()
        .to_lowercase();
    if name.is_empty() {
        return Err(ApiServerError::NodeName {
            reason: format!("{path} is empty; set nodeName"),
        });
    }
    Ok(name)
}

/// What the watcher has done so far: counters for metrics and tests, and the resourceVersion
/// it would watch from next. Updated by the watcher only.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Completed lists (the first one and every re-list).
    pub lists: AtomicU64,
    /// Watch requests the server accepted.
    pub watches: AtomicU64,
    /// ADDED, MODIFIED and DELETED events applied.
    pub events: AtomicU64,
    /// BOOKMARK events.
    pub bookmarks: AtomicU64,
    /// Times the resourceVersion had expired (410), each followed by a re-list.
    pub expired: AtomicU64,
    /// Failed requests (connection, TLS, HTTP status other than 410, bad JSON).
    pub errors: AtomicU64,
    resource_version: Mutex<Option<String>>,
}

impl WatchStats {
    /// The resourceVersion the next watch starts from (`None` before the first list and after
    /// an expiry).
    pub fn resource_version(&self) -> Option<String> {
        self.resource_version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The counters by the names `numa_shim_apiserver_watch_total` labels them with.
    pub fn rows(&self) -> [(&'static str, u64); 6] {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("list", n(&self.lists)),
            ("watch", n(&self.watches)),
            ("event", n(&self.events)),
            ("bookmark", n(&self.bookmarks)),
            ("expired", n(&self.expired)),
            ("error", n(&self.errors)),
        ]
    }

    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn set_resource_version(&self, rv: Option<&str>) {
        *self
            .resource_version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = rv.map(str::to_string);
    }
}

/// How the watcher runs: the server-side timeout of each watch and where it counts.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// `timeoutSeconds` of each watch request (whole seconds, at least 1).
    pub timeout: Duration,
    pub stats: Arc<WatchStats>,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            timeout: WATCH_TIMEOUT,
            stats: Arc::default(),
        }
    }
}

/// Lists and watches this node's pods forever (until the task is dropped), filling `cache`.
pub async fn watch(conn: Connection, node_name: String, cache: Arc<PodCache>) {
    watch_with(conn, node_name, cache, WatchSettings::default()).await;
}

/// [`watch`] with explicit settings.
pub async fn watch_with(
    conn: Connection,
    node_name: String,
    cache: Arc<PodCache>,
    settings: WatchSettings,
) {
    let mut watcher = Watcher::new(conn, &node_name, cache, settings);
    let mut backoff = BACKOFF_MIN;
    loop {
        let result = match watcher.resource_version.clone() {
            None => watcher.list().await.map(|()| true),
            Some(rv) => watcher.watch_from(&rv).await,
        };
        let link = if result.is_ok() {
            Link::Live
        } else {
            Link::Connecting
        };
        watcher.cache.set_link(link);
        let stats = &watcher.settings.stats;
        match result {
            Ok(true) => backoff = BACKOFF_MIN,
            Ok(false) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(ApiServerError::Gone { .. }) => {
                WatchStats::count(&stats.expired);
                info!(
                    server = watcher.conn.server(),
                    "resource version expired; re-listing"
                );
                watcher.resource_version = None;
                stats.set_resource_version(None);
            }
            Err(err) => {
                WatchStats::count(&stats.errors);
                warn!(error = %err, "api server unavailable");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// List+watch state: the last resourceVersion seen and the pods this source put in the cache.
struct Watcher {
    conn: Connection,
    selector: String,
    cache: Arc<PodCache>,
    settings: WatchSettings,
    resource_version: Option<String>,
    known: HashSet<String>,
}

#[derive(Deserialize)]
struct PodList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ListMeta {
    resource_version: Option<String>,
}

/// `metadata` of any object (a pod or a bookmark's stub).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Head {
    metadata: HeadMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct HeadMeta {
    uid: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: Box<RawValue>,
}

/// The `Status` object of an ERROR event.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Status {
    code: u16,
    message: String,
}

impl Watcher {
    fn new(
        conn: Connection,
        node_name: &str,
        cache: Arc<PodCache>,
        settings: WatchSettings,
    ) -> Self {
        Self {
            conn,
            selector: format!(
                "fieldSelector={}",
                encode(&format!("spec.nodeName={node_name}"))
            ),
            cache,
            settings,
            resource_version: None,
            known: HashSet::new(),
        }
    }

    /// Lists the node's pods and makes the cache hold exactly them.
    async fn list(&mut self) -> Result<(), ApiServerError> {
        let path = format!("/api/v1/pods?{}", self.selector);
        let url = format!("{}{path}", self.conn.server());
        let body = http::get(&self.conn, &path)
            .await?
            .into_body()
            .collect()
            .await
            .map_err(|source| ApiServerError::Http {
                url: url.clone(),
                source,
            })?
            .to_bytes();
        let list: PodList = serde_json::from_slice(&body)
            .map_err(|source| ApiServerError::Decode { url, source })?;
        let mut seen = HashSet::new();
        for item in &list.items {
            if let Some(uid) = self.apply(item) {
                seen.insert(uid);
            }
        }
        for gone in self.known.difference(&seen) {
            self.cache.remove(gone);
        }
        self.known = seen;
        self.resource_version = Some(list.metadata.resource_version.unwrap_or_default());
        let stats = &self.settings.stats;
        stats.set_resource_version(self.resource_version.as_deref());
        WatchStats::count(&stats.lists);
        info!(
            pods = self.known.len(),
            server = self.conn.server(),
            "api server pods listed"
        );
        Ok(())
    }

    /// Watches from `rv` until the stream ends; `Ok(true)` when it delivered any event.
    async fn watch_from(&mut self, rv: &str) -> Result<bool, ApiServerError> {
        let path = format!(
            "/api/v1/pods?{}&watch=true&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={}",
            self.selector,
            encode(rv),
            self.settings.timeout.as_secs().max(1)
        );
        let url = format!("{}{path}", self.conn.server());
        let mut body = http::get(&self.conn, &path).await?.into_body();
        WatchStats::count(&self.settings.stats.watches);
        let mut buffer: Vec<u8> = Vec::new();
        let mut events = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|source| ApiServerError::Http {
                url: url.clone(),
                source,
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buffer.extend_from_slice(&data);
            while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let event: WatchEvent =
                    serde_json::from_slice(&line).map_err(|source| ApiServerError::Decode {
                        url: url.clone(),
                        source,
                    })?;
                self.event(&url, event)?;
                events += 1;
            }
        }
        debug!(events, "api server watch ended");
        Ok(events > 0)
    }

    fn event(&mut self, url: &str, event: WatchEvent) -> Result<(), ApiServerError> {
        if event.kind == "ERROR" {
            let status: Status = serde_json::from_str(event.object.get()).unwrap_or_default();
            if status.code == 410 {
                return Err(ApiServerError::Gone {
                    url: url.to_string(),
                });
            }
            return Err(ApiServerError::WatchError {
                url: url.to_string(),
                code: status.code,
                message: status.message,
            });
        }
        let head: Head = serde_json::from_str(event.object.get()).unwrap_or_default();
        if let Some(rv) = head.metadata.resource_version.filter(|rv| !rv.is_empty()) {
            self.settings.stats.set_resource_version(Some(&rv));
            self.resource_version = Some(rv);
        }
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => {
                WatchStats::count(&self.settings.stats.events);
                if let Some(uid) = self.apply(&event.object) {
                    self.known.insert(uid);
                }
            }
            "DELETED" => {
                WatchStats::count(&self.settings.stats.events);
                if let Some(uid) = head.metadata.uid {
                    self.cache.remove(&uid);
                    self.known.remove(&uid);
                }
            }
            "BOOKMARK" => {
                WatchStats::count(&self.settings.stats.bookmarks);
                debug!(rv = ?self.resource_version, "api server bookmark");
            }
            other => debug!(kind = other, "unknown watch event ignored"),
        }
        Ok(())
    }

    /// Converts one pod object and puts it in the cache; its uid when that worked.
    fn apply(&self, object: &RawValue) -> Option<String> {
        match to_pod_spec(object) {
            Ok(spec) => {
                let uid = spec.uid.clone();
                self.cache.insert_with(spec, pod_meta(object));
                Some(uid)
            }
            Err(reason) => {
                warn!(reason = %reason, "pod from the api server ignored");
                None
            }
        }
    }
}

/// A v1 Pod JSON object as the decision core's pod (with API defaulting).
pub fn to_pod_spec(object: &RawValue) -> Result<PodSpec, String> {
    let pod: Pod = serde_json::from_str(object.get()).map_err(|e| e.to_string())?;
    pod.to_pod_spec()
        .map_err(|e| format!("pod {}: {e}", pod.key()))
}

/// The pod's creation time and phase (what the device plugin front orders pods by).
fn pod_meta(object: &RawValue) -> super::PodMeta {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Meta {
        metadata: MetaFields,
        status: StatusFields,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct MetaFields {
        creation_timestamp: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct StatusFields {
        phase: Option<String>,
    }
    let meta: Meta = serde_json::from_str(object.get()).unwrap_or_default();
    super::PodMeta::from_api(
        meta.metadata.creation_timestamp.as_deref(),
        meta.status.phase.as_deref(),
    )
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests;

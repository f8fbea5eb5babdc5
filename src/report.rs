//! Refusal reports: what numa-shim tells the API server about a pod it refused, so that the user
//! sees what the kubelet's own refusal shows (docs/refusals.md has the why). For each refused
//! pod: a Warning Event with the kubelet's reason and message (`kubectl describe pod`), and, for
//! a RunPodSandbox refusal of an API pod of this node of which nothing ever ran, the status the
//! kubelet's `rejectPod` writes: phase Failed, the reason, "Pod was rejected: <message>". The
//! kubelet sees the terminal phase in the API, stops its pod worker and sends no more
//! RunPodSandbox. A refusal repeated (the status could not be written, or the kubelet has not
//! seen it yet) bumps the Event's count.
//!
//! The hook hands refusals over without waiting ([`Reporter::refused`]); one task writes them,
//! one at a time, over the `knowledge::apiserver` connection. Never blocks or fails a CRI call,
//! never decides placement, never writes to a pod whose UID it did not check.

mod objects;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ::http::Method;
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

pub use objects::{ApiPod, Target, MIRROR_ANNOTATION};

use crate::knowledge::apiserver::http::{self, Body};
use crate::knowledge::apiserver::{ApiServerError, Connection};

/// How many refusals may wait for the writer; more are dropped (and counted).
const QUEUE: usize = 256;
/// Attempts per write when the API server is unreachable or overloaded.
const ATTEMPTS: u32 = 4;
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// A pod not refused again for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// What numa-shim writes to the API server about pods it refuses (`refusalReports`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ReportMode {
    /// Nothing: the refusal is in numa-shim's log and the kubelet's FailedCreatePodSandBox Event.
    None,
    /// A Warning Event with the kubelet's reason and message.
    Events,
    /// The Event, and the pod ended Failed as the kubelet ends pods it refuses.
    EventsAndStatus,
}

/// Refusal reports as configured: the mode (never `None` here) and how to reach the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    pub mode: ReportMode,
    pub api: crate::knowledge::apiserver::ApiServerOptions,
}

/// Where in the pod's life numa-shim refused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// RunPodSandbox: the pod's admission (the kubelet's own refusals happen here).
    Admission,
    /// CreateContainer of a pod whose sandbox runs (inferred pods only).
    Container,
    /// An in-place resize of a running pod (UpdateContainerResources /
    /// UpdatePodSandboxResources): an Event only, the pod runs on.
    Resize,
}

/// One refusal, as the hook saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The kubelet's reason, e.g. `TopologyAffinityError`.
    pub reason: String,
    /// The kubelet's message, e.g. `Resources cannot be allocated with Topology locality`.
    pub message: String,
    pub stage: Stage,
}

/// What the writer did: counters for metrics and tests.
#[derive(Debug, Default)]
pub struct ReportStats {
    /// Events created.
    pub events: AtomicU64,
    /// Events whose count was bumped by a repeated refusal.
    pub repeats: AtomicU64,
    /// Pods ended Failed.
    pub statuses: AtomicU64,
    /// Refusals written nothing for: the pod is gone or another pod has its name.
    pub skipped: AtomicU64,
    /// Writes that failed for good (after retries, or refused by the API server).
    pub failures: AtomicU64,
    /// Refusals dropped because the queue was full.
    pub dropped: AtomicU64,
}

impl ReportStats {
    /// The counters by the names `numa_shim_refusal_reports_total` labels them with.
    pub fn rows(&self) -> [(&'static str, u64); 6] {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("event", n(&self.events)),
            ("repeat", n(&self.repeats)),
            ("status", n(&self.statuses)),
            ("skipped", n(&self.skipped)),
            ("failure", n(&self.failures)),
            ("dropped", n(&self.dropped)),
        ]
    }

    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The hook's end of the writer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Reporter {
    tx: mpsc::Sender<Refusal>,
    stats: Arc<ReportStats>,
}

impl Reporter {
    /// Hands a refusal to the writer without waiting; drops it when the queue is full.
    pub fn refused(&self, refusal: Refusal) {
        if self.tx.try_send(refusal).is_err() {
            ReportStats::count(&self.stats.dropped);
        }
    }

    pub fn stats(&self) -> &Arc<ReportStats> {
        &self.stats
    }
}

/// Starts the writer for node `node`; it runs until every [`Reporter`] is dropped.
pub fn start(
    conn: Connection,
    node: String,
    mode: ReportMode,
) -> (Reporter, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let stats = Arc::new(ReportStats::default());
    let writer = Writer {
        conn,
        node,
        mode,
        stats: stats.clone(),
        pods: HashMap::new(),
    };
    let task = tokio::spawn(writer.run(rx));
    (Reporter { tx, stats }, task)
}

/// What was written for one refused pod.
struct Reported {
    reason: String,
    message: String,
    /// The Event (namespace, name) and its count, once created.
    event: Option<(String, String)>,
    count: u32,
    /// Whether the pod's status was written (or must never be).
    status_done: bool,
    last: Instant,
}

struct Writer {
    conn: Connection,
    node: String,
    mode: ReportMode,
    stats: Arc<ReportStats>,
    pods: HashMap<String, Reported>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<Refusal>) {
        while let Some(refusal) = rx.recv().await {
            let now = Instant::now();
            self.pods
                .retain(|_, r| now.duration_since(r.last) < FORGET_AFTER);
            self.report(refusal).await;
        }
    }

    async fn report(&mut self, refusal: Refusal) {
        if self.mode == ReportMode::None {
            return;
        }
        let uid = refusal.uid.clone();
        let repeated = self
            .pods
            .get(&uid)
            .is_some_and(|r| r.reason == refusal.reason && r.message == refusal.message);
        if !repeated {
            self.pods.insert(
                uid.clone(),
                Reported {
                    reason: refusal.reason.clone(),
                    message: refusal.message.clone(),
                    event: None,
                    count: 0,
                    status_done: false,
                    last: Instant::now(),
                },
            );
        }
        let target = match self.get_pod(&refusal).await {
            Ok(Some(pod)) => pod,
            Ok(None) => {
                ReportStats::count(&self.stats.skipped);
                debug!(pod = %uid, namespace = %refusal.namespace, name = %refusal.name, "refused pod not in the api server; nothing reported");
                return;
            }
            Err(err) => {
                ReportStats::count(&self.stats.failures);
                warn!(pod = %uid, error = %err, "cannot read the refused pod; nothing reported");
                return;
            }
        };
        let (pod, kind) = target;
        let event_uid = match &kind {
            Target::Pod => uid.clone(),
            Target::Mirror(mirror) => mirror.clone(),
            Target::Other => {
                ReportStats::count(&self.stats.skipped);
                debug!(pod = %uid, name = %refusal.name, "another pod has the refused pod's name; nothing reported");
                return;
            }
        };
        self.write_event(&refusal, &event_uid).await;
        let end = self.mode == ReportMode::EventsAndStatus
            && refusal.stage == Stage::Admission
            && kind == Target::Pod;
        if end && !self.pods.get(&uid).is_some_and(|r| r.status_done) {
            self.write_status(&refusal, &pod).await;
        }
    }

    /// The refused pod as the API server has it; `None` when it is gone.
    async fn get_pod(&self, refusal: &Refusal) -> Result<Option<(ApiPod, Target)>, ApiServerError> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}",
            segment(&refusal.namespace),
            segment(&refusal.name)
        );
        let body = match self.send(Method::GET, &path, None).await {
            Ok(body) => body,
            Err(ApiServerError::Status { status: 404, .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let pod: ApiPod =
            serde_json::from_slice(&body).map_err(|source| ApiServerError::Decode {
                url: format!("{}{path}", self.conn.server()),
                source,
            })?;
        let target = pod.target(&refusal.uid);
        Ok(Some((pod, target)))
    }

    async fn write_event(&mut self, refusal: &Refusal, event_uid: &str) {
        let now = SystemTime::now();
        let Some(reported) = self.pods.get_mut(&refusal.uid) else {
            return;
        };
        reported.last = Instant::now();
        reported.count += 1;
        let count = reported.count;
        let existing = reported.event.clone();
        match existing {
            Some((namespace, name)) => {
                let path = format!(
                    "/api/v1/namespaces/{}/events/{}",
                    segment(&namespace),
                    segment(&name)
                );
                let patch = objects::event_repeat(count, now);
                match self
                    .send(Method::PATCH, &path, Some(strategic(&patch)))
                    .await
                {
                    Ok(_) => ReportStats::count(&self.stats.repeats),
                    Err(err) => {
                        ReportStats::count(&self.stats.failures);
                        warn!(pod = %refusal.uid, error = %err, "refusal event not updated");
                    }
                }
            }
            None => {
                let fields = objects::EventFields {
                    namespace: &refusal.namespace,
                    pod: &refusal.name,
                    uid: event_uid,
                    reason: &refusal.reason,
                    message: &refusal.message,
                    node: &self.node,
                };
                let (name, event) = objects::event(&fields, now);
                let path = format!("/api/v1/namespaces/{}/events", segment(&refusal.namespace));
                match self.send(Method::POST, &path, Some(json(&event))).await {
                    Ok(_) => {
                        ReportStats::count(&self.stats.events);
                        info!(pod = %refusal.uid, namespace = %refusal.namespace, name = %refusal.name, reason = %refusal.reason, "refusal event written");
                        if let Some(r) = self.pods.get_mut(&refusal.uid) {
                            r.event = Some((refusal.namespace.clone(), name));
                        }
                    }
                    Err(err) => {
                        ReportStats::count(&self.stats.failures);
                        warn!(pod = %refusal.uid, error = %err, "refusal event not written");
                    }
                }
            }
        }
    }

    async fn write_status(&mut self, refusal: &Refusal, pod: &ApiPod) {
        if let Some(why) = pod.must_not_end(&self.node) {
            info!(pod = %refusal.uid, why = %why, "refused pod left as it is (event only)");
            self.status_done(&refusal.uid);
            return;
        }
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}/status",
            segment(&refusal.namespace),
            segment(&refusal.name)
        );
        let patch = objects::status_patch(&refusal.uid, &refusal.reason, &refusal.message);
        match self
            .send(Method::PATCH, &path, Some(strategic(&patch)))
            .await
        {
            Ok(_) => {
                ReportStats::count(&self.stats.statuses);
                info!(pod = %refusal.uid, reason = %refusal.reason, "refused pod ended Failed");
                self.status_done(&refusal.uid);
            }
            Err(err) => {
                ReportStats::count(&self.stats.failures);
                warn!(pod = %refusal.uid, error = %err, "refused pod status not written");
                // A UID precondition failure (409) or a refusal by the server is final.
                if !transient(&err) {
                    self.status_done(&refusal.uid);
                }
            }
        }
    }

    fn status_done(&mut self, uid: &str) {
        if let Some(r) = self.pods.get_mut(uid) {
            r.status_done = true;
        }
    }

    /// One request with retries while the server is unreachable or overloaded; the body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<bytes::Bytes, ApiServerError> {
        let mut delay = RETRY_FIRST;
        let mut attempt = 1;
        loop {
            let request = body.clone().map(|(content_type, bytes)| Body {
                content_type,
                bytes,
            });
            let result = match http::request(&self.conn, method.clone(), path, request).await {
                Ok(response) => response
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .map_err(|source| ApiServerError::Http {
                        url: format!("{}{path}", self.conn.server()),
                        source,
                    }),
                Err(err) => Err(err),
            };
            match result {
                Err(err) if transient(&err) && attempt < ATTEMPTS => {
                    debug!(error = %err, attempt, "api server write retried");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Whether trying again later may succeed.
fn transient(err: &ApiServerError) -> bool {
    match err {
        ApiServerError::Connect { .. }
        | ApiServerError::Tls { .. }
        | ApiServerError::Http { .. } => true,
        ApiServerError::Status { status, .. } => *status == 429 || *status >= 500,
        _ => false,
    }
}

fn json(value: &serde_json::Value) -> (&'static str, Vec<u8>) {
    ("application/json", value.to_string().into_bytes())
}

fn strategic(value: &serde_json::Value) -> (&'static str, Vec<u8>) {
    (
        "application/strategic-merge-patch+json",
        value.to_string().into_bytes(),
    )
}

/// Percent-encodes a path segment (names are DNS labels/subdomains; this is only a guard).
fn segment(value: &str) -> String {
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

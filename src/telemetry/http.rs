//! The operator's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (200 while the process
//! serves), `/readyz` (200 only once start-up reconciliation has marked the process ready) and
//! `/placement` (the live placement as JSON, from a provider the caller plugs in, so this module
//! stays ignorant of placement).
//!
//! Owns one TCP listener (default `127.0.0.1:9464`) and its connections. Must never touch the CRI
//! path: a slow or stuck scraper cannot delay a kubelet call, and nothing here changes state
//! other than reading [`Metrics`] and [`Readiness`].

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::metrics::{Metrics, CONTENT_TYPE};

/// Where the endpoint listens unless configured otherwise (`metricsAddress`).
pub const DEFAULT_ADDRESS: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9464));

/// How long in-flight requests may finish after shutdown was asked for.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of the HTTP endpoint.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The listening socket could not be opened.
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// The bound socket has no local address.
    #[error("cannot read the metrics listener's address: {0}")]
    LocalAddr(#[source] io::Error),
}

/// What `/readyz` answers: ready once start-up marked it so and while no check reports a
/// problem (each check returns why it is not ready, e.g. the state cannot be written). Clones
/// share the flag and the checks.
#[derive(Clone, Default)]
pub struct Readiness(Arc<ReadinessInner>);

/// A readiness condition: `Some(reason)` while it is not met.
pub type ReadinessCheck = Arc<dyn Fn() -> Option<String> + Send + Sync>;

#[derive(Default)]
struct ReadinessInner {
    ready: AtomicBool,
    checks: std::sync::Mutex<Vec<ReadinessCheck>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("ready", &self.0.ready.load(Ordering::Acquire))
            .field("problems", &self.problems())
            .finish()
    }
}

/// Answers `GET /placement`: the JSON body, or `None` while placement is not running yet.
/// Asynchronous: the view may ask the kubelet for its devices after reading the registry.
pub type PlacementProvider =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send + Sync>;

/// A bound, not yet serving, metrics endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: Arc<State>,
}

struct State {
    metrics: Arc<Metrics>,
    readiness: Readiness,
    placement: Option<PlacementProvider>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("metrics", &self.metrics)
            .field("readiness", &self.readiness)
            .field("placement", &self.placement.is_some())
            .finish()
    }
}

impl Readiness {
    /// A flag that starts not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Start-up reconciliation is done: `/readyz` answers 200 from now on (while every check
    /// passes).
    pub fn mark_ready(&self) {
        self.0.ready.store(true, Ordering::Release);
    }

    /// `/readyz` answers 503 again (e.g. while re-reconciling after losing the runtime).
    pub fn mark_not_ready(&self) {
        self.0.ready.store(false, Ordering::Release);
    }

    /// Adds a condition `/readyz` asks on every request.
    pub fn add_check(&self, check: ReadinessCheck) {
        self.lock_checks().push(check);
    }

    /// Why the checks say not ready, in the order they were added.
    pub fn problems(&self) -> Vec<String> {
        let checks = self.lock_checks().clone();
        checks.iter().filter_map(|check| check()).collect()
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::Acquire) && self.problems().is_empty()
    }

    fn lock_checks(&self) -> std::sync::MutexGuard<'_, Vec<ReadinessCheck>> {
        self.0
            .checks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port; see [`Self::local_addr`]).
    pub async fn bind(
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        readiness: Readiness,
    ) -> Result<Self, HttpError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        let local_addr = listener.local_addr().map_err(HttpError::LocalAddr)?;
        let state = Arc::new(State {
            metrics,
            readiness,
            placement: None,
        });
        Ok(Self {
            listener,
            local_addr,
            state,
        })
    }

    /// Serves `GET /placement` from `provider` (404 without one).
    pub fn with_placement(mut self, provider: PlacementProvider) -> Self {
        self.state = Arc::new(State {
            metrics: Arc::clone(&self.state.metrics),
            readiness: self.state.readiness.clone(),
            placement: Some(provider),
        });
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes, then stops accepting, lets in-flight requests finish
    /// (for at most 5 s) and returns.
    pub async fn serve<F>(self, shutdown: F)
    where
        F: Future<Output = ()> + Send,
    {
        info!(addr = %self.local_addr, "serving metrics, healthz and readyz");
        let (stop_tx, stop_rx) = watch::channel(());
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        debug!(%peer, "metrics connection");
                        let state = Arc::clone(&self.state);
                        connections.spawn(serve_connection(stream, state, stop_rx.clone()));
                    }
                    Err(err) => {
                        warn!(error = %err, "metrics accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(self.listener);
        let _ = stop_tx.send(());
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!(
                left = connections.len(),
                "metrics connections cut at shutdown"
            );
        }
        info!(addr = %self.local_addr, "metrics endpoint stopped");
    }
}

async fn serve_connection(stream: TcpStream, state: Arc<State>, mut stop: watch::Receiver<()>) {
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let state = Arc::clone(&state);
        let (method, path) = (request.method().clone(), request.uri().path().to_string());
        async move { Ok::<_, Infallible>(answer(&state, &method, &path).await) }
    });
    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = stop.changed() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = result {
        debug!(error = %err, "metrics connection ended with an error");
    }
}

/// Answers one request: `/placement` from its provider, everything else by [`route`].
async fn answer(state: &State, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if path == "/placement" && (method == Method::GET || method == Method::HEAD) {
        return placement(state.placement.as_ref()).await;
    }
    route(state, method, path)
}

/// Answers one request; pure apart from reading the metrics and the flag.
fn route(state: &State, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match path {
        "/metrics" => {
            let body = state.metrics.render();
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(CONTENT_TYPE),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readyz(&state.readiness),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// 200 "ok", 503 "not ready" before start-up is done, or 503 with each failing check's reason.
fn readyz(readiness: &Readiness) -> Response<Full<Bytes>> {
    if !readiness.0.ready.load(Ordering::Acquire) {
        return text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n");
    }
    let problems = readiness.problems();
    if problems.is_empty() {
        return text(StatusCode::OK, "ok\n");
    }
    let mut body = String::from("not ready:\n");
    for problem in problems {
        body.push_str(&problem);
        body.push('\n');
    }
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, "");
    *response.body_mut() = Full::new(Bytes::from(body));
    response
}

async fn placement(provider: Option<&PlacementProvider>) -> Response<Full<Bytes>> {
    let Some(provider) = provider else {
        return text(
            StatusCode::NOT_FOUND,
            "placement is off (both resource managers are none)\n",
        );
    };
    match provider().await {
        Some(json) => {
            let mut response = Response::new(Full::new(Bytes::from(json)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
        None => text(StatusCode::SERVICE_UNAVAILABLE, "placement is starting\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests;

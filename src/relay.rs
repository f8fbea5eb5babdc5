//! The transparent CRI relay: an HTTP/2 gRPC server on a unix socket that forwards every call to
//! the container runtime over one multiplexed HTTP/2 connection.
//!
//! Calls are routed by path. RunPodSandbox, CreateContainer, UpdateContainerResources and
//! UpdatePodSandboxResources are decoded and offered to a [`Hook`] (which may patch or reject
//! them); StopPodSandbox, RemovePodSandbox, StopContainer and RemoveContainer are decoded only so
//! the hook can observe their outcome. Everything else — unary or streaming, known or unknown
//! method or service — passes as raw HTTP/2 frames with headers, trailers and status untouched.
//! Before h2 sees a client's bytes, [`AuthorityFilter`] makes a socket-path `:authority` (grpc
//! C-core, grpc-java) acceptable; a caller's deadline or hang-up cancels the runtime call and
//! `settle` asks the runtime what it did. [`LifecycleHook`] is the hook `serve` plugs in: the pod
//! lifecycle (`crate::lifecycle`) behind it, fed plain outcomes, never CRI answers.
//!
//! Invariants: a request is never re-encoded from its decoded form (patches are appended on the
//! wire); a runtime response is never altered; the relay holds no lock across a runtime call;
//! a runtime that cannot be reached yields UNAVAILABLE, never a silent bypass.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::task::JoinSet;
use tracing::{debug, debug_span, info, warn, Instrument};

mod authority;
mod error;
pub(crate) mod grpc;
mod hook;
mod intercept;
mod lifecycle_hook;
mod passthrough;
mod patch;
mod settle;
mod upstream;

pub use crate::listen::SocketOptions;
pub use authority::AuthorityFilter;
pub use error::RelayError;
pub use hook::{
    CriRequest, CriResponse, Decision, Hook, Method, NoopHook, Outcome, Patch, ResourcesPatch,
};
pub use lifecycle_hook::{Decided, LifecycleHook};
pub use settle::{DEFAULT_SETTLE_DELAY, DEFAULT_SETTLE_LIMIT};

use crate::telemetry::Metrics;
use crate::transport::limits;
use grpc::RelayBody;
use upstream::Upstream;

/// Largest intercepted message collected in memory (passthrough bodies are never collected).
pub const DEFAULT_MAX_MESSAGE: usize = crate::transport::limits::DEFAULT_MAX_RELAYED_MESSAGE;
/// How long in-flight calls may run after shutdown was requested.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Configures and binds a [`Relay`].
#[derive(Debug, Clone)]
pub struct RelayBuilder<H = NoopHook> {
    listen: PathBuf,
    runtime: PathBuf,
    socket: SocketOptions,
    hook: H,
    max_message: usize,
    shutdown_grace: Duration,
    metrics: Option<Arc<Metrics>>,
    settle: settle::Settle,
}

/// A relay bound to its socket, ready to serve.
#[derive(Debug)]
pub struct Relay<H> {
    bound: crate::listen::Bound,
    shared: Arc<Shared<H>>,
    shutdown_grace: Duration,
}

/// State shared by every call.
#[derive(Debug)]
pub(crate) struct Shared<H> {
    pub(crate) upstream: Upstream,
    pub(crate) hook: H,
    pub(crate) max_message: usize,
    /// Where per-call latency and the runtime's reachability are recorded, if anywhere.
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// How calls cut off by a deadline or hang-up are settled with the runtime.
    pub(crate) settle: settle::Settle,
}

impl RelayBuilder<NoopHook> {
    /// A relay listening on `listen` and forwarding to the runtime socket `runtime`.
    pub fn new(listen: impl Into<PathBuf>, runtime: impl Into<PathBuf>) -> Self {
        Self {
            listen: listen.into(),
            runtime: runtime.into(),
            socket: SocketOptions::default(),
            hook: NoopHook,
            max_message: DEFAULT_MAX_MESSAGE,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            metrics: None,
            settle: settle::Settle::default(),
        }
    }
}

impl<H: Hook> RelayBuilder<H> {
    /// Uses `hook` for intercepted and observed calls.
    pub fn hook<H2: Hook>(self, hook: H2) -> RelayBuilder<H2> {
        RelayBuilder {
            listen: self.listen,
            runtime: self.runtime,
            socket: self.socket,
            hook,
            max_message: self.max_message,
            shutdown_grace: self.shutdown_grace,
            metrics: self.metrics,
            settle: self.settle,
        }
    }

    /// How long a runtime may take to act on a call after numa-shim cancelled it (default
    /// [`DEFAULT_SETTLE_DELAY`]): a reservation of a call cut off by the caller's deadline or
    /// hang-up is released only if the runtime lists nothing of it at the cancel and again
    /// this long after.
    pub fn settle_delay(mut self, delay: Duration) -> Self {
        self.settle.delay = delay;
        self
    }

    /// Longest time after a cut-off a reservation is kept while the runtime does not say what
    /// it did with the call (default [`DEFAULT_SETTLE_LIMIT`]); then it is released.
    pub fn settle_limit(mut self, limit: Duration) -> Self {
        self.settle.limit = limit;
        self
    }

    /// How long each of those lookups may take before it is asked again (default 5 s).
    pub fn settle_lookup_timeout(mut self, timeout: Duration) -> Self {
        self.settle.timeout = timeout;
        self
    }

    /// Records every call's time in numa-shim and in the runtime, and whether the runtime
    /// answers, in `metrics`.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Mode and group of the listening socket (default `0660`, process group).
    pub fn socket_options(mut self, options: SocketOptions) -> Self {
        self.socket = options;
        self
    }

    /// Largest intercepted message accepted (default [`DEFAULT_MAX_MESSAGE`]).
    pub fn max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Grace period for in-flight calls on shutdown (default [`DEFAULT_SHUTDOWN_GRACE`]).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Binds the listening socket. The runtime is dialled on the first call, not here.
    pub async fn bind(self) -> Result<Relay<H>, RelayError> {
        let bound = crate::listen::bind(&self.listen, self.socket).await?;
        Ok(Relay {
            bound,
            shared: Arc::new(Shared {
                upstream: Upstream::new(self.runtime),
                hook: self.hook,
                max_message: self.max_message,
                metrics: self.metrics,
                settle: self.settle,
            }),
            shutdown_grace: self.shutdown_grace,
        })
    }
}

impl<H: Hook> Relay<H> {
    /// The listening socket path.
    pub fn path(&self) -> &Path {
        &self.bound.path
    }

    /// The runtime socket path.
    pub fn runtime(&self) -> &Path {
        self.shared.upstream.path()
    }

    /// Serves until `shutdown` completes, then stops accepting, lets in-flight calls finish for
    /// the grace period, cuts the rest, and removes the socket file if it is still ours.
    pub async fn serve_with_shutdown(self, shutdown: impl Future<Output = ()>) {
        let graceful = GracefulShutdown::new();
        let mut connections = JoinSet::new();
        let builder = server_builder();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.bound.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let shared = self.shared.clone();
                        let service = service_fn(move |req| dispatch(shared.clone(), req));
                        // `:authority` made acceptable to h2 before h2 parses it (grpc C-core
                        // and grpc-java send the socket path).
                        let io = TokioIo::new(AuthorityFilter::new(stream));
                        let conn = builder.serve_connection(io, service);
                        let conn = graceful.watch(conn);
                        connections.spawn(async move {
                            if let Err(err) = conn.await {
                                debug!(error = %err, "client connection ended with error");
                            }
                        });
                    }
                    Err(err) => {
                        warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        let in_flight = graceful.count();
        info!(
            connections = in_flight,
            grace_ms = self.shutdown_grace.as_millis(),
            "shutting down"
        );
        self.bound.close();
        if tokio::time::timeout(self.shutdown_grace, graceful.shutdown())
            .await
            .is_err()
        {
            warn!("grace period over, cutting remaining calls");
        }
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        info!("stopped");
    }
}

/// HTTP/2 server settings: windows sized for 16 MiB CRI messages, grpc-go's header limit, no
/// stream limit (grpc-go's default; the kubelet multiplexes everything on one connection), and
/// no `date` header added to the runtime's answers (hyper's default; grpc-go runtimes send
/// none, and encoding one costs every call).
fn server_builder() -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .auto_date_header(false)
        .initial_stream_window_size(limits::STREAM_WINDOW)
        .initial_connection_window_size(limits::CONNECTION_WINDOW)
        .max_frame_size(limits::MAX_FRAME)
        .max_header_list_size(upstream::MAX_HEADER_LIST)
        .max_concurrent_streams(None);
    builder
}

/// Routes one call and records it in its own span.
async fn dispatch<H: Hook>(
    shared: Arc<Shared<H>>,
    req: Request<Incoming>,
) -> Result<Response<RelayBody>, Infallible> {
    // Cloning the URI shares its (reference-counted) buffers instead of copying the path.
    let uri = req.uri().clone();
    let path = uri.path();
    let span = debug_span!("cri", method = path);
    async move {
        let started = Instant::now();
        let (response, runtime) = match Method::from_path(path) {
            Some(method) => intercept::handle(shared.clone(), method, req).await,
            None => passthrough::forward(&shared, path, req).await,
        };
        if let Some(metrics) = &shared.metrics {
            let total = started.elapsed();
            let method = path.rsplit('/').next().unwrap_or_default();
            metrics.record_relay(
                method,
                total.saturating_sub(runtime).as_secs_f64(),
                runtime.as_secs_f64(),
            );
        }
        debug!(
            elapsed_us = started.elapsed().as_micros(),
            grpc_status = ?response.headers().get("grpc-status"),
            "answered"
        );
        Ok(response)
    }
    .instrument(span)
    .await
}

impl<H> Shared<H> {
    /// Records whether the runtime could be reached for a call.
    pub(crate) fn runtime_answered<T>(&self, result: &Result<T, RelayError>) {
        if let Some(metrics) = &self.metrics {
            let unreachable = matches!(
                result,
                Err(RelayError::RuntimeUnavailable { .. } | RelayError::RuntimeHandshake { .. })
            );
            metrics.set_runtime_connected(!unreachable);
        }
    }
}

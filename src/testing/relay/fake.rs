//! Test support: an in-process fake container runtime (tonic RuntimeService + ImageService on
//! a unix socket) that records the raw bytes and headers of every request it receives. Used
//! by tests/relay and tests/e2e.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::proto::cri::v1 as cri;
use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use cri::image_service_server::{ImageService, ImageServiceServer};
use cri::runtime_service_server::{RuntimeService, RuntimeServiceServer};

use crate::testing::served::Served;

type BoxStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Paths the recorder answers itself, echoing the request: a method and a service the fake
/// runtime's schema does not have.
pub const FUTURE_METHOD: &str = "/runtime.v1.RuntimeService/FutureMethod";
pub const FUTURE_SERVICE: &str = "/future.v9.FutureService/Echo";
/// Number of messages the streaming methods send.
pub const EVENTS: usize = 50;
pub const STREAMED: usize = 20;
pub const MAX: usize = 64 << 20;

/// One request as the runtime received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Everything the fake runtime received, in order.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Seen>>>);

impl Log {
    pub fn for_path(&self, path: &str) -> Vec<Seen> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The fake runtime's RuntimeService: fixed answers keyed by ids (see each method).
///
/// Sandboxes and containers it creates are listed by ListPodSandbox / ListContainers. Names
/// (sandbox name, container name) that model bad days: `hang` never answers; `late-<ms>`
/// creates the object after that many ms even if the call was cancelled meanwhile (a runtime
/// that does not stop at a cancel). A CreateContainer for sandbox id `slow-<ms>` waits in the
/// call, so a cancel stops it.
#[derive(Debug, Clone, Default)]
pub struct FakeRuntime {
    pub created: Arc<Mutex<Vec<cri::CreateContainerRequest>>>,
    pub sandboxes: Arc<Mutex<Vec<cri::PodSandbox>>>,
    pub containers: Arc<Mutex<Vec<cri::Container>>>,
    /// While set, ListPodSandbox and ListContainers never answer.
    pub lists_hang: Arc<AtomicBool>,
    /// Calls dropped before they answered (the caller reset the stream).
    pub cancelled: Arc<AtomicUsize>,
    /// While set, every call that arrives never answers, whatever its method and its
    /// `grpc-timeout` (only [`Runtime::start_without_deadlines`]; a runtime wedged for good).
    pub hang_all: Arc<AtomicBool>,
    /// Calls whose handler has not finished, by path (only [`Runtime::start_without_deadlines`]):
    /// a call leaves when it answered or when numa-shim reset its stream.
    pub open: Arc<Mutex<std::collections::BTreeMap<String, usize>>>,
}

/// Counts a call that is dropped before it answered (only hanging calls hold one).
struct CountCancel(Arc<AtomicUsize>);

impl Drop for CountCancel {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Holds one call in [`FakeRuntime::open`] while it lives.
struct Open {
    open: Arc<Mutex<std::collections::BTreeMap<String, usize>>>,
    path: String,
}

impl Open {
    fn new(fake: &FakeRuntime, path: &str) -> Self {
        *fake
            .open
            .lock()
            .unwrap()
            .entry(path.to_string())
            .or_default() += 1;
        Self {
            open: fake.open.clone(),
            path: path.to_string(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap();
        if let Some(n) = open.get_mut(&self.path) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.path);
            }
        }
    }
}

impl FakeRuntime {
    /// Calls open now (see [`FakeRuntime::open`]), by path.
    pub fn open_calls(&self) -> std::collections::BTreeMap<String, usize> {
        self.open.lock().unwrap().clone()
    }

    /// Number of calls open now.
    pub fn open_total(&self) -> usize {
        self.open.lock().unwrap().values().sum()
    }

    /// Waits for `ms` in a task of its own, then runs `create`: it happens even if the call
    /// that asked for it is cancelled.
    async fn late<T: Send + 'static>(ms: u64, create: impl FnOnce() -> T + Send + 'static) -> T {
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            create()
        });
        task.await.unwrap()
    }

    async fn hang(&self) -> ! {
        let _guard = CountCancel(self.cancelled.clone());
        std::future::pending::<()>().await;
        unreachable!()
    }

    async fn lists(&self) {
        if self.lists_hang.load(Ordering::SeqCst) {
            let _guard = CountCancel(self.cancelled.clone());
            std::future::pending::<()>().await;
        }
    }
}

fn details() -> Bytes {
    Bytes::from_static(b"\x08\x05\x12\x0bdetail-blob")
}

#[tonic::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(
        &self,
        request: Request<cri::VersionRequest>,
    ) -> Result<Response<cri::VersionResponse>, Status> {
        let custom = request.metadata().get("x-custom").cloned();
        let mut response = Response::new(cri::VersionResponse {
            version: request.into_inner().version,
            runtime_name: "fake-runtime".into(),
            runtime_version: "1.0".into(),
            runtime_api_version: "v1".into(),
        });
        if let Some(v) = custom {
            response.metadata_mut().insert("x-echo-custom", v);
        }
        Ok(response)
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        let metadata = request.into_inner().config.and_then(|c| c.metadata);
        let name = metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let id = format!("sb-{name}");
        let record = {
            let (sandboxes, id, metadata) = (self.sandboxes.clone(), id.clone(), metadata);
            move || {
                sandboxes.lock().unwrap().push(cri::PodSandbox {
                    id,
                    metadata,
                    ..Default::default()
                })
            }
        };
        if name == "hang" {
            self.hang().await;
        }
        match name.strip_prefix("late-").and_then(|m| m.parse().ok()) {
            Some(ms) => Self::late(ms, record).await,
            None => record(),
        }
        Ok(Response::new(cri::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn create_container(
        &self,
        request: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        let req = request.into_inner();
        self.created.lock().unwrap().push(req.clone());
        let metadata = req.config.as_ref().and_then(|c| c.metadata.clone());
        let name = metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        if req.pod_sandbox_id == "hang" || name == "hang" {
            self.hang().await;
        }
        let id = format!("ctr-{name}");
        let record = {
            let containers = self.containers.clone();
            let (id, sandbox) = (id.clone(), req.pod_sandbox_id.clone());
            move || {
                containers.lock().unwrap().push(cri::Container {
                    id,
                    pod_sandbox_id: sandbox,
                    metadata,
                    ..Default::default()
                })
            }
        };
        if let Some(ms) = name.strip_prefix("late-").and_then(|m| m.parse().ok()) {
            Self::late(ms, record).await;
            return Ok(Response::new(cri::CreateContainerResponse {
                container_id: id,
            }));
        }
        if let Some(ms) = req
            .pod_sandbox_id
            .strip_prefix("slow-")
            .and_then(|m| m.parse().ok())
        {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if req.pod_sandbox_id == "fail" {
            return Err(Status::with_details(
                tonic::Code::FailedPrecondition,
                "sandbox \"fail\" is gone",
                details(),
            ));
        }
        record();
        Ok(Response::new(cri::CreateContainerResponse {
            container_id: id,
        }))
    }

    async fn list_pod_sandbox(
        &self,
        _request: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        self.lists().await;
        let items = self.sandboxes.lock().unwrap().clone();
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn list_containers(
        &self,
        request: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        self.lists().await;
        let sandbox = request
            .into_inner()
            .filter
            .map(|f| f.pod_sandbox_id)
            .unwrap_or_default();
        let containers = self
            .containers
            .lock()
            .unwrap()
            .iter()
            .filter(|c| sandbox.is_empty() || c.pod_sandbox_id == sandbox)
            .cloned()
            .collect();
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn update_container_resources(
        &self,
        _request: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Result<Response<cri::UpdateContainerResourcesResponse>, Status> {
        Ok(Response::new(cri::UpdateContainerResourcesResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<cri::StopContainerRequest>,
    ) -> Result<Response<cri::StopContainerResponse>, Status> {
        match request.into_inner().container_id.as_str() {
            "missing" => Err(Status::not_found("container \"missing\" not found")),
            _ => Ok(Response::new(cri::StopContainerResponse {})),
        }
    }

    async fn remove_container(
        &self,
        request: Request<cri::RemoveContainerRequest>,
    ) -> Result<Response<cri::RemoveContainerResponse>, Status> {
        match request.into_inner().container_id.as_str() {
            "missing" => Err(Status::not_found("container \"missing\" not found")),
            _ => Ok(Response::new(cri::RemoveContainerResponse {})),
        }
    }

    async fn stop_pod_sandbox(
        &self,
        _request: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        _request: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    /// `missing` → NotFound with details and metadata; `unimpl` → Unimplemented; `deadline` →
    /// DeadlineExceeded with details; `slow-<ms>` → answers after that many ms.
    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        match id.as_str() {
            "missing" => {
                let mut md = tonic::metadata::MetadataMap::new();
                md.insert("x-err", "yes".parse().unwrap());
                return Err(Status::with_details_and_metadata(
                    tonic::Code::NotFound,
                    "container \"missing\": not found",
                    details(),
                    md,
                ));
            }
            "unimpl" => return Err(Status::unimplemented("not here, sorry")),
            "deadline" => {
                return Err(Status::with_details(
                    tonic::Code::DeadlineExceeded,
                    "took too long",
                    details(),
                ))
            }
            _ => {}
        }
        if let Some(ms) = id.strip_prefix("slow-").and_then(|m| m.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(cri::ContainerStatus {
                id,
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    /// Echoes the command bytes as stdout (large-message test).
    async fn exec_sync(
        &self,
        request: Request<cri::ExecSyncRequest>,
    ) -> Result<Response<cri::ExecSyncResponse>, Status> {
        let req = request.into_inner();
        Ok(Response::new(cri::ExecSyncResponse {
            stdout: req.cmd.concat().into_bytes(),
            stderr: Vec::new(),
            exit_code: 0,
        }))
    }

    async fn get_container_events(
        &self,
        _request: Request<cri::GetEventsRequest>,
    ) -> Result<Response<BoxStream<cri::ContainerEventResponse>>, Status> {
        let events = (0..EVENTS).map(|i| {
            Ok(cri::ContainerEventResponse {
                container_id: format!("c{i}"),
                created_at: i as i64,
                ..Default::default()
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    async fn stream_containers(
        &self,
        _request: Request<cri::StreamContainersRequest>,
    ) -> Result<Response<BoxStream<cri::StreamContainersResponse>>, Status> {
        let pages = (0..STREAMED).map(|i| {
            Ok(cri::StreamContainersResponse {
                containers: vec![cri::Container {
                    id: format!("k{i}"),
                    ..Default::default()
                }],
            })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(pages))))
    }
}

/// The fake ImageService: answers ImageFsInfo and ListImages.
#[derive(Debug, Clone, Default)]
pub struct FakeImages;

#[tonic::async_trait]
impl ImageService for FakeImages {
    async fn image_fs_info(
        &self,
        _request: Request<cri::ImageFsInfoRequest>,
    ) -> Result<Response<cri::ImageFsInfoResponse>, Status> {
        Ok(Response::new(cri::ImageFsInfoResponse {
            image_filesystems: vec![cri::FilesystemUsage {
                timestamp: 7,
                ..Default::default()
            }],
            container_filesystems: vec![],
        }))
    }
}

/// Records every request's path, headers and raw body, then hands it on; answers the
/// `FUTURE_*` paths itself with an echo, a custom header and a custom trailer.
#[derive(Debug, Clone)]
struct Record<S> {
    inner: S,
    log: Log,
}

#[derive(Debug, Clone)]
struct RecordLayer(Log);

impl<S> tower::Layer<S> for RecordLayer {
    type Service = Record<S>;
    fn layer(&self, inner: S) -> Record<S> {
        Record {
            inner,
            log: self.0.clone(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for Record<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let inner = self.inner.clone();
        let log = self.log.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let path = parts.uri.path().to_string();
            log.0.lock().unwrap().push(Seen {
                path: path.clone(),
                headers: parts.headers.clone(),
                body: body.clone(),
            });
            if path == FUTURE_METHOD || path == FUTURE_SERVICE {
                return Ok(echo(body));
            }
            if let Some(answer) = parts.headers.get(ANSWER).and_then(|v| v.to_str().ok()) {
                if let Some(response) = crafted(answer) {
                    return Ok(response);
                }
            }
            let req = http::Request::from_parts(parts, tonic::body::Body::new(full(body)));
            tower::ServiceExt::oneshot(inner, req).await
        })
    }
}

/// Request header that makes the fake runtime answer with a hand-made response of a given frame
/// shape: `<shape>:<code>` with shape `trailers-only` (one HEADERS frame with the status and
/// END_STREAM, as grpc-go answers errors), `headers-trailers` (response headers, then trailers,
/// no DATA) or `body-trailers` (headers, one empty response message, trailers), and code the
/// numeric grpc-status. Every answer carries a message, details and metadata.
pub const ANSWER: &str = "x-fake-answer";

/// The status message crafted answers carry (grpc-message, percent-encoded on the wire).
pub const CRAFTED_MESSAGE: &str = "crafted: 100% \"odd\" message\n";

fn crafted(answer: &str) -> Option<http::Response<tonic::body::Body>> {
    let (shape, code) = answer.split_once(':')?;
    let code: i32 = code.parse().ok()?;
    let mut status = http::HeaderMap::new();
    status.insert("grpc-status", code.to_string().parse().unwrap());
    if code != 0 {
        let status_value =
            Status::with_details(tonic::Code::from(code), CRAFTED_MESSAGE, details());
        status_value.add_header(&mut status).unwrap();
        status.insert("grpc-status", code.to_string().parse().unwrap());
    }
    status.insert("x-status-meta", "s".parse().unwrap());
    status.insert("x-bin-meta-bin", "AAEC".parse().unwrap());
    let mut head = http::Response::builder()
        .header("content-type", "application/grpc")
        .header("x-head-meta", "h");
    let body = match shape {
        "trailers-only" => {
            for (k, v) in &status {
                head = head.header(k, v);
            }
            tonic::body::Body::empty()
        }
        "headers-trailers" => tonic::body::Body::new(StreamBody::new(tokio_stream::iter(vec![
            Ok::<_, Infallible>(Frame::trailers(status)),
        ]))),
        "body-trailers" => tonic::body::Body::new(StreamBody::new(tokio_stream::iter(vec![
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
            Ok(Frame::trailers(status)),
        ]))),
        _ => return None,
    };
    Some(head.body(body).unwrap())
}

fn full(data: Bytes) -> http_body_util::Full<Bytes> {
    http_body_util::Full::new(data)
}

fn echo(body: Bytes) -> http::Response<tonic::body::Body> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    trailers.insert("x-trailer", "kept".parse().unwrap());
    let frames = vec![
        Ok::<_, Infallible>(Frame::data(body)),
        Ok(Frame::trailers(trailers)),
    ];
    let mut response = http::Response::new(tonic::body::Body::new(StreamBody::new(
        tokio_stream::iter(frames),
    )));
    response
        .headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    response
        .headers_mut()
        .insert("x-future", "yes".parse().unwrap());
    response
}

/// A running fake runtime.
pub struct Runtime {
    pub path: PathBuf,
    pub log: Log,
    pub fake: FakeRuntime,
    served: Served,
    /// The connections served now (only [`Runtime::start_without_deadlines`]).
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Runtime {
    /// Starts the fake runtime on `path` (removing a leftover socket file first).
    pub async fn start(path: &Path) -> Self {
        let log = Log::default();
        let fake = FakeRuntime::default();
        let server = Server::builder()
            .layer(RecordLayer(log.clone()))
            .add_service(
                RuntimeServiceServer::new(fake.clone())
                    .max_decoding_message_size(MAX)
                    .max_encoding_message_size(MAX),
            )
            .add_service(ImageServiceServer::new(FakeImages));
        let served = Served::spawn(path, |listener, stopped| async move {
            server
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            path: path.to_path_buf(),
            log,
            fake,
            served,
            connections: Arc::default(),
        }
    }

    /// Starts the fake RuntimeService served by hyper directly, without tonic's transport:
    /// tonic answers an expired `grpc-timeout` itself (CANCELLED "Timeout expired"), while a
    /// grpc-go runtime whose handler hangs answers nothing at the deadline. This one does not
    /// either.
    pub async fn start_without_deadlines(path: &Path) -> Self {
        let log = Log::default();
        let fake = FakeRuntime::default();
        let service = Record {
            inner: RuntimeServiceServer::new(fake.clone()),
            log: log.clone(),
        };
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (conns, state) = (connections.clone(), fake.clone());
        let served = Served::spawn(path, |listener, mut stopped| async move {
            loop {
                let stream = tokio::select! {
                    _ = &mut stopped => return,
                    accepted = listener.accept() => accepted.unwrap().0,
                };
                let (service, state) = (service.clone(), state.clone());
                let serve =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (service, state) = (service.clone(), state.clone());
                        async move {
                            let _open = Open::new(&state, req.uri().path());
                            if state.hang_all.load(Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                            let req = req.map(tonic::body::Body::new);
                            tower::ServiceExt::oneshot(service, req).await
                        }
                    });
                let task = tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), serve),
                );
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            path: path.to_path_buf(),
            log,
            fake,
            served,
            connections,
        }
    }

    /// Closes every connection served now, in the middle of whatever calls they carry (only
    /// [`Runtime::start_without_deadlines`]): a runtime that crashed. New connections are
    /// served as before.
    pub fn cut_connections(&self) {
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Stops the fake runtime and removes its socket.
    pub async fn stop(self) {
        self.served.stop().await;
    }
}

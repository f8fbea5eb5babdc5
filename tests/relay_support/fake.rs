//! Test support: an in-process fake container runtime (tonic RuntimeService + ImageService on
//! a unix socket) that records the raw bytes and headers of every request it receives, plus
//! relay and client helpers. Shared by the tests/relay_*.rs files via `#[path]`.
#![allow(dead_code)]

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper_util::rt::TokioIo;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::{Hook, RelayBuilder};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

use cri::image_service_server::{ImageService, ImageServiceServer};
use cri::runtime_service_server::{RuntimeService, RuntimeServiceServer};

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
}

/// The fake runtime's RuntimeService: fixed answers keyed by ids (see each method).
#[derive(Debug, Clone, Default)]
pub struct FakeRuntime {
    pub created: Arc<Mutex<Vec<cri::CreateContainerRequest>>>,
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
        let name = request
            .into_inner()
            .config
            .and_then(|c| c.metadata)
            .map(|m| m.name)
            .unwrap_or_default();
        Ok(Response::new(cri::RunPodSandboxResponse {
            pod_sandbox_id: format!("sb-{name}"),
        }))
    }

    async fn create_container(
        &self,
        request: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        let req = request.into_inner();
        self.created.lock().unwrap().push(req.clone());
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
        let name = req
            .config
            .and_then(|c| c.metadata)
            .map(|m| m.name)
            .unwrap_or_default();
        Ok(Response::new(cri::CreateContainerResponse {
            container_id: format!("ctr-{name}"),
        }))
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
            let req = http::Request::from_parts(parts, tonic::body::Body::new(full(body)));
            tower::ServiceExt::oneshot(inner, req).await
        })
    }
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
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Runtime {
    /// Starts the fake runtime on `path` (removing a leftover socket file first).
    pub async fn start(path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        let log = Log::default();
        let fake = FakeRuntime::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::builder()
            .layer(RecordLayer(log.clone()))
            .add_service(
                RuntimeServiceServer::new(fake.clone())
                    .max_decoding_message_size(MAX)
                    .max_encoding_message_size(MAX),
            )
            .add_service(ImageServiceServer::new(FakeImages));
        let task = tokio::spawn(async move {
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
            stop: Some(stop),
            task,
        }
    }

    /// Stops the fake runtime and removes its socket.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A running relay.
pub struct RunningRelay {
    pub path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<()>,
}

impl RunningRelay {
    /// Binds `listen` → `runtime` with `hook` and serves until [`RunningRelay::stop`].
    pub async fn start<H: Hook>(listen: &Path, runtime: &Path, hook: H) -> Self {
        Self::start_with(RelayBuilder::new(listen, runtime).hook(hook)).await
    }

    pub async fn start_with<H: Hook>(builder: RelayBuilder<H>) -> Self {
        let relay = builder.bind().await.unwrap();
        let path = relay.path().to_path_buf();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(relay.serve_with_shutdown(async {
            let _ = stopped.await;
        }));
        Self {
            path,
            stop: Some(stop),
            task,
        }
    }

    /// Requests shutdown (the serve task then drains and ends).
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A tonic channel over the unix socket at `path`.
pub async fn channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .unwrap()
}

pub fn runtime_client(
    channel: Channel,
) -> cri::runtime_service_client::RuntimeServiceClient<Channel> {
    cri::runtime_service_client::RuntimeServiceClient::new(channel)
        .max_decoding_message_size(MAX)
        .max_encoding_message_size(MAX)
}

/// Sends `message` as raw bytes to `path` and returns the raw response message.
pub async fn raw_unary(
    channel: Channel,
    path: &'static str,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    grpc.unary(
        request,
        http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
}

/// A codec that passes message bytes through untouched.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The message bytes of a recorded unary request body (strips the 5-byte gRPC prefix).
pub fn message_of(seen: &Seen) -> Bytes {
    assert!(seen.body.len() >= 5, "body too short: {:?}", seen.body);
    assert_eq!(seen.body[0], 0, "compressed");
    seen.body.slice(5..)
}

/// A raw HTTP/2 unary gRPC call (no tonic client, so no client-side deadline): returns the
/// response head, body bytes and trailers.
pub async fn h2_unary(
    socket: &Path,
    path: &str,
    headers: &[(&'static str, &'static str)],
    message: &[u8],
) -> (http::response::Parts, Bytes, Option<http::HeaderMap>) {
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    h2_raw(socket, path, headers, Bytes::from(body)).await
}

/// A raw HTTP/2 gRPC call with an already framed request body (any number of messages).
pub async fn h2_raw(
    socket: &Path,
    path: &str,
    headers: &[(&'static str, &'static str)],
    body: Bytes,
) -> (http::response::Parts, Bytes, Option<http::HeaderMap>) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(full(body)).unwrap();
    let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (parts, collected.to_bytes(), trailers)
}

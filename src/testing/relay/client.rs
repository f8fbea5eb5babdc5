//! Test support: relay and client helpers for tests/relay: a relay running in a task, tonic and raw HTTP/2 clients over unix sockets.

use std::path::{Path, PathBuf};

use crate::proto::cri::v1 as cri;
use crate::relay::{Hook, RelayBuilder};
use bytes::{Buf, BufMut, Bytes};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::fake::{Runtime, Seen, MAX};

/// A fake runtime and a relay in front of it, in a temp dir.
pub struct Setup {
    _dir: tempfile::TempDir,
    pub runtime: Runtime,
    pub relay: RunningRelay,
}

/// Starts the fake runtime and a relay with `hook` in front of it.
pub async fn setup<H: Hook>(hook: H) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let relay = RunningRelay::start(&dir.path().join("shim.sock"), &runtime.path, hook).await;
    Setup {
        _dir: dir,
        runtime,
        relay,
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

/// A tonic channel over the unix socket at `path` (the library's, connected on first use).
pub async fn channel(path: &Path) -> Channel {
    crate::transport::unix_channel(path)
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
    let req = req.body(http_body_util::Full::new(body)).unwrap();
    let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (parts, collected.to_bytes(), trailers)
}

//! A runtime's error on an intercepted call reaches the client in the shape the runtime sent
//! it: a trailers-only response, whose HEADERS frame carries the status and ends the stream.
//! grpc-go (crictl, critest, the kubelet) reads a status from such headers only when the frame
//! ends the stream; headers followed by an empty DATA frame are "server closed the stream
//! without sending trailers" to it (seen through numa-shim on CRI-O and containerd 2.4 with
//! critest's expected CreateContainer failures). tonic clients accept both, so this is checked
//! on the HTTP/2 stream itself.

use numa_shim::testing::relay::client;

use std::path::Path;

use bytes::Bytes;
use http_body::Body as _;
use hyper_util::rt::TokioIo;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::NoopHook;
use prost::Message;
use tokio::net::UnixStream;

use client::setup;

const CREATE: &str = "/runtime.v1.RuntimeService/CreateContainer";

/// Sends one framed `message` to `path` on `socket`; the response head and whether its HEADERS
/// frame ended the stream.
async fn head_of(socket: &Path, path: &str, message: &[u8]) -> (http::response::Parts, bool) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    let req = http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(Bytes::from(body)))
        .unwrap();
    let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
    (parts, body.is_end_stream())
}

#[tokio::test]
async fn a_runtime_error_on_an_intercepted_call_stays_trailers_only() {
    let s = setup(NoopHook).await;
    let request = cri::CreateContainerRequest {
        pod_sandbox_id: "fail".into(),
        ..Default::default()
    }
    .encode_to_vec();

    // What the fake runtime itself sends (tonic's server): the status in the HEADERS frame,
    // which ends the stream.
    let (direct, direct_ended) = head_of(&s.runtime.path, CREATE, &request).await;
    assert_eq!(direct.headers["grpc-status"], "9", "{direct:?}");
    assert!(direct_ended, "the fake runtime answers trailers-only");

    let (relayed, relayed_ended) = head_of(&s.relay.path, CREATE, &request).await;
    assert_eq!(relayed.headers["grpc-status"], "9", "{relayed:?}");
    assert_eq!(
        relayed.headers["grpc-message"], direct.headers["grpc-message"],
        "{relayed:?}"
    );
    assert!(
        relayed_ended,
        "numa-shim must end the stream with the status headers, as the runtime did"
    );
}

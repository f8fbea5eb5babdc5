//! A runtime's response headers reach the client as the runtime sent them: the relay's HTTP/2
//! server adds nothing (hyper's server would add a `date` header to every response that has
//! none; grpc-go runtimes such as containerd and CRI-O send none).
//!
//! The runtime here is a bare hyper HTTP/2 server with its own `date` turned off, answering
//! every call with fixed headers, one message and trailers.

use numa_shim::testing::relay::client;

use std::convert::Infallible;

use bytes::Bytes;
use hyper::body::Frame;
use numa_shim::relay::NoopHook;
use tokio::net::UnixListener;

use client::{h2_unary, RunningRelay};

/// Serves every connection on `listener` with one fixed gRPC answer and no `date` header.
async fn bare_runtime(listener: UnixListener) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let service =
            hyper::service::service_fn(|_req: http::Request<hyper::body::Incoming>| async {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                let frames = vec![
                    Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"\0\0\0\0\x02\x08\x01"))),
                    Ok(Frame::trailers(trailers)),
                ];
                let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
                let response = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .header("x-runtime", "bare")
                    .body(body)
                    .unwrap();
                Ok::<_, Infallible>(response)
            });
        let mut builder =
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder.auto_date_header(false);
        tokio::spawn(builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
    }
}

#[tokio::test]
async fn response_headers_are_the_runtimes_and_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime.sock");
    let listener = UnixListener::bind(&runtime).unwrap();
    tokio::spawn(bare_runtime(listener));
    let relay = RunningRelay::start(&dir.path().join("shim.sock"), &runtime, NoopHook).await;

    let path = "/runtime.v1.RuntimeService/Version";
    let (direct, direct_body, direct_trailers) = h2_unary(&runtime, path, &[], b"").await;
    let (relayed, body, trailers) = h2_unary(&relay.path, path, &[], b"").await;
    let names = |parts: &http::response::Parts| {
        let mut names: Vec<String> = parts.headers.keys().map(|k| k.to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(names(&direct), ["content-type", "x-runtime"], "{direct:?}");
    assert_eq!(names(&relayed), names(&direct), "{relayed:?}");
    assert_eq!(relayed.headers, direct.headers);
    assert_eq!(body, direct_body);
    assert_eq!(trailers, direct_trailers);
}

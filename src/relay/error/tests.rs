use super::*;
use crate::listen::ListenError;

/// A real hyper error: an HTTP/2 handshake with a peer that hung up.
fn hyper_error() -> hyper::Error {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(64);
        drop(b);
        let io = hyper_util::rt::TokioIo::new(a);
        hyper::client::conn::http2::handshake::<_, _, http_body_util::Empty<bytes::Bytes>>(
            hyper_util::rt::TokioExecutor::new(),
            io,
        )
        .await
        .err()
        .unwrap()
    })
}

/// An h2 error as the runtime connection yields it (a stream the runtime reset).
fn h2_error() -> h2::Error {
    h2::Error::from(h2::Reason::REFUSED_STREAM)
}

#[test]
fn every_variant_maps_to_its_code() {
    let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let p = || PathBuf::from("/run/x.sock");
    let m = || "/runtime.v1.RuntimeService/CreateContainer".to_string();
    let table: Vec<(RelayError, Code, &str)> = vec![
        (
            RelayError::RuntimeUnavailable {
                path: p(),
                source: io(),
            },
            Code::Unavailable,
            "container runtime at /run/x.sock is unavailable",
        ),
        (
            RelayError::RuntimeHandshake {
                path: p(),
                source: h2_error(),
            },
            Code::Unavailable,
            "refused the http/2 handshake",
        ),
        (
            RelayError::RuntimeCall {
                method: m(),
                path: p(),
                source: h2_error(),
            },
            Code::Unavailable,
            "call /runtime.v1.RuntimeService/CreateContainer",
        ),
        (
            RelayError::RuntimeResponse {
                method: m(),
                source: h2_error(),
            },
            Code::Unavailable,
            "reading the response",
        ),
        (
            RelayError::RequestBody {
                method: m(),
                source: hyper_error(),
            },
            Code::Cancelled,
            "reading the /runtime.v1.RuntimeService/CreateContainer request",
        ),
        (
            RelayError::Malformed {
                method: m(),
                reason: "bad wire type".into(),
            },
            Code::InvalidArgument,
            "bad wire type",
        ),
        (
            RelayError::Compressed {
                method: m(),
                encoding: "gzip".into(),
            },
            Code::Unimplemented,
            "grpc-encoding gzip",
        ),
        (
            RelayError::TooLarge {
                method: m(),
                size: 10,
                limit: 5,
            },
            Code::ResourceExhausted,
            "10 bytes exceeds the 5 byte limit",
        ),
        (
            RelayError::Deadline {
                method: m(),
                elapsed_ms: 7,
            },
            Code::DeadlineExceeded,
            "after 7 ms",
        ),
        (
            RelayError::Task {
                method: m(),
                reason: "task panicked".into(),
            },
            Code::Internal,
            "relaying /runtime.v1.RuntimeService/CreateContainer failed: task panicked",
        ),
        (
            RelayError::RuntimeDeadline {
                method: m(),
                elapsed_ms: 9,
            },
            Code::DeadlineExceeded,
            "after 9 ms waiting for the container runtime",
        ),
        (
            RelayError::Lookup {
                method: "/runtime.v1.RuntimeService/ListPodSandbox".into(),
                code: Code::Unknown,
                message: "busy".into(),
            },
            Code::Unavailable,
            "refused /runtime.v1.RuntimeService/ListPodSandbox: Unknown busy",
        ),
        (
            RelayError::Listen(ListenError::NotASocket { path: p() }),
            Code::Internal,
            "is not a socket",
        ),
        (
            RelayError::Listen(ListenError::InUse { path: p() }),
            Code::Internal,
            "already listening",
        ),
        (
            RelayError::Listen(ListenError::Io {
                action: "bind",
                path: p(),
                source: io(),
            }),
            Code::Internal,
            "cannot bind listening socket /run/x.sock",
        ),
    ];
    for (err, code, text) in table {
        let status = err.to_status();
        assert_eq!(status.code(), code, "{err}");
        assert!(
            status.message().starts_with("numa-shim: "),
            "{}",
            status.message()
        );
        assert!(
            status.message().contains(text),
            "{} lacks {text}",
            status.message()
        );
    }
}

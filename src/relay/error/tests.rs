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
                source: hyper_error(),
            },
            Code::Unavailable,
            "refused the http/2 handshake",
        ),
        (
            RelayError::RuntimeCall {
                method: m(),
                path: p(),
                source: hyper_error(),
            },
            Code::Unavailable,
            "call /runtime.v1.RuntimeService/CreateContainer",
        ),
        (
            RelayError::RuntimeResponse {
                method: m(),
                source: hyper_error(),
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

//! The relay's one error type and its single mapping to a gRPC status.

use std::path::PathBuf;

use tonic::{Code, Status};

/// Everything that can go wrong while serving or relaying a CRI call.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The runtime socket could not be reached (not there, refused, timed out).
    #[error("container runtime at {path} is unavailable: {source}")]
    RuntimeUnavailable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP/2 handshake with the runtime failed.
    #[error("container runtime at {path} refused the http/2 handshake: {source}")]
    RuntimeHandshake {
        path: PathBuf,
        #[source]
        source: hyper::Error,
    },
    /// A call sent to the runtime failed before its response headers arrived.
    #[error("call {method} to container runtime at {path} failed: {source}")]
    RuntimeCall {
        method: String,
        path: PathBuf,
        #[source]
        source: hyper::Error,
    },
    /// The runtime's response body broke off while numa-shim was reading it.
    #[error("reading the response to {method} from the container runtime failed: {source}")]
    RuntimeResponse {
        method: String,
        #[source]
        source: hyper::Error,
    },
    /// The client's request body broke off while numa-shim was reading it.
    #[error("reading the {method} request failed: {source}")]
    RequestBody {
        method: String,
        #[source]
        source: hyper::Error,
    },
    /// An intercepted request is not one well-formed, uncompressed gRPC message of its type.
    #[error("malformed {method} request: {reason}")]
    Malformed { method: String, reason: String },
    /// An intercepted request uses gRPC message compression, which numa-shim cannot rewrite.
    #[error("compressed {method} request is not supported (grpc-encoding {encoding})")]
    Compressed { method: String, encoding: String },
    /// An intercepted message is larger than numa-shim collects in memory.
    #[error("{method} message of {size} bytes exceeds the {limit} byte limit")]
    TooLarge {
        method: String,
        size: usize,
        limit: usize,
    },
    /// The caller's deadline (grpc-timeout) passed before numa-shim could forward the call.
    #[error("deadline of {method} exceeded after {elapsed_ms} ms inside numa-shim")]
    Deadline { method: String, elapsed_ms: u128 },
    /// The listening socket path holds a file that is not a socket.
    #[error("refusing to replace {path}: it exists and is not a socket")]
    NotASocket { path: PathBuf },
    /// Another live server answers on the listening socket.
    #[error("another server is already listening on {path}")]
    SocketInUse { path: PathBuf },
    /// Preparing, binding or securing the listening socket failed.
    #[error("cannot {action} listening socket {path}: {source}")]
    Listen {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl RelayError {
    /// The gRPC status a client sees for this error. The one place errors become statuses.
    pub fn to_status(&self) -> Status {
        let code = match self {
            Self::RuntimeUnavailable { .. }
            | Self::RuntimeHandshake { .. }
            | Self::RuntimeCall { .. }
            | Self::RuntimeResponse { .. } => Code::Unavailable,
            Self::RequestBody { .. } => Code::Cancelled,
            Self::Malformed { .. } => Code::InvalidArgument,
            Self::Compressed { .. } => Code::Unimplemented,
            Self::TooLarge { .. } => Code::ResourceExhausted,
            Self::Deadline { .. } => Code::DeadlineExceeded,
            Self::NotASocket { .. } | Self::SocketInUse { .. } | Self::Listen { .. } => {
                Code::Internal
            }
        };
        Status::new(code, format!("numa-shim: {self}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                RelayError::NotASocket { path: p() },
                Code::Internal,
                "is not a socket",
            ),
            (
                RelayError::SocketInUse { path: p() },
                Code::Internal,
                "already listening",
            ),
            (
                RelayError::Listen {
                    action: "bind",
                    path: p(),
                    source: io(),
                },
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
}

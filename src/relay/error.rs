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
        source: h2::Error,
    },
    /// A call sent to the runtime failed before its response headers arrived.
    #[error("call {method} to container runtime at {path} failed: {source}")]
    RuntimeCall {
        method: String,
        path: PathBuf,
        #[source]
        source: h2::Error,
    },
    /// The runtime's response body broke off while numa-shim was reading it.
    #[error("reading the response to {method} from the container runtime failed: {source}")]
    RuntimeResponse {
        method: String,
        #[source]
        source: h2::Error,
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
    /// The task relaying a call to the runtime ended without an answer (it panicked).
    #[error("relaying {method} failed: {reason}")]
    Task { method: String, reason: String },
    /// The runtime refused one of numa-shim's own calls (the lookup after a cut-off call).
    #[error("the container runtime refused {method}: {code:?} {message}")]
    Lookup {
        method: String,
        code: Code,
        message: String,
    },
    /// The caller's deadline passed while the runtime had not answered; the runtime call was
    /// cancelled.
    #[error(
        "deadline of {method} exceeded after {elapsed_ms} ms waiting for the container runtime"
    )]
    RuntimeDeadline { method: String, elapsed_ms: u128 },
    /// The listening socket could not be set up.
    #[error(transparent)]
    Listen(#[from] crate::listen::ListenError),
}

impl RelayError {
    /// The gRPC status a client sees for this error. The one place errors become statuses.
    pub fn to_status(&self) -> Status {
        let code = match self {
            Self::RuntimeUnavailable { .. }
            | Self::RuntimeHandshake { .. }
            | Self::RuntimeCall { .. }
            | Self::RuntimeResponse { .. }
            | Self::Lookup { .. } => Code::Unavailable,
            Self::RequestBody { .. } => Code::Cancelled,
            Self::Malformed { .. } => Code::InvalidArgument,
            Self::Compressed { .. } => Code::Unimplemented,
            Self::TooLarge { .. } => Code::ResourceExhausted,
            Self::Deadline { .. } | Self::RuntimeDeadline { .. } => Code::DeadlineExceeded,
            Self::Task { .. } | Self::Listen(_) => Code::Internal,
        };
        Status::new(code, format!("numa-shim: {self}"))
    }
}

#[cfg(test)]
mod tests;

//! How numa-shim talks gRPC over unix sockets, below every module that does: endpoint strings,
//! lazily connected unix-socket channels, gRPC message framing, and the message-size and HTTP/2
//! window limits. Knows nothing of CRI, PodResources or placement.

mod channel;
pub mod endpoint;
pub mod framing;
pub mod limits;

pub use channel::unix_channel;
pub use endpoint::{detect_runtime, parse as parse_endpoint, EndpointError, RUNTIME_CANDIDATES};

//! Message-size limits and HTTP/2 flow-control settings, in one place for every server and client.

/// Largest message numa-shim's own tonic clients and the PodResources server send or accept (the
/// kubelet's `podresources.DefaultMaxMsgSize` and the CRI client's 16 MiB).
pub const MAX_MESSAGE: usize = 16 << 20;
/// Largest intercepted CRI message the relay collects in memory by default (passthrough bodies
/// are never collected).
pub const DEFAULT_MAX_RELAYED_MESSAGE: usize = 64 << 20;
/// Largest message numa-shim reads from the kubelet's Pods API (a node's whole pod list).
pub const MAX_PODS_LIST: usize = 16 << 20;
/// HTTP/2 stream window on both sides of the relay: a 16 MiB CRI message in four round trips.
pub const STREAM_WINDOW: u32 = 4 << 20;
/// HTTP/2 connection window on both sides of the relay.
pub const CONNECTION_WINDOW: u32 = 16 << 20;
/// HTTP/2 largest frame on both sides of the relay.
pub const MAX_FRAME: u32 = 1 << 20;

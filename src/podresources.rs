//! PodResources v1 (`v1.PodResourcesLister`) served from what numa-shim applied: CPUs and memory
//! blocks of the pods in the lifecycle registry, with kubelet 1.37 PodLevelResourceManagers
//! semantics (container `cpu_ids` only for exclusive containers, pod-level `cpu_ids`/`memory`
//! for the pod-scope bubble), plus devices and dynamic resources merged from the kubelet's own
//! PodResources socket when it answers.
//!
//! Answers are built from an immutable [`Snapshot`] copied out under the registry lock; the lock
//! is never held while a response is built or while the kubelet is called. This module never
//! changes the registry and never talks CRI.

mod convert;
mod devices;
mod kubelet;
mod limit;
mod published;
mod server;
mod snapshot;

use std::path::PathBuf;
use std::time::Duration;

pub use convert::{allocatable_response, cpu_ids, list_response, memory, pod_resources};
pub use devices::{allocatable_devices, device_facts};
pub use kubelet::{merge_allocatable, merge_list, merge_pod, KubeletSource, WARN_EVERY};
pub use limit::RateLimiter;
pub use server::{not_found, serve, PodResourcesService, MAX_MESSAGE};
pub use snapshot::{ContainerEntry, PodEntry, RegistrySource, Revised, Snapshot};

/// Where numa-shim serves PodResources when nothing else is configured: under its state directory.
pub const DEFAULT_SOCKET: &str = "/var/lib/numa-shim/pod-resources/kubelet.sock";
/// The kubelet's own PodResources socket.
pub const DEFAULT_KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The kubelet's default rate limit (`podresources.DefaultQPS`, `DefaultBurstTokens`).
pub const DEFAULT_QPS: u32 = 100;
pub const DEFAULT_BURST: u32 = 10;
/// The kubelet's message for a call refused by the rate limiter (code `ResourceExhausted`).
pub const RATE_LIMIT_MESSAGE: &str = "rejected by rate limit";

/// How the PodResources server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The socket numa-shim listens on.
    pub socket: PathBuf,
    /// File mode of the socket (default `0o600`: root only, like the kubelet's).
    pub mode: u32,
    /// The kubelet's PodResources socket for devices and dynamic resources; `None`: never asked.
    pub kubelet_socket: Option<PathBuf>,
    /// Requests per second and burst of the token bucket.
    pub qps: u32,
    pub burst: u32,
    /// How long one call to the kubelet may take before answering without its part.
    pub kubelet_timeout: Duration,
}

impl Options {
    /// Defaults for a socket path.
    pub fn new(socket: PathBuf) -> Self {
        Self {
            socket,
            mode: 0o600,
            kubelet_socket: Some(PathBuf::from(DEFAULT_KUBELET_SOCKET)),
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            kubelet_timeout: Duration::from_secs(1),
        }
    }
}

/// Why the PodResources server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("pod-resources socket: {0}")]
    Listen(#[from] crate::listen::ListenError),
    #[error(
        "pod-resources socket {path}: is the kubelet's own socket; numa-shim must listen elsewhere"
    )]
    KubeletPath { path: PathBuf },
    #[error(
        "pod-resources rate limit: qps and burst must be at least 1 (got qps {qps}, burst {burst})"
    )]
    RateLimit { qps: u32, burst: u32 },
    #[error("pod-resources server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl Options {
    /// Refuses settings the server cannot run with.
    pub fn validate(&self) -> Result<(), PodResourcesError> {
        if self.kubelet_socket.as_ref() == Some(&self.socket) {
            return Err(PodResourcesError::KubeletPath {
                path: self.socket.clone(),
            });
        }
        if self.qps == 0 || self.burst == 0 {
            return Err(PodResourcesError::RateLimit {
                qps: self.qps,
                burst: self.burst,
            });
        }
        Ok(())
    }
}

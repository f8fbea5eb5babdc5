//! Where a decision learns what the kubelet's device manager holds: a [`DeviceSource`], asked
//! before the decision and outside every lock (it does I/O: the real one reads the kubelet's
//! PodResources socket). A source that fails leaves the decision with the devices known before,
//! without any as given to the pod, and says so in the log (docs/devices.md).

use std::future::Future;
use std::pin::Pin;

use crate::placement::device::DeviceFacts;

/// Why the kubelet's devices could not be read (the socket is gone, a call failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DeviceSourceError(pub String);

/// The future a [`DeviceSource`] answers with.
pub type DeviceFuture<'a> =
    Pin<Box<dyn Future<Output = Result<DeviceFacts, DeviceSourceError>> + Send + 'a>>;

/// What the kubelet's device manager holds now, for the decision about one pod.
pub trait DeviceSource: Send + Sync + std::fmt::Debug + 'static {
    /// Allocatable devices, devices of other pods, and those the kubelet already gave the
    /// containers of `pod` (the kubelet's PodResources names pods by namespace and name). A
    /// source logs its own failures; the decision only notes that it has no facts.
    fn facts<'a>(&'a self, pod: &'a crate::placement::PodSpec) -> DeviceFuture<'a>;
}

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

/// The true NUMA nodes of the devices numa-shim's device plugin front hands the kubelet without
/// topology (docs/devices.md, "The device plugin front"): resource → device id → nodes (empty:
/// the plugin gave none). The front fills it from each plugin's `ListAndWatch`; readers of the
/// kubelet's PodResources put the nodes back on the fronted devices the kubelet lists without
/// them. Shared, behind a short lock never held across an `.await`.
#[derive(Debug, Default)]
pub struct FrontedTopology {
    resources: std::sync::RwLock<TopologyMap>,
}

/// Resource → device id → NUMA nodes.
pub type TopologyMap =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<u32>>>;

impl FrontedTopology {
    /// Replaces what is known of `resource`'s devices.
    pub fn set(&self, resource: &str, devices: std::collections::BTreeMap<String, Vec<u32>>) {
        self.write().insert(resource.to_string(), devices);
    }

    /// The NUMA nodes of one fronted device; `None`: not a fronted resource or unknown id.
    pub fn nodes(&self, resource: &str, id: &str) -> Option<Vec<u32>> {
        self.read().get(resource)?.get(id).cloned()
    }

    /// Whether `resource` is fronted.
    pub fn is_fronted(&self, resource: &str) -> bool {
        self.read().contains_key(resource)
    }

    /// A copy of everything known.
    pub fn snapshot(&self) -> TopologyMap {
        self.read().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, TopologyMap> {
        self.resources
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, TopologyMap> {
        self.resources
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

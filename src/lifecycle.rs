//! The pod lifecycle as numa-shim sees it through CRI: admit at RunPodSandbox, place at
//! CreateContainer, resize in place at UpdateContainerResources / UpdatePodSandboxResources, release at Stop/Remove, push pool
//! changes to running containers, and survive restarts.
//!
//! `registry` is pure bookkeeping around the decision core; the rest is the async shell. No lock
//! is ever held across a call to the runtime.

pub mod annotations;
pub mod claims;
pub mod devices;
pub mod gauges;
pub mod placer;
pub mod pool;
pub mod recover;
pub mod refusals;
pub mod registry;
pub mod resize;
pub mod runtime;
pub mod start;
pub mod store;

pub use claims::{ClaimFuture, ClaimSource, ClaimSourceError};
pub use devices::{DeviceFuture, DeviceSource, DeviceSourceError};
pub use placer::{Outcome, PlacementError, Placer, RegistryGuard, ResizeAnswer};
pub use registry::{Adoption, ContainerDecision, CpusetUpdate, Registry, RegistrySnapshot, Source};
pub use start::{start, Options, SpecSource, StartError, Started};
pub use store::Store;

//! The decision core: what a kubelet 1.37 with the static CPU Manager, the Static Memory Manager,
//! the Topology Manager and PodLevelResourceManagers would decide for each pod and container.
//!
//! Architecture invariant: pure. No I/O, no async, no clock, no tonic, no logging side effects
//! that change results; inputs in, decisions out. The same inputs always give the same output.

pub mod config;
pub mod cpu;
pub mod device;
pub mod error;
pub mod hint;
pub mod memory;
pub mod node;
pub mod pod;
pub mod provider;
pub mod qos;
#[cfg(any(test, feature = "testing"))]
pub mod test_pods;
pub mod topology_manager;

pub use config::Config;
pub use cpu::CpuManager;
pub use error::AdmissionError;
pub use hint::{NumaMask, TopologyHint};
pub use pod::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};
pub use provider::{HintProvider, HintSets, ResourceHints};

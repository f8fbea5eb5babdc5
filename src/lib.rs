//! numa-shim: a CRI proxy that gives any Kubernetes node pod-level NUMA resource management.
//!
//! See ARCHITECTURE.md for the request path and each module's invariants.
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]

pub mod cgroup;
pub mod cli;
pub mod config;
pub mod cpuset;
pub mod crio;
pub mod deviceplugin;
pub mod files;
pub mod inspect;
pub mod k8s;
pub mod knowledge;
pub mod lifecycle;
pub mod listen;
pub mod placement;
pub mod podresources;
pub mod proto;
pub mod quantity;
pub mod relay;
pub mod report;
pub mod scenario;
pub mod state;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod topology;
pub mod transport;

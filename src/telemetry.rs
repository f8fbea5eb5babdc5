//! Observability plumbing: Prometheus metrics behind a typed API, the `/metrics`, `/healthz` and
//! `/readyz` HTTP endpoint, and process-wide logging set-up.
//!
//! Owns how numa-shim is watched, never what it decides: nothing here is read back by placement
//! or the relay, and a failing scrape or log sink must never fail a CRI call.

mod family;
pub mod http;
pub mod logging;
pub mod metrics;
#[cfg(test)]
mod scrape;

pub use http::{MetricsServer, PlacementProvider, Readiness, ReadinessCheck, DEFAULT_ADDRESS};
pub use logging::LogFormat;
pub use metrics::{AssignmentType, Metrics, Pool, ResourceName, Source};

//! Why an intercepted call is answered by numa-shim instead of the runtime.

use super::DecideError;
use crate::knowledge::infer::InferError;
use crate::lifecycle::registry::ResizeRefused;
use crate::lifecycle::store::StoreError;
use crate::placement::AdmissionError;

/// Why an intercepted call is answered by numa-shim instead of the runtime (the hook turns
/// each into one gRPC status).
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// The kubelet's own admission refusal (its reason and message).
    #[error("{reason}: {0}", reason = .0.reason())]
    Admission(#[from] AdmissionError),
    /// The same pod refused again: the kubelet's retry of a pod refused before while nothing
    /// changed, or refused anew with the same reason (logged and counted once).
    #[error("{reason}: {message}")]
    Again { reason: String, message: String },
    /// CRI values inference cannot read.
    #[error(transparent)]
    Input(#[from] InferError),
    /// The decision could not be recorded: nothing was placed.
    #[error("numa-shim cannot record this placement, so nothing was placed: {0}")]
    State(#[from] StoreError),
    /// The decision did not come back (it panicked, or the registry kept changing under it).
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// An in-place resize the decision core refuses: nothing changed.
    #[error(transparent)]
    Resize(#[from] ResizeRefused),
}

impl PlacementError {
    /// A refusal by the kubelet's rules (first or repeated), which the `Placer` has logged.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Admission(_) | Self::Again { .. })
    }
}

/// A refusal repeated with the same reason, logged and counted once.
pub(super) fn again(err: &AdmissionError) -> PlacementError {
    PlacementError::Again {
        reason: err.reason().to_string(),
        message: err.to_string(),
    }
}

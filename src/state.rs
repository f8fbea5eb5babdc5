//! Durable state: the checkpoint of every decision numa-shim has applied, and its recovery.
//!
//! Owns the on-disk format (versioned, checksummed, crash-safe: two slots written in place) under a state directory
//! that is always a parameter. Never decides placement and never talks to the runtime.

pub mod checkpoint;

pub use checkpoint::{Checkpoint, StateError};

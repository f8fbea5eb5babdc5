//! Persists registry snapshots to the checkpoint in decision order: a snapshot numbered under
//! the registry lock is written only if nothing newer was written already, so concurrent calls
//! can never leave an older state on disk.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::warn;

use super::registry::RegistrySnapshot;
use crate::state::{Checkpoint, StateError};

/// The checkpoint file name inside the state directory.
pub const CHECKPOINT_NAME: &str = "numa-shim-state.json";

/// The registry's checkpoint writer.
#[derive(Debug)]
pub struct Store {
    checkpoint: Checkpoint,
    seq: AtomicU64,
    written: tokio::sync::Mutex<u64>,
}

impl Store {
    pub fn new(checkpoint: Checkpoint) -> Self {
        Self {
            checkpoint,
            seq: AtomicU64::new(0),
            written: tokio::sync::Mutex::new(0),
        }
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The number of the next snapshot; take it while holding the registry lock.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Writes `snapshot` unless a newer one is already on disk; false if the write failed.
    pub async fn write(&self, seq: u64, snapshot: RegistrySnapshot) -> bool {
        let mut written = self.written.lock().await;
        if seq <= *written {
            return true;
        }
        let checkpoint = self.checkpoint.clone();
        let result = tokio::task::spawn_blocking(move || checkpoint.write(&snapshot)).await;
        match result {
            Ok(Ok(())) => {
                *written = seq;
                true
            }
            Ok(Err(err)) => {
                warn!(error = %err, "checkpoint write failed");
                false
            }
            Err(err) => {
                warn!(error = %err, "checkpoint writer task failed");
                false
            }
        }
    }

    /// Reads the checkpoint (`Ok(None)` when there is none).
    pub fn read(&self) -> Result<Option<RegistrySnapshot>, StateError> {
        self.checkpoint.read()
    }
}

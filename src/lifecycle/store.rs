//! Persists registry snapshots to the checkpoint in decision order, one write at a time. A
//! caller names the change it needs on disk by a number taken after making it; the write it
//! waits for snapshots the registry as it is when the write starts, so every caller that was
//! waiting meanwhile is covered by that one write (group commit) and returns without writing
//! again. Remembers the newest change someone asked for without waiting ([`Store::want`]) and
//! whether the newest state is on disk: a failed write marks the store failing until a write at
//! least as new succeeds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use super::registry::RegistrySnapshot;
use crate::state::{Checkpoint, StateError};

/// The checkpoint file name inside the state directory.
pub const CHECKPOINT_NAME: &str = "numa-shim-state.json";

/// Why a snapshot is not on disk.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("checkpoint {path}: writer task failed: {reason}")]
    Task { path: String, reason: String },
}

impl StoreError {
    /// Whether the filesystem is out of space (the status then says RESOURCE_EXHAUSTED).
    pub fn is_full(&self) -> bool {
        matches!(self, Self::State(e) if e.is_full())
    }
}

/// How a change reached the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durable {
    /// This call wrote the checkpoint.
    Wrote,
    /// A write that started after the change covered it: nothing more to write.
    Covered,
}

/// The newest failed write: its number and what went wrong.
#[derive(Debug, Clone)]
struct Failing {
    seq: u64,
    reason: String,
}

/// The registry's checkpoint writer.
#[derive(Debug)]
pub struct Store {
    checkpoint: Checkpoint,
    seq: AtomicU64,
    /// The number of the newest snapshot on disk; held while writing, so writes go one by one.
    written: tokio::sync::Mutex<u64>,
    /// Held by the blocking thread for the file's write and the number of the snapshot in the
    /// file: a write whose waiter was cancelled still ends before the next one starts, and an
    /// older snapshot never replaces a newer one.
    file: Arc<Mutex<u64>>,
    /// The same number, readable without waiting for a write in progress.
    on_disk: AtomicU64,
    /// The newest change asked for without waiting ([`Store::want`]).
    wanted: AtomicU64,
    failing: Mutex<Option<Failing>>,
}

impl Store {
    pub fn new(checkpoint: Checkpoint) -> Self {
        Self {
            checkpoint,
            seq: AtomicU64::new(0),
            written: tokio::sync::Mutex::new(0),
            file: Arc::new(Mutex::new(0)),
            on_disk: AtomicU64::new(0),
            wanted: AtomicU64::new(0),
            failing: Mutex::new(None),
        }
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The number of the next change or snapshot. A change takes it after it is made; a
    /// snapshot takes it while holding the registry lock, so it covers every change numbered
    /// below it.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Notes that change `seq` should reach the disk, without waiting for it.
    pub fn want(&self, seq: u64) {
        self.wanted.fetch_max(seq, Ordering::SeqCst);
    }

    /// Whether a change asked for with [`Store::want`] is not on disk yet.
    pub fn behind(&self) -> bool {
        self.wanted.load(Ordering::SeqCst) > self.on_disk.load(Ordering::SeqCst)
    }

    /// Why the newest state may not be on disk (the last failed write's error), or `None`.
    pub fn problem(&self) -> Option<String> {
        self.lock_failing().as_ref().map(|f| f.reason.clone())
    }

    /// Makes change `want` durable: returns at once if a write that started after it already
    /// succeeded, or waits for the write in progress and then writes `take()` (a snapshot and
    /// its number, taken when this write starts) unless that write covered the change.
    pub async fn write_covering(
        &self,
        want: u64,
        take: impl FnOnce() -> (u64, RegistrySnapshot),
    ) -> Result<Durable, StoreError> {
        let mut written = self.written.lock().await;
        if want <= *written {
            return Ok(Durable::Covered);
        }
        let (seq, snapshot) = take();
        let checkpoint = self.checkpoint.clone();
        let file = self.file.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut in_file = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if seq <= *in_file {
                return Ok(());
            }
            checkpoint.write(&snapshot)?;
            *in_file = seq;
            Ok(())
        })
        .await;
        let result = match result {
            Ok(Ok(())) => Ok(Durable::Wrote),
            Ok(Err(err)) => Err(StoreError::State(err)),
            Err(err) => Err(StoreError::Task {
                path: self.checkpoint.path().display().to_string(),
                reason: err.to_string(),
            }),
        };
        let mut failing = self.lock_failing();
        match &result {
            Ok(_) => {
                *written = seq;
                self.on_disk.store(seq, Ordering::SeqCst);
                if failing.as_ref().is_some_and(|f| f.seq <= seq) {
                    info!(path = %self.checkpoint.path().display(), "checkpoint written again");
                    *failing = None;
                }
            }
            Err(err) => {
                warn!(error = %err, "checkpoint write failed");
                let newest = failing.as_ref().map_or(seq, |f| f.seq.max(seq));
                *failing = Some(Failing {
                    seq: newest,
                    reason: err.to_string(),
                });
            }
        }
        result
    }

    /// Reads the checkpoint (`Ok(None)` when there is none).
    pub fn read(&self) -> Result<Option<RegistrySnapshot>, StateError> {
        self.checkpoint.read()
    }

    fn lock_failing(&self) -> std::sync::MutexGuard<'_, Option<Failing>> {
        self.failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

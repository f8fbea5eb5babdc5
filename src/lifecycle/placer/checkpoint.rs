//! How the [`Placer`] keeps its state on disk: a decision's durable write (group commit), the
//! state writer that writes what calls left for later and retries failed writes.

use tracing::info;

use super::Placer;
use crate::lifecycle::store::{Durable, StoreError};

impl Placer {
    /// Puts the current state on disk and waits until it is there. Callers that wait at the
    /// same time share one write (group commit): the write snapshots the registry when it
    /// starts. A failure is counted, makes [`Placer::state_problem`] say why and wakes the
    /// state writer.
    pub async fn persist(&self) -> Result<(), StoreError> {
        let want = self.store.next_seq();
        let result = self
            .store
            .write_covering(want, || {
                let registry = self.registry();
                (self.store.next_seq(), registry.snapshot())
            })
            .await;
        match &result {
            Ok(Durable::Wrote) => self.metrics.checkpoint_write(true),
            Ok(Durable::Covered) => {}
            Err(_) => {
                self.metrics.checkpoint_write(false);
                self.state_behind.notify_one();
            }
        }
        result.map(|_| ())
    }

    /// Has the state writer put the current state on disk soon, without waiting for it: for
    /// what the runtime already did (commits and releases), which recovery reads back from the
    /// runtime if numa-shim stops before the write.
    pub fn persist_soon(&self) {
        self.store.want(self.store.next_seq());
        self.state_behind.notify_one();
    }

    /// Writes what [`Placer::persist_soon`] left pending or a failed write left behind, if
    /// anything (at shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        if self.store.behind() || self.store.problem().is_some() {
            return self.persist().await;
        }
        Ok(())
    }

    /// `Ok` when the newest state is on disk; otherwise tries to write it now (a placement
    /// must not be decided on top of a state that cannot be recorded).
    pub async fn durable(&self) -> Result<(), StoreError> {
        if self.store.problem().is_none() {
            return Ok(());
        }
        self.persist().await
    }

    /// Why the newest state is not on disk (for `/readyz`), or `None` when it is.
    pub fn state_problem(&self) -> Option<String> {
        self.store
            .problem()
            .map(|reason| format!("placement state cannot be written: {reason}"))
    }

    /// The state writer: writes what [`Placer::persist_soon`] left pending `lag` after it was
    /// asked (everything pending in one write, and nothing if a decision's write covered it
    /// meanwhile: so that decisions rarely wait behind it), and rewrites the checkpoint every
    /// `period` while writes fail, until one succeeds, so that readiness comes back by itself
    /// when the disk does. Runs until dropped.
    pub async fn keep_state(&self, period: std::time::Duration, lag: std::time::Duration) {
        loop {
            if self.store.problem().is_some() {
                tokio::time::sleep(period).await;
                if self.persist().await.is_ok() {
                    info!("placement state on disk again");
                }
            } else if self.store.behind() {
                tokio::time::sleep(lag).await;
                if self.store.behind() {
                    // A failure is counted and marks the store failing: the branch above
                    // retries.
                    let _ = self.persist().await;
                }
            } else {
                self.state_behind.notified().await;
            }
        }
    }
}

//! How the [`Placer`] runs a placement decision: on a copy of the registry, on a blocking
//! thread, one at a time, swapped in only if nothing changed the registry meanwhile.

use std::sync::Arc;

use tracing::{info, warn};

use super::Placer;
use crate::lifecycle::registry::Registry;

/// Where the test-only decision hook is kept.
#[cfg(any(test, feature = "testing"))]
#[derive(Default)]
pub(super) struct HookSlot(std::sync::Mutex<Option<DecisionHook>>);

#[cfg(any(test, feature = "testing"))]
impl std::fmt::Debug for HookSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSlot")
    }
}

/// What a test runs at the start of each decision: gets the method (`RunPodSandbox` or
/// `CreateContainer`).
#[cfg(any(test, feature = "testing"))]
pub type DecisionHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Why a decision did not come back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// The decision panicked or its thread was lost: nothing was changed.
    #[error("the placement decision failed ({reason}); nothing was placed")]
    Failed { reason: String },
    /// The registry changed under every attempt: nothing was placed, a retry may succeed.
    #[error("the placement state changed during the decision {attempts} times; nothing was placed, retry")]
    Busy { attempts: u32 },
}

/// Slow attempts of one decision before it is refused as [`DecideError::Busy`].
const DECIDE_ATTEMPTS: u32 = 3;
/// A decision attempt quicker than this is made again under the registry lock when the
/// registry changed under it.
const INLINE_MAX: std::time::Duration = std::time::Duration::from_millis(5);

impl Placer {
    /// Test-only: runs `hook` at the start of every placement decision, on its thread.
    #[cfg(any(test, feature = "testing"))]
    pub fn set_decision_hook(&self, hook: Option<DecisionHook>) {
        *self
            .decision_hook
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
    }

    /// Runs a placement decision off the relay's workers: `decide` works on a copy of the
    /// registry on a blocking thread (one decision at a time), and the copy replaces the
    /// registry only if nothing changed it meanwhile (the epoch). If something did (another
    /// call's record), the decision is made again: under the lock, on the worker, when the
    /// attempt took less than [`INLINE_MAX`] (it cannot stall anything longer than that, and
    /// cannot be overtaken again); on a fresh copy otherwise, [`DECIDE_ATTEMPTS`] times at most.
    /// So a slow decision never holds the registry lock or a worker: PodResources, the pool
    /// updater and the other calls' records never wait for it. Dropping the returned future
    /// (the caller's deadline) abandons the decision: its copy is thrown away and nothing is
    /// held. A decision that panics is [`DecideError::Failed`] and changes nothing.
    pub(in crate::lifecycle) async fn decide<T, F>(
        &self,
        what: &'static str,
        decide: F,
    ) -> Result<T, DecideError>
    where
        T: Send + 'static,
        F: Fn(&mut Registry) -> T + Send + Sync + 'static,
    {
        let decide = Arc::new(decide);
        for attempt in 1..=DECIDE_ATTEMPTS {
            let permit = self.permit().await?;
            let (mut copy, epoch) = {
                let registry = self.registry();
                (registry.clone(), self.epoch())
            };
            let job = decide.clone();
            let hook = self.hook();
            let task = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let started = std::time::Instant::now();
                hook(what);
                let out = job(&mut copy);
                (copy, out, started.elapsed())
            });
            let (copy, out, took) = task.await.map_err(|e| self.lost(what, e))?;
            let mut registry = self.registry();
            if self.epoch() == epoch {
                *registry = copy;
                return Ok(out);
            }
            drop(registry);
            info!(
                what,
                attempt,
                took_us = took.as_micros(),
                "registry changed during the decision; deciding again"
            );
            if took < INLINE_MAX {
                return self.decide_locked(what, decide.as_ref()).await;
            }
        }
        Err(DecideError::Busy {
            attempts: DECIDE_ATTEMPTS,
        })
    }

    /// A decision that changes nothing: `look` gets a copy of the registry on a blocking thread,
    /// one decision at a time as in [`Self::decide`], and the copy is thrown away (the device
    /// plugin front's dry-run admission). A panic is [`DecideError::Failed`].
    pub async fn dry_run<T, F>(&self, what: &'static str, look: F) -> Result<T, DecideError>
    where
        T: Send + 'static,
        F: FnOnce(Registry) -> T + Send + 'static,
    {
        let permit = self.permit().await?;
        let copy = self.registry().clone();
        let hook = self.hook();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            hook(what);
            look(copy)
        })
        .await
        .map_err(|e| self.lost(what, e))
    }

    /// A decision's thread that did not come back (it panicked or was lost).
    fn lost(&self, what: &str, e: tokio::task::JoinError) -> DecideError {
        let reason = if e.is_panic() {
            panic_message(e.into_panic())
        } else {
            e.to_string()
        };
        self.failed(what, reason)
    }

    /// A decision shown to be quick, made under the registry lock (on a copy, so that a panic
    /// changes nothing).
    async fn decide_locked<T>(
        &self,
        what: &'static str,
        decide: &(dyn Fn(&mut Registry) -> T + Send + Sync),
    ) -> Result<T, DecideError> {
        let _permit = self.permit().await?;
        let hook = self.hook();
        let mut registry = self.registry();
        let mut copy = registry.clone();
        let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            hook(what);
            decide(&mut copy)
        }));
        match decided {
            Ok(out) => {
                *registry = copy;
                Ok(out)
            }
            Err(payload) => {
                drop(registry);
                Err(self.failed(what, panic_message(payload)))
            }
        }
    }

    /// The one decision permit.
    async fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, DecideError> {
        self.deciding
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| DecideError::Failed {
                reason: e.to_string(),
            })
    }

    /// Logs and counts a decision that did not come back.
    fn failed(&self, what: &str, reason: String) -> DecideError {
        warn!(what, %reason, "placement decision failed");
        self.metrics.decision_failed(what, "panicked");
        DecideError::Failed { reason }
    }

    /// What runs at the start of each decision: the test hook, if any, or nothing.
    fn hook(&self) -> impl Fn(&str) + Send + 'static {
        #[cfg(any(test, feature = "testing"))]
        let hook = self
            .decision_hook
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        move |_what: &str| {
            #[cfg(any(test, feature = "testing"))]
            if let Some(hook) = &hook {
                hook(_what);
            }
        }
    }
}

/// The words of a panic's payload.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string());
    format!("panicked: {text}")
}

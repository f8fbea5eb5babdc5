//! A server task on a unix socket, the one home of the fake runtimes' serving (`e2e::runtime`,
//! `relay::fake`): bound on a path (a leftover socket file is
//! removed first), told to stop by a signal, its socket removed once it stopped.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running server task.
pub struct Served {
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Served {
    /// Binds `path` and runs `serve(listener, stopped)` on a task of its own; `stopped` resolves
    /// when [`Served::stop`] is called.
    pub fn spawn<F, Fut>(path: &Path, serve: F) -> Self
    where
        F: FnOnce(UnixListener, oneshot::Receiver<()>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let _ = std::fs::remove_file(path);
        let listener =
            UnixListener::bind(path).unwrap_or_else(|e| panic!("binding {}: {e}", path.display()));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, stopped));
        Self {
            path: path.to_path_buf(),
            stop: Some(stop),
            task,
        }
    }

    /// Signals the task, gives it five seconds to finish, ends it, and removes the socket.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

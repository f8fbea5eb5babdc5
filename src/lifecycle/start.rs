//! Brings placement up before the relay accepts its first call: the decision core from the
//! machine and settings, recovery against the runtime, the first pool/drift pass, then the
//! background tasks (pool updater, pod-spec watcher).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::hook::{PlacementHook, Placer};
use super::pool::{self, PoolSettings};
use super::recover::{recover, Recovery};
use super::registry::Registry;
use super::runtime::Runtime;
use super::store::{Store, CHECKPOINT_NAME};
use crate::knowledge::apiserver::{ApiServerError, ApiServerOptions};
use crate::knowledge::{Knowledge, PodCache};
use crate::placement::node::{Node, NodeError};
use crate::placement::Config;
use crate::state::Checkpoint;
use crate::telemetry::Metrics;
use crate::topology::Topology;

/// Where pod specs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    /// CRI requests only (inference).
    CriOnly,
    /// The kubelet Pods API on this socket.
    PodsApi(PathBuf),
    /// The Kubernetes API server (this node's pods).
    ApiServer(ApiServerOptions),
}

/// Everything placement needs to start.
#[derive(Debug, Clone)]
pub struct Options {
    pub topology: Topology,
    pub config: Config,
    pub state_dir: PathBuf,
    pub spec_source: SpecSource,
    pub pool: PoolSettings,
    /// How long to wait for the runtime to answer recovery; `None` waits as long as it takes.
    pub runtime_wait: Option<Duration>,
}

/// Why placement could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("resource manager settings: {0}")]
    Node(#[from] NodeError),
    #[error("runtime did not answer recovery within {waited:?}: {status}")]
    Runtime {
        waited: Duration,
        status: tonic::Status,
    },
    #[error("api server: {0}")]
    ApiServer(#[from] ApiServerError),
}

/// Placement, running.
#[derive(Debug)]
pub struct Started {
    pub placer: Arc<Placer>,
    pub hook: PlacementHook,
    pub recovery: Recovery,
    tasks: Vec<JoinHandle<()>>,
}

impl Started {
    /// Stops the background tasks.
    pub fn stop(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts placement in front of the runtime at `runtime_socket`.
pub async fn start(
    options: Options,
    runtime_socket: PathBuf,
    metrics: Arc<Metrics>,
) -> Result<Started, StartError> {
    let node = Node::new(options.topology, options.config)?;
    let mut registry = Registry::new(node);
    let store = Store::new(Checkpoint::new(&options.state_dir, CHECKPOINT_NAME));
    let runtime = Runtime::new(&runtime_socket);

    let started = tokio::time::Instant::now();
    let recovery = loop {
        match recover(&mut registry, &store, &runtime).await {
            Ok(report) => break report,
            Err(status) => {
                let waited = started.elapsed();
                if options.runtime_wait.is_some_and(|max| waited >= max) {
                    return Err(StartError::Runtime { waited, status });
                }
                warn!(code = ?status.code(), message = status.message(), "runtime not answering; recovery retries");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };

    let mut tasks = Vec::new();
    let knowledge = match &options.spec_source {
        SpecSource::CriOnly => Knowledge::CriOnly,
        SpecSource::PodsApi(socket) => {
            let cache = Arc::new(PodCache::default());
            tasks.push(tokio::spawn(crate::knowledge::pods_api::watch(
                socket.clone(),
                cache.clone(),
            )));
            Knowledge::Watched(cache)
        }
        SpecSource::ApiServer(api) => {
            let connection = api.connection()?;
            info!(server = connection.server(), node = %api.node_name, "pod specs from the api server");
            let cache = Arc::new(PodCache::default());
            tasks.push(tokio::spawn(crate::knowledge::apiserver::watch(
                connection,
                api.node_name.clone(),
                cache.clone(),
            )));
            Knowledge::Watched(cache)
        }
    };
    metrics.set_runtime_connected(true);
    let placer = Arc::new(Placer::new(registry, store, knowledge, metrics));
    placer.publish_pools();
    placer.persist().await;
    let applied = pool::apply_pending(&placer, &runtime, &options.pool).await;
    let corrected = pool::check_drift(&placer, &runtime, &options.pool).await;
    info!(applied, corrected, "placement ready");
    tasks.push(tokio::spawn(pool::run(
        placer.clone(),
        runtime,
        options.pool,
        std::future::pending(),
    )));
    Ok(Started {
        hook: PlacementHook::new(placer.clone()),
        placer,
        recovery,
        tasks,
    })
}

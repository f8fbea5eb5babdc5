//! Brings placement up before the relay accepts its first call: the decision core from the
//! machine and settings, recovery against the runtime, the first pool/drift pass, then the
//! background tasks (pool updater, pod-spec watcher).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::placer::Placer;
use super::pool::{self, PoolSettings};
use super::recover::{recover, Recovery};
use super::registry::Registry;
use super::runtime::Runtime;
use super::store::{Store, CHECKPOINT_NAME};
use crate::knowledge::apiserver::{ApiServerError, ApiServerOptions};
use crate::knowledge::{Knowledge, PodCache, SpecOrigin, Watched};
use crate::placement::node::{Node, NodeError};
use crate::placement::Config;
use crate::report::ReportOptions;
use crate::state::Checkpoint;
use crate::telemetry::Metrics;
use crate::topology::Topology;

/// How often a checkpoint that cannot be written is tried again.
pub const STATE_RETRY: Duration = Duration::from_secs(1);

/// How long what the runtime did waits to be written by the state writer: the next decision's
/// write usually covers it before (a pod's CreateContainer follows its RunPodSandbox within
/// this), so decisions seldom wait behind a write of the state writer.
pub const STATE_LAG: Duration = Duration::from_secs(1);

/// Where pod specs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    /// CRI requests only (inference).
    CriOnly,
    /// The kubelet Pods API on this socket.
    PodsApi(PathBuf),
    /// The Kubernetes API server (this node's pods).
    ApiServer(ApiServerOptions),
    /// `podKnowledge` unset: the Pods API on this socket whenever it is there (it may appear
    /// after numa-shim starts, with the kubelet), else the API server when given, else CRI.
    Auto {
        pods_api: PathBuf,
        api_server: Option<ApiServerOptions>,
    },
}

/// Everything placement needs to start.
#[derive(Debug, Clone)]
pub struct Options {
    pub topology: Topology,
    pub config: Config,
    pub state_dir: PathBuf,
    pub spec_source: SpecSource,
    /// Events and pod status for refused pods (`None`: nothing is written).
    pub reports: Option<ReportOptions>,
    pub pool: PoolSettings,
    /// How long to wait for the runtime to answer recovery; `None` waits as long as it takes.
    pub runtime_wait: Option<Duration>,
    /// Where decisions read the kubelet's devices (`None`: decisions without devices).
    pub devices: Option<Arc<dyn super::devices::DeviceSource>>,
    /// Where decisions read the pods' DRA claims (`None`: decisions without claims).
    pub claims: Option<Arc<dyn super::claims::ClaimSource>>,
}

/// Why placement could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("resource manager settings: {0}")]
    Node(#[from] NodeError),
    #[error("runtime did not answer recovery within {waited:?}: {source}")]
    Runtime {
        waited: Duration,
        source: super::runtime::RuntimeError,
    },
    #[error("api server: {0}")]
    ApiServer(#[from] ApiServerError),
}

/// Placement, running.
#[derive(Debug)]
pub struct Started {
    pub placer: Arc<Placer>,
    pub recovery: Recovery,
    tasks: Vec<JoinHandle<()>>,
}

impl Started {
    /// A clean stop: the background tasks end and what the state writer had not written yet is
    /// written (a failure is logged: recovery reads it back from the runtime).
    pub async fn shutdown(&self) {
        self.stop();
        if let Err(err) = self.placer.flush().await {
            warn!(error = %err, "the last state cannot be written");
        }
    }

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
        match recover(&mut registry, &store, &runtime, &options.pool.host).await {
            Ok(report) => break report,
            Err(source) => {
                let waited = started.elapsed();
                if options.runtime_wait.is_some_and(|max| waited >= max) {
                    return Err(StartError::Runtime { waited, source });
                }
                warn!(error = %source, "runtime not answering; recovery retries");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };

    let mut tasks = Vec::new();
    let mut sources = Vec::new();
    let (pods_api, api_server) = match &options.spec_source {
        SpecSource::CriOnly => (None, None),
        SpecSource::PodsApi(socket) => (Some(socket), None),
        SpecSource::ApiServer(api) => (None, Some(api)),
        SpecSource::Auto {
            pods_api,
            api_server,
        } => (Some(pods_api), api_server.as_ref()),
    };
    if let Some(socket) = pods_api {
        let cache = Arc::new(PodCache::new(Some(socket.clone())));
        tasks.push(tokio::spawn(crate::knowledge::pods_api::watch(
            socket.clone(),
            cache.clone(),
        )));
        sources.push(Watched {
            origin: SpecOrigin::PodsApi,
            cache,
        });
    }
    if let Some(api) = api_server {
        let connection = api.connection()?;
        info!(server = connection.server(), node = %api.node_name, "pod specs from the api server");
        let cache = Arc::new(PodCache::default());
        let settings = crate::knowledge::apiserver::WatchSettings::default();
        let stats = settings.stats.clone();
        metrics.on_render(move |m| m.set_apiserver_watch(&stats.rows()));
        tasks.push(tokio::spawn(crate::knowledge::apiserver::watch_with(
            connection,
            api.node_name.clone(),
            cache.clone(),
            settings,
        )));
        sources.push(Watched {
            origin: SpecOrigin::ApiServer,
            cache,
        });
    }
    let knowledge = if sources.is_empty() {
        Knowledge::CriOnly
    } else {
        Knowledge::Watched(sources)
    };
    let mut placer = Placer::new(registry, store, knowledge, metrics.clone());
    if let Some(devices) = options.devices.clone() {
        placer = placer.with_devices(devices);
    }
    if let Some(claims) = options.claims.clone() {
        placer = placer.with_claims(claims);
    }
    if let Some(reports) = &options.reports {
        let connection = reports.api.connection()?;
        info!(server = connection.server(), node = %reports.api.node_name, mode = ?reports.mode, "refused pods reported to the api server");
        let (reporter, task) =
            crate::report::start(connection, reports.api.node_name.clone(), reports.mode);
        tasks.push(task);
        let stats = reporter.stats().clone();
        metrics.on_render(move |m| m.set_refusal_reports(&stats.rows()));
        placer = placer.with_reporter(reporter);
    }
    metrics.set_runtime_connected(true);
    let placer = Arc::new(placer);
    placer.publish_pools();
    if let Err(err) = placer.persist().await {
        // Serving continues: the relay refuses placements until the state can be written, and
        // the state writer below notices when it can.
        warn!(error = %err, "the recovered state cannot be written yet");
    }
    let writer = placer.clone();
    tasks.push(tokio::spawn(async move {
        writer.keep_state(STATE_RETRY, STATE_LAG).await;
    }));
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
        placer,
        recovery,
        tasks,
    })
}

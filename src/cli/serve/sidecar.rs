//! The parts of `serve` that run beside the relay: the metrics endpoint (with `/placement`),
//! which a reload can move, and the SIGHUP handler that re-reads the file and applies what
//! [`reload::plan`] allows. Never touches placement state beyond reading it for `/placement`.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::{load_settings, reload, stopped, Args, Settings};
use crate::inspect::{add_devices, KnowledgeView, PlacementView};
use crate::knowledge::Link;
use crate::lifecycle::Placer;
use crate::podresources::KubeletSource;
use crate::telemetry::{self, Metrics, MetricsServer, PlacementProvider, Readiness};

/// A running metrics endpoint that a reload can stop.
pub(super) struct MetricsTask {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What every (re)start of the metrics endpoint needs.
#[derive(Clone)]
pub(super) struct MetricsEnv {
    pub(super) metrics: Arc<Metrics>,
    pub(super) readiness: Readiness,
    pub(super) placement: Option<PlacementProvider>,
    pub(super) shutdown: watch::Receiver<bool>,
}

/// `GET /placement`: the registry's view once placement has started, with the device plugin
/// devices of the kubelet's PodResources (`kubelet`, when numa-shim reads it: the same socket
/// PodResources merges devices from; without an answer the view has no devices, and
/// [`KubeletSource`] logs why).
pub(super) fn placement_provider(
    slot: Arc<OnceLock<Arc<Placer>>>,
    kubelet: Option<Arc<KubeletSource>>,
) -> PlacementProvider {
    Arc::new(move || {
        let view = registry_view(&slot);
        let kubelet = kubelet.clone();
        Box::pin(async move {
            let mut view = view?;
            if let Some(kubelet) = kubelet {
                let (allocatable, list) = tokio::join!(kubelet.allocatable(), kubelet.list());
                if let (Some(allocatable), Some(list)) = (allocatable, list) {
                    add_devices(&mut view, &allocatable, &list);
                }
            }
            Some(view.to_json())
        })
    })
}

/// The view of the registry (the lock held only while it is copied), refusals and sources.
fn registry_view(slot: &OnceLock<Arc<Placer>>) -> Option<PlacementView> {
    let placer = slot.get()?;
    let mut view = PlacementView::from_registry(&placer.registry());
    view.refused = placer.refusals();
    view.pod_knowledge = placer
        .knowledge()
        .links()
        .into_iter()
        .map(|(origin, link)| KnowledgeView {
            source: origin.as_str().to_string(),
            link: match link {
                Link::Live => "live",
                Link::Connecting => "connecting",
                Link::Absent => "absent",
            }
            .to_string(),
        })
        .collect();
    Some(view)
}

/// Binds and serves the metrics endpoint at `addr` (nothing when `None`).
pub(super) async fn start_metrics(
    addr: Option<SocketAddr>,
    env: &MetricsEnv,
) -> Result<Option<MetricsTask>, telemetry::http::HttpError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let mut server = MetricsServer::bind(addr, env.metrics.clone(), env.readiness.clone()).await?;
    if let Some(provider) = &env.placement {
        server = server.with_placement(provider.clone());
    }
    info!(address = %server.local_addr(), "metrics serving");
    let (stop, own) = watch::channel(false);
    let shutdown = env.shutdown.clone();
    let task = tokio::spawn(server.serve(async move {
        tokio::select! {
            () = stopped(shutdown) => {}
            () = stopped(own) => {}
        }
    }));
    Ok(Some(MetricsTask { stop, task }))
}

impl MetricsTask {
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// On SIGHUP: re-reads the config file, applies what can change while serving and logs what
/// is refused (see [`reload::plan`]). An invalid file changes nothing.
pub(super) async fn reload_on_hangup(
    args: Args,
    mut current: Settings,
    env: MetricsEnv,
    mut task: Option<MetricsTask>,
) {
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(err) => {
            warn!(error = %err, "cannot listen for SIGHUP; configuration reload is off");
            return;
        }
    };
    while hangup.recv().await.is_some() {
        if args.files.config.is_none() {
            warn!("SIGHUP: no --config file to reload");
            continue;
        }
        // Reading files (config, kubelet config, sockets probed, the hostname) blocks: not on the
        // worker thread that relays CRI calls.
        let reading = args.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            load_settings(&reading).map_err(|err| err.to_string())
        })
        .await
        .unwrap_or_else(|err| Err(format!("reading the configuration failed: {err}")));
        let new = match loaded {
            Ok(new) => new,
            Err(err) => {
                error!(error = %err, "reload refused: keeping the running configuration");
                continue;
            }
        };
        let mut plan = reload::plan(&current, &new);
        for refusal in &plan.refused {
            warn!(
                field = refusal.field,
                reason = refusal.reason,
                "reload: change not applied"
            );
        }
        let mut applied = Vec::new();
        for change in plan.apply.drain(..) {
            match &change {
                reload::Change::MetricsAddress(addr) => {
                    let moved = move_metrics(*addr, current.metrics_address, &env, task.take());
                    match moved.await {
                        Ok(next) => {
                            task = next;
                            applied.push(change);
                        }
                        Err((err, old)) => {
                            error!(error = %err, "reload: metrics endpoint not moved");
                            task = old;
                        }
                    }
                }
                reload::Change::LogLevel(level) => {
                    match crate::telemetry::logging::set_level(level.as_deref()) {
                        Ok(()) => {
                            info!(
                                level = level.as_deref().unwrap_or("RUST_LOG or info"),
                                "reload: log filter replaced"
                            );
                            applied.push(change);
                        }
                        Err(err) => error!(error = %err, "reload: log filter not changed"),
                    }
                }
            }
        }
        plan.apply = applied;
        info!(
            applied = plan.apply.len(),
            refused = plan.refused.len(),
            "configuration reloaded"
        );
        current = reload::applied(&current, &plan);
    }
}

/// Starts the endpoint at `addr` and stops `old`; on failure `old` keeps serving. If the new
/// address needs the old one's port, the old endpoint is stopped first and, should the new bind
/// still fail, brought back.
async fn move_metrics(
    addr: Option<SocketAddr>,
    old_addr: Option<SocketAddr>,
    env: &MetricsEnv,
    old: Option<MetricsTask>,
) -> Result<Option<MetricsTask>, (telemetry::http::HttpError, Option<MetricsTask>)> {
    match start_metrics(addr, env).await {
        Ok(next) => {
            if let Some(old) = old {
                old.stop().await;
            }
            Ok(next)
        }
        Err(_) if old.is_some() => {
            if let Some(old) = old {
                old.stop().await;
            }
            match start_metrics(addr, env).await {
                Ok(next) => Ok(next),
                Err(err) => Err((err, start_metrics(old_addr, env).await.ok().flatten())),
            }
        }
        Err(err) => Err((err, old)),
    }
}

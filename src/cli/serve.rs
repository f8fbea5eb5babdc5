//! `numa-shim serve`: runs the CRI relay between the kubelet and the container runtime until
//! SIGTERM/SIGINT, with placement, the metrics endpoint and readiness. Turns the configuration
//! (the file with the flags laid over it once, `Config::with_flags`) into its [`Settings`]; the
//! relay lives in `crate::relay`, placement in `crate::lifecycle`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::flags::FileFlags;
use crate::config::{self, Config, LogFormat, PodKnowledge};
use crate::k8s::kubelet_config::KubeletConfiguration;
use crate::k8s::Severity;
use crate::knowledge::apiserver::claims::ClaimReader;
use crate::knowledge::apiserver::ApiServerOptions;
use crate::lifecycle::Placer;
use crate::lifecycle::{self, pool::PoolSettings, SpecSource};
use crate::placement::config::{CpuPolicy, MemoryPolicy};
use crate::podresources;
use crate::relay::{self, Hook, RelayBuilder, SocketOptions};
use crate::report::{ReportMode, ReportOptions};
use crate::telemetry::{self, Metrics, Readiness};
use crate::topology::Topology;
use crate::transport;

mod crio_check;
pub mod reload;
mod sidecar;

use sidecar::{placement_provider, reload_on_hangup, start_metrics, MetricsEnv};

/// Default listening endpoint.
pub const DEFAULT_LISTEN: &str = "unix:///run/numa-shim/cri.sock";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/numa-shim";

/// Tokio worker threads unless `TOKIO_WORKER_THREADS` says otherwise. One worker measured
/// 12–30 % less CPU per relayed call than two and no worse latency (docs/PERFORMANCE.md): a call
/// crosses fewer threads. Placement decisions run on that worker as well.
pub const DEFAULT_WORKER_THREADS: usize = 1;

/// Arguments of `numa-shim serve`. Flags override the config file.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Args {
    /// Endpoint to listen on [default: unix:///run/numa-shim/cri.sock].
    #[arg(long)]
    pub listen: Option<String>,
    /// Runtime CRI endpoint [default: first of /run/containerd/containerd.sock,
    /// /run/crio/crio.sock, /var/run/... that exists].
    #[arg(long)]
    pub runtime: Option<String>,
    /// The configuration files: numa-shim's, the kubelet's, CRI-O's; the topology.
    #[command(flatten)]
    pub files: FileFlags,
    /// Octal mode of the listening socket [default: 0660].
    #[arg(long)]
    pub socket_mode: Option<String>,
    /// Numeric group id of the listening socket [default: the process group].
    #[arg(long)]
    pub socket_group: Option<u32>,
    /// Grace period for in-flight calls on shutdown, e.g. 10s [default: 10s].
    #[arg(long)]
    pub shutdown_grace: Option<String>,
    /// Log format [default: text].
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. info or info,numa_shim::relay=debug [default: RUST_LOG, else info].
    #[arg(long)]
    pub log_level: Option<String>,
    /// Checkpoint directory [default: /var/lib/numa-shim].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where pod specs come from [default: the Pods API whenever its socket is there (picked up
    /// when it appears), else the API server when a kubeconfig is given, else cri].
    #[arg(long, value_enum)]
    pub pod_knowledge: Option<PodKnowledge>,
    /// The kubelet Pods API socket [default: /var/lib/kubelet/pods-api/pods-api.sock].
    #[arg(long)]
    pub pods_api_socket: Option<PathBuf>,
    /// Kubeconfig for `--pod-knowledge apiserver` [default: the in-cluster config].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name in the API server [default: the hostname].
    #[arg(long)]
    pub node_name: Option<String>,
    /// What to write to the API server about refused pods [default: events-and-status with
    /// --pod-knowledge apiserver or a kubeconfig, else none].
    #[arg(long, value_enum)]
    pub refusal_reports: Option<ReportMode>,
    /// Read the pods' DRA claims from the API server and align the pod with its devices' NUMA
    /// nodes [default: true with --pod-knowledge apiserver or a kubeconfig, else false].
    #[arg(long)]
    pub dra_claims: Option<bool>,
    /// How long one pod's claims may take to read before numa-shim decides without them, e.g.
    /// 10s [default: 10s].
    #[arg(long)]
    pub dra_claims_timeout: Option<String>,
    /// Address for /metrics, /healthz and /readyz, e.g. 127.0.0.1:9464 [default: off].
    #[arg(long)]
    pub metrics_address: Option<String>,
    /// How often running containers' cpusets are checked against the kernel, e.g. 10s.
    #[arg(long)]
    pub drift_period: Option<String>,
    /// Where to serve PodResources v1 [default: <state-dir>/pod-resources/kubelet.sock]; `none`
    /// turns it off.
    #[arg(long)]
    pub pod_resources_socket: Option<PathBuf>,
    /// The kubelet's PodResources socket for devices and dynamic resources
    /// [default: /var/lib/kubelet/pod-resources/kubelet.sock]; `none` never asks.
    #[arg(long)]
    pub kubelet_pod_resources_socket: Option<PathBuf>,
}

impl Args {
    /// The keys the flags stand for, set where a flag was given (`Config::with_flags` lays
    /// them over the file).
    pub fn as_config(&self) -> Config {
        Config {
            listen: self.listen.clone(),
            runtime: self.runtime.clone(),
            socket_mode: self.socket_mode.clone(),
            socket_group: self.socket_group,
            shutdown_grace_period: self.shutdown_grace.clone(),
            log_format: self.log_format,
            log_level: self.log_level.clone(),
            state_dir: self.state_dir.clone(),
            pod_knowledge: self.pod_knowledge,
            pods_api_socket: self.pods_api_socket.clone(),
            kubeconfig: self.kubeconfig.clone(),
            node_name: self.node_name.clone(),
            refusal_reports: self.refusal_reports,
            dra_claims: self.dra_claims,
            dra_claims_timeout: self.dra_claims_timeout.clone(),
            metrics_address: self.metrics_address.clone(),
            drift_period: self.drift_period.clone(),
            pod_resources_socket: self.pod_resources_socket.clone(),
            kubelet_pod_resources_socket: self.kubelet_pod_resources_socket.clone(),
            ..self.files.as_config()
        }
    }

    /// The config file with the flags laid over it, not yet validated.
    fn merged(&self) -> Result<Config, config::ConfigError> {
        Ok(self.files.load()?.with_flags(&self.as_config()))
    }
}

/// Everything `serve` needs, after merging flags, file and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub listen: PathBuf,
    pub runtime: PathBuf,
    pub socket: SocketOptions,
    pub shutdown_grace: Duration,
    pub log_format: LogFormat,
    /// The log filter; `None`: `RUST_LOG`, else `info`.
    pub log_level: Option<String>,
    pub state_dir: PathBuf,
    pub topology: PathBuf,
    pub spec_source: SpecSource,
    /// Events and pod status for refused pods; `None` when off.
    pub reports: Option<ReportOptions>,
    /// DRA claims read for decisions; `None` when off.
    pub claims: Option<ClaimOptions>,
    pub metrics_address: Option<SocketAddr>,
    pub drift_period: Duration,
    pub kubelet: KubeletConfiguration,
    /// The kubelet's configuration as it runs, when given (checked against numa-shim's at start).
    pub kubelet_running: Option<config::KubeletRunning>,
    /// The PodResources server; `None` when turned off.
    pub pod_resources: Option<podresources::Options>,
    /// CRI-O's configuration to check at start (`crate::crio`); `None`: its Status answer only.
    pub crio_config: Option<PathBuf>,
    /// The device plugin front; `None` when off.
    pub device_plugin_front: Option<crate::deviceplugin::FrontOptions>,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), super::CliError> {
    let settings = load_settings(&args)?;
    telemetry::logging::init(settings.log_format, settings.log_level.as_deref())?;
    for warning in config_warnings(&args) {
        warn!(warning = %warning, "configuration");
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(DEFAULT_WORKER_THREADS);
    }
    let runtime = builder.build()?;
    runtime.block_on(serve(args, settings))
}

/// Reads the config file (if any), lays the flags over it, validates the result (flags get the
/// same checks as the keys they stand for) and resolves it.
pub fn load_settings(args: &Args) -> Result<Settings, super::CliError> {
    let merged = args.merged()?;
    let errors = merged.validate();
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(format!("invalid configuration: {}", list.join("; ")).into());
    }
    settings(&merged, Path::new("/"))
}

/// The warnings `check-config` would show for the merged configuration (logged at start).
pub fn config_warnings(args: &Args) -> Vec<String> {
    let merged = args.merged().unwrap_or_default();
    merged.warnings().iter().map(ToString::to_string).collect()
}

async fn serve(args: Args, settings: Settings) -> Result<(), super::CliError> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => info!(signal = "SIGTERM", "shutdown requested"),
            _ = int.recv() => info!(signal = "SIGINT", "shutdown requested"),
        }
        let _ = stop_tx.send(true);
    });
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::new();
    let mut options = placement_options(&settings)?;
    let slot: Arc<OnceLock<Arc<Placer>>> = Arc::new(OnceLock::new());
    // `/placement` shows the kubelet's devices from the socket PodResources merges them from.
    // The device plugin front's true device topology, put back on the kubelet's PodResources
    // answers wherever they are read (docs/devices.md, "The device plugin front").
    let fronted = settings
        .device_plugin_front
        .as_ref()
        .map(|_| Arc::new(crate::lifecycle::devices::FrontedTopology::default()));
    let kubelet = settings.pod_resources.as_ref().and_then(|o| {
        let path = o.kubelet_socket.as_ref()?;
        let source = podresources::KubeletSource::new(path, o.kubelet_timeout);
        Some(Arc::new(match &fronted {
            Some(t) => source.with_fronted(t.clone()),
            None => source,
        }))
    });
    // Decisions take the kubelet's devices from the same socket (docs/devices.md).
    if let (Some(options), Some(kubelet)) = (options.as_mut(), &kubelet) {
        options.devices = Some(kubelet.clone());
    }
    // And the pods' DRA claims from the API server (docs/devices.md, "DRA claims").
    if let (Some(options), Some(claims)) = (options.as_mut(), &settings.claims) {
        let reader = ClaimReader::new(claims.api.connection()?, &claims.attributes)
            .with_timeout(claims.timeout);
        info!(server = reader.server(), attributes = ?claims.attributes, timeout = ?claims.timeout, "DRA claims read from the api server for decisions");
        options.claims = Some(Arc::new(reader));
    }
    let env = MetricsEnv {
        metrics: metrics.clone(),
        readiness: readiness.clone(),
        placement: options
            .as_ref()
            .map(|_| placement_provider(slot.clone(), kubelet.clone())),
        shutdown: stop_rx.clone(),
    };
    let task = start_metrics(settings.metrics_address, &env).await?;
    tokio::spawn(reload_on_hangup(args, settings.clone(), env, task));
    let builder = RelayBuilder::new(&settings.listen, &settings.runtime)
        .socket_options(settings.socket)
        .shutdown_grace(settings.shutdown_grace)
        .metrics(metrics.clone());
    match options {
        Some(options) => {
            // Start-up waits for the runtime (and recovers from it): a stop asked for meanwhile
            // ends numa-shim instead of waiting for a runtime that may never answer.
            let start = lifecycle::start(options, settings.runtime.clone(), metrics);
            let started = tokio::select! {
                started = start => started?,
                () = stopped(stop_rx.clone()) => {
                    info!("stopped during start-up, before serving");
                    return Ok(());
                }
            };
            let _ = slot.set(started.placer.clone());
            let placer = started.placer.clone();
            readiness.add_check(Arc::new(move || placer.state_problem()));
            let reserved = started.placer.registry().node().reserved_cpus();
            tokio::spawn(crio_check::warn_about_crio(
                settings.runtime.clone(),
                settings.crio_config.clone(),
                reserved,
            ));
            if let Some(options) = &settings.pod_resources {
                start_pod_resources(
                    options,
                    started.placer.clone(),
                    fronted.clone(),
                    stop_rx.clone(),
                )
                .await?;
            }
            if let (Some(front), Some(topology)) = (&settings.device_plugin_front, &fronted) {
                let mut chooser = crate::deviceplugin::Chooser::new(Some(started.placer.clone()));
                if let Some(k) = &kubelet {
                    chooser = chooser.with_kubelet(k.clone());
                }
                match &settings.spec_source {
                    lifecycle::SpecSource::PodsApi(socket)
                    | lifecycle::SpecSource::Auto {
                        pods_api: socket, ..
                    } => chooser = chooser.with_pods_api(socket.clone()),
                    _ => {}
                }
                crate::deviceplugin::start(
                    front.clone(),
                    chooser,
                    topology.clone(),
                    stop_rx.clone(),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            run_relay(
                builder.hook(relay::LifecycleHook::new(started.placer.clone())),
                &readiness,
                stop_rx,
            )
            .await?;
            started.shutdown().await;
        }
        None => {
            info!("cpuManagerPolicy and memoryManagerPolicy are none: relaying without placement");
            if let (Some(front), Some(topology)) = (&settings.device_plugin_front, &fronted) {
                warn!("devicePluginFront without placement: the front answers the kubelet's own device choice");
                crate::deviceplugin::start(
                    front.clone(),
                    crate::deviceplugin::Chooser::new(None),
                    topology.clone(),
                    stop_rx.clone(),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            run_relay(builder, &readiness, stop_rx).await?;
        }
    }
    Ok(())
}

async fn run_relay<H: Hook>(
    builder: RelayBuilder<H>,
    readiness: &Readiness,
    stop: watch::Receiver<bool>,
) -> Result<(), super::CliError> {
    let relay = builder.bind().await?;
    info!(
        listen = %relay.path().display(),
        runtime = %relay.runtime().display(),
        version = env!("CARGO_PKG_VERSION"),
        "numa-shim serving"
    );
    readiness.mark_ready();
    relay.serve_with_shutdown(stopped(stop)).await;
    Ok(())
}

/// Binds the PodResources socket and serves it in the background until `stop`.
async fn start_pod_resources(
    options: &podresources::Options,
    placer: Arc<lifecycle::Placer>,
    fronted: Option<Arc<crate::lifecycle::devices::FrontedTopology>>,
    stop: watch::Receiver<bool>,
) -> Result<(), super::CliError> {
    let socket = SocketOptions {
        mode: options.mode,
        group: None,
    };
    let bound = crate::listen::bind(&options.socket, socket).await?;
    let (inode, path) = (bound.inode(), bound.path.clone());
    let mut service = podresources::PodResourcesService::new(placer, options);
    if let Some(t) = fronted {
        service = service.with_fronted(t);
    }
    tokio::spawn(async move {
        if let Err(e) = podresources::serve(bound.listener, service, stopped(stop)).await {
            warn!(error = %e, "pod-resources server stopped");
        }
        crate::listen::remove_if_same(&path, inode);
    });
    Ok(())
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The placement options, or `None` when both resource managers are off (pure relay).
pub fn placement_options(
    settings: &Settings,
) -> Result<Option<lifecycle::Options>, super::CliError> {
    let topology = Topology::load(&settings.topology)?;
    let resolved = settings.kubelet.resolve(&topology)?;
    for warning in &resolved.warnings {
        warn!(warning = %warning, "configuration");
    }
    let config = resolved.config;
    if config.cpu_policy == CpuPolicy::None && config.memory_policy == MemoryPolicy::None {
        return Ok(None);
    }
    if let Some(running) = &settings.kubelet_running {
        warn_about_kubelet(running, &topology, &config);
    }
    let pool = PoolSettings {
        drift_period: settings.drift_period,
        ..PoolSettings::default()
    };
    Ok(Some(lifecycle::Options {
        topology,
        config,
        state_dir: settings.state_dir.clone(),
        spec_source: settings.spec_source.clone(),
        reports: settings.reports.clone(),
        pool,
        runtime_wait: None,
        devices: None,
        claims: None,
    }))
}

/// Logs, loudly, what the kubelet's configuration gets wrong under numa-shim (its own managers on,
/// reservations that do not mirror numa-shim's): `serve` still starts, `check-config` refuses.
fn warn_about_kubelet(
    running: &config::KubeletRunning,
    topology: &Topology,
    config: &crate::placement::Config,
) {
    let Ok(node) = crate::placement::node::Node::new(topology.clone(), config.clone()) else {
        return;
    };
    let reserved = node.reserved_cpus();
    for finding in running.config.conflicts_with(config, &reserved, topology) {
        match finding.severity {
            Severity::Error => error!(
                kubelet_config = %running.source,
                field = finding.field,
                problem = %finding.message,
                "THE KUBELET IS NOT SET UP FOR NUMA-SHIM: fix its configuration"
            ),
            Severity::Warning => warn!(
                kubelet_config = %running.source,
                field = finding.field,
                problem = %finding.message,
                "kubelet configuration"
            ),
        }
    }
}

/// Resolves the merged configuration (flags already over the file) over the defaults; `root` is
/// where runtime sockets are probed.
pub fn settings(file: &Config, root: &std::path::Path) -> Result<Settings, super::CliError> {
    let listen = file.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let runtime = match file.runtime.as_deref() {
        Some(endpoint) => transport::parse_endpoint(endpoint)?,
        None => transport::detect_runtime(root)?,
    };
    let mode = match file.socket_mode.as_deref() {
        Some(text) => config::parse_mode(text)?,
        None => SocketOptions::default().mode,
    };
    let state_dir = file
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    let pod_resources = pod_resources(file, &state_dir)?;
    let shutdown_grace = match file.shutdown_grace_period.as_deref() {
        Some(text) => config::parse_duration(text)?,
        None => relay::DEFAULT_SHUTDOWN_GRACE,
    };
    Ok(Settings {
        listen: transport::parse_endpoint(listen)?,
        runtime,
        socket: SocketOptions {
            mode,
            group: file.socket_group,
        },
        shutdown_grace,
        log_format: file
            .log_format
            .or(file.logging.as_ref().and_then(|l| l.format))
            .unwrap_or_default(),
        log_level: file.log_level().map(str::to_string),
        state_dir,
        topology: file.topology.clone().unwrap_or_else(|| root.join("sys")),
        spec_source: spec_source(file, root)?,
        reports: reports(file, root)?,
        claims: claims(file, root)?,
        metrics_address: match file.metrics_address.as_deref() {
            Some(text) => Some(
                text.parse()
                    .map_err(|e| format!("metricsAddress {text:?}: {e}"))?,
            ),
            None => None,
        },
        drift_period: match file.drift_period.as_deref() {
            Some(text) => config::parse_duration(text)?,
            None => PoolSettings::default().drift_period,
        },
        kubelet: config::kubelet_fields(file, None)?,
        kubelet_running: config::kubelet_running(file, None, None)?,
        pod_resources,
        crio_config: file.crio_config.clone(),
        device_plugin_front: device_plugin_front(file),
    })
}

/// The device plugin front's directories, defaults filled in (`None`: off).
fn device_plugin_front(file: &Config) -> Option<crate::deviceplugin::FrontOptions> {
    use crate::deviceplugin::{FrontOptions, KubeletSide, DEFAULT_DIR, DEFAULT_KUBELET_DIR};
    let front = file.device_plugin_front.as_ref()?;
    let kubelet = match &front.plugins_registry {
        Some(dir) => KubeletSide::PluginWatcher { dir: dir.clone() },
        None => KubeletSide::Classic {
            dir: front
                .kubelet_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBELET_DIR)),
        },
    };
    Some(FrontOptions {
        dir: front
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR)),
        kubelet,
    })
}

/// PodResources settings: socket under the state dir unless set; `none` (or an empty path in
/// the file) turns the server off, or the kubelet merge.
fn pod_resources(
    file: &Config,
    state_dir: &Path,
) -> Result<Option<podresources::Options>, super::CliError> {
    let socket = file
        .pod_resources_socket
        .clone()
        .unwrap_or_else(|| state_dir.join("pod-resources/kubelet.sock"));
    if config::is_off(&socket) {
        return Ok(None);
    }
    let kubelet = file
        .kubelet_pod_resources_socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(podresources::DEFAULT_KUBELET_SOCKET));
    let mut options = podresources::Options::new(socket);
    options.kubelet_socket = (!config::is_off(&kubelet)).then_some(kubelet);
    options.qps = file.pod_resources_qps.unwrap_or(options.qps);
    options.burst = file.pod_resources_burst.unwrap_or(options.burst);
    options.validate()?;
    Ok(Some(options))
}

/// Refusal reports: on by default wherever numa-shim is given the API server for pod specs.
fn reports(file: &Config, root: &Path) -> Result<Option<ReportOptions>, super::CliError> {
    let kubeconfig = file.kubeconfig.clone();
    let from_api_server = matches!(spec_source(file, root)?, SpecSource::ApiServer(_));
    let default = if from_api_server || kubeconfig.is_some() {
        ReportMode::EventsAndStatus
    } else {
        ReportMode::None
    };
    let mode = file.refusal_reports.unwrap_or(default);
    if mode == ReportMode::None {
        return Ok(None);
    }
    let node_name = file.node_name.clone();
    Ok(Some(ReportOptions {
        mode,
        api: ApiServerOptions::new(kubeconfig, node_name)?,
    }))
}

/// DRA claims in decisions: what they are read with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimOptions {
    pub api: ApiServerOptions,
    /// NUMA attribute names after the standard one (`draNumaAttributes`).
    pub attributes: Vec<String>,
    /// How long one pod's claims may take to read (`draClaimsTimeout`).
    pub timeout: std::time::Duration,
}

/// DRA claims: on by default wherever numa-shim is given the API server (as refusal reports).
fn claims(file: &Config, root: &Path) -> Result<Option<ClaimOptions>, super::CliError> {
    let kubeconfig = file.kubeconfig.clone();
    let from_api_server = matches!(spec_source(file, root)?, SpecSource::ApiServer(_));
    let on = file
        .dra_claims
        .unwrap_or(from_api_server || kubeconfig.is_some());
    if !on {
        return Ok(None);
    }
    Ok(Some(ClaimOptions {
        api: ApiServerOptions::new(kubeconfig, file.node_name.clone())?,
        attributes: file.dra_numa_attributes.clone().unwrap_or_default(),
        timeout: match file.dra_claims_timeout.as_deref() {
            Some(t) => crate::config::parse_duration(t)?,
            None => crate::knowledge::apiserver::claims::READ_TIMEOUT,
        },
    }))
}

fn spec_source(file: &Config, root: &Path) -> Result<SpecSource, super::CliError> {
    let socket = file.pods_api_socket.clone().unwrap_or_else(|| {
        root.join(crate::knowledge::pods_api::DEFAULT_SOCKET.trim_start_matches('/'))
    });
    let kubeconfig = file.kubeconfig.clone();
    let api_server = || -> Result<SpecSource, super::CliError> {
        let node_name = file.node_name.clone();
        Ok(SpecSource::ApiServer(ApiServerOptions::new(
            kubeconfig.clone(),
            node_name,
        )?))
    };
    Ok(match file.pod_knowledge {
        Some(PodKnowledge::Cri) => SpecSource::CriOnly,
        Some(PodKnowledge::PodsApi) => SpecSource::PodsApi(socket),
        Some(PodKnowledge::Apiserver) => api_server()?,
        // The kubelet makes its Pods API socket when it starts, usually after numa-shim: watch
        // for it rather than deciding once.
        None => SpecSource::Auto {
            pods_api: socket,
            api_server: match kubeconfig {
                Some(_) => match api_server()? {
                    SpecSource::ApiServer(options) => Some(options),
                    _ => None,
                },
                None => None,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> Args {
        Args::default()
    }

    /// `settings` of `file` with the flags of `a` over it, as `load_settings` does.
    fn resolved(a: &Args, file: &Config, root: &Path) -> Result<Settings, crate::cli::CliError> {
        settings(&file.clone().with_flags(&a.as_config()), root)
    }

    /// Flags get the same checks as the keys they stand for (a zero drift period would make
    /// the pool updater's timer panic; a world-writable socket is refused).
    #[test]
    fn flags_are_validated_like_the_file() {
        for (edit, key) in [
            (
                (|a: &mut Args| a.drift_period = Some("0".into())) as fn(&mut Args),
                "driftPeriod",
            ),
            (|a| a.socket_mode = Some("0666".into()), "socketMode"),
            (|a| a.log_level = Some(" ".into()), "logLevel"),
            (
                |a| a.metrics_address = Some("127.0.0.1:0".into()),
                "metricsAddress",
            ),
        ] {
            let mut a = args();
            a.runtime = Some("unix:///rt.sock".into());
            edit(&mut a);
            let err = load_settings(&a).unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
        // A flag replaces both spellings of a log key instead of disagreeing with one.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "runtime: unix:///rt.sock\nlogging: {format: text, level: info}\n",
        )
        .unwrap();
        let mut a = args();
        a.files.config = Some(path);
        a.log_format = Some(LogFormat::Json);
        a.log_level = Some("debug".into());
        let s = load_settings(&a).unwrap();
        assert_eq!(
            (s.log_format, s.log_level.as_deref()),
            (LogFormat::Json, Some("debug"))
        );
    }

    #[test]
    fn flags_override_file_over_defaults() {
        let file = Config {
            listen: Some("unix:///file.sock".into()),
            runtime: Some("unix:///rt.sock".into()),
            socket_mode: Some("0600".into()),
            socket_group: Some(5),
            shutdown_grace_period: Some("3s".into()),
            ..Config::default()
        };
        let root = std::path::Path::new("/nonexistent");
        let s = resolved(&args(), &file, root).unwrap();
        assert_eq!(s.listen, PathBuf::from("/file.sock"));
        assert_eq!(s.runtime, PathBuf::from("/rt.sock"));
        assert_eq!(
            s.socket,
            SocketOptions {
                mode: 0o600,
                group: Some(5)
            }
        );
        assert_eq!(s.shutdown_grace, Duration::from_secs(3));
        let mut a = args();
        a.listen = Some("/flag.sock".into());
        a.socket_mode = Some("0660".into());
        a.log_format = Some(LogFormat::Json);
        let s = resolved(&a, &file, root).unwrap();
        assert_eq!(s.listen, PathBuf::from("/flag.sock"));
        assert_eq!(s.socket.mode, 0o660);
        assert_eq!(s.log_format, LogFormat::Json);
    }

    #[test]
    fn defaults_need_a_runtime_socket() {
        let root = tempfile::tempdir().unwrap();
        let err = resolved(&args(), &Config::default(), root.path()).unwrap_err();
        assert!(err.to_string().contains("pass --runtime"), "{err}");
        std::fs::create_dir_all(root.path().join("run/containerd")).unwrap();
        let sock = root.path().join("run/containerd/containerd.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let s = resolved(&args(), &Config::default(), root.path()).unwrap();
        assert_eq!(s.runtime, sock);
        assert_eq!(s.listen, PathBuf::from("/run/numa-shim/cri.sock"));
        assert_eq!(s.socket, SocketOptions::default());
        assert_eq!(s.shutdown_grace, relay::DEFAULT_SHUTDOWN_GRACE);
    }

    #[test]
    fn api_server_source_from_flags_or_file() {
        let file = Config {
            runtime: Some("unix:///rt.sock".into()),
            kubeconfig: Some("/file.kubeconfig".into()),
            node_name: Some("file-node".into()),
            ..Config::default()
        };
        let root = std::path::Path::new("/nonexistent");
        let expect = |kubeconfig: Option<&str>, node: &str| {
            let options = ApiServerOptions::new(kubeconfig.map(PathBuf::from), Some(node.into()));
            SpecSource::ApiServer(options.unwrap())
        };
        // Without podKnowledge: the Pods API whenever it is there, then the API server.
        let auto = |kubeconfig: Option<&str>, node: &str| SpecSource::Auto {
            pods_api: root.join("var/lib/kubelet/pods-api/pods-api.sock"),
            api_server: match expect(kubeconfig, node) {
                SpecSource::ApiServer(o) => Some(o),
                _ => None,
            },
        };
        let s = resolved(&args(), &file, root).unwrap();
        assert_eq!(s.spec_source, auto(Some("/file.kubeconfig"), "file-node"));
        let mut a = args();
        a.kubeconfig = Some("/flag.kubeconfig".into());
        a.node_name = Some("flag-node".into());
        let s = resolved(&a, &file, root).unwrap();
        assert_eq!(s.spec_source, auto(Some("/flag.kubeconfig"), "flag-node"));
        a.pod_knowledge = Some(PodKnowledge::Apiserver);
        let s = resolved(&a, &file, root).unwrap();
        assert_eq!(s.spec_source, expect(Some("/flag.kubeconfig"), "flag-node"));
        a.pod_knowledge = Some(PodKnowledge::Cri);
        assert_eq!(
            resolved(&a, &file, root).unwrap().spec_source,
            SpecSource::CriOnly
        );
        let in_cluster = Config {
            pod_knowledge: Some(PodKnowledge::Apiserver),
            kubeconfig: None,
            ..file.clone()
        };
        let s = resolved(&args(), &in_cluster, root).unwrap();
        assert_eq!(s.spec_source, expect(None, "file-node"));
    }

    #[test]
    fn refusal_reports_follow_the_api_server_unless_set() {
        let file = Config {
            runtime: Some("unix:///rt.sock".into()),
            node_name: Some("n1".into()),
            ..Config::default()
        };
        let root = std::path::Path::new("/nonexistent");
        let api = |kubeconfig: Option<&str>| {
            ApiServerOptions::new(kubeconfig.map(PathBuf::from), Some("n1".into())).unwrap()
        };
        // No API server in sight: nothing is written.
        assert_eq!(resolved(&args(), &file, root).unwrap().reports, None);
        // A kubeconfig: Events and status through it.
        let with_kubeconfig = Config {
            kubeconfig: Some("/k.conf".into()),
            ..file.clone()
        };
        let s = resolved(&args(), &with_kubeconfig, root).unwrap();
        assert_eq!(
            s.reports,
            Some(ReportOptions {
                mode: ReportMode::EventsAndStatus,
                api: api(Some("/k.conf"))
            })
        );
        // podKnowledge: apiserver in a pod: the in-cluster config.
        let in_cluster = Config {
            pod_knowledge: Some(PodKnowledge::Apiserver),
            ..file.clone()
        };
        let s = resolved(&args(), &in_cluster, root).unwrap();
        assert_eq!(s.reports.unwrap().api, api(None));
        // Pod specs from the Pods API, reports asked for explicitly.
        let events = Config {
            pod_knowledge: Some(PodKnowledge::PodsApi),
            refusal_reports: Some(ReportMode::Events),
            ..file.clone()
        };
        let s = resolved(&args(), &events, root).unwrap();
        assert_eq!(s.reports.unwrap().mode, ReportMode::Events);
        // Off by flag, over the file.
        let mut a = args();
        a.refusal_reports = Some(ReportMode::None);
        assert_eq!(resolved(&a, &with_kubeconfig, root).unwrap().reports, None);
        let text = "refusalReports: events-and-status\nruntime: unix:///rt.sock\n";
        let parsed: Config = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(parsed.refusal_reports, Some(ReportMode::EventsAndStatus));
    }

    #[test]
    fn dra_claims_follow_the_api_server_unless_set() {
        let file = Config {
            runtime: Some("unix:///rt.sock".into()),
            node_name: Some("n1".into()),
            ..Config::default()
        };
        let root = std::path::Path::new("/nonexistent");
        assert_eq!(resolved(&args(), &file, root).unwrap().claims, None);
        let with_kubeconfig = Config {
            kubeconfig: Some("/k.conf".into()),
            dra_numa_attributes: Some(vec!["gpu.example.com/numaNode".into()]),
            ..file.clone()
        };
        let s = resolved(&args(), &with_kubeconfig, root).unwrap();
        let claims = s.claims.unwrap();
        assert_eq!(claims.api.kubeconfig, Some(PathBuf::from("/k.conf")));
        assert_eq!(claims.attributes, ["gpu.example.com/numaNode"]);
        assert_eq!(claims.timeout, std::time::Duration::from_secs(10));
        let patient = Config {
            dra_claims_timeout: Some("1m30s".into()),
            ..with_kubeconfig.clone()
        };
        let s = resolved(&args(), &patient, root).unwrap();
        assert_eq!(
            s.claims.unwrap().timeout,
            std::time::Duration::from_secs(90)
        );
        let mut a = args();
        a.dra_claims = Some(false);
        assert_eq!(resolved(&a, &with_kubeconfig, root).unwrap().claims, None);
        let on = Config {
            dra_claims: Some(true),
            ..file.clone()
        };
        assert!(resolved(&args(), &on, root).unwrap().claims.is_some());
    }

    #[test]
    fn pod_resources_socket_defaults_under_state_dir_and_can_be_off() {
        let file = Config {
            runtime: Some("unix:///rt.sock".into()),
            ..Config::default()
        };
        let root = std::path::Path::new("/nonexistent");
        let s = resolved(&args(), &file, root).unwrap();
        let pr = s.pod_resources.unwrap();
        assert_eq!(pr.socket, PathBuf::from(podresources::DEFAULT_SOCKET));
        assert_eq!(pr.mode, 0o600);
        assert_eq!(
            pr.kubelet_socket,
            Some(PathBuf::from(podresources::DEFAULT_KUBELET_SOCKET))
        );
        let mut a = args();
        a.state_dir = Some("/tmp/st".into());
        let s = resolved(&a, &file, root).unwrap();
        assert_eq!(
            s.pod_resources.unwrap().socket,
            PathBuf::from("/tmp/st/pod-resources/kubelet.sock")
        );
        a.kubelet_pod_resources_socket = Some("none".into());
        let pr = resolved(&a, &file, root).unwrap().pod_resources.unwrap();
        assert_eq!(pr.kubelet_socket, None);
        a.pod_resources_socket = Some("none".into());
        assert!(resolved(&a, &file, root).unwrap().pod_resources.is_none());
        a.kubelet_pod_resources_socket = None;
        a.pod_resources_socket = Some(podresources::DEFAULT_KUBELET_SOCKET.into());
        let err = resolved(&a, &file, root).unwrap_err();
        assert!(err.to_string().contains("kubelet's own socket"), "{err}");
    }
}

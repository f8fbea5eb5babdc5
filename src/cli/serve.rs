//! `numa-shim serve`: runs the CRI relay between the kubelet and the container runtime until
//! SIGTERM/SIGINT. Owns argument/config merging and logging setup; the relay itself lives in
//! `crate::relay`.

use std::path::PathBuf;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tracing::info;
use tracing_subscriber::EnvFilter;

use crate::config::{self, Config, LogFormat};
use crate::relay::{self, RelayBuilder, SocketOptions};

/// Default listening endpoint.
pub const DEFAULT_LISTEN: &str = "unix:///run/numa-shim/cri.sock";

/// Arguments of `numa-shim serve`. Flags override the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Endpoint to listen on [default: unix:///run/numa-shim/cri.sock].
    #[arg(long)]
    pub listen: Option<String>,
    /// Runtime CRI endpoint [default: first of /run/containerd/containerd.sock,
    /// /run/crio/crio.sock, /var/run/... that exists].
    #[arg(long)]
    pub runtime: Option<String>,
    /// Configuration file (YAML or JSON).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Octal mode of the listening socket [default: 0660].
    #[arg(long)]
    pub socket_mode: Option<String>,
    /// Numeric group id of the listening socket [default: the process group].
    #[arg(long)]
    pub socket_group: Option<u32>,
    /// Grace period for in-flight calls on shutdown, e.g. 10s [default: 10s].
    #[arg(long)]
    pub shutdown_grace: Option<String>,
    /// Log format [default: text]; the level comes from RUST_LOG (default info).
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
}

/// Everything `serve` needs, after merging flags, file and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub listen: PathBuf,
    pub runtime: PathBuf,
    pub socket: SocketOptions,
    pub shutdown_grace: Duration,
    pub log_format: LogFormat,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), super::CliError> {
    let file = match &args.config {
        Some(path) => config::load(path)?,
        None => Config::default(),
    };
    let settings = settings(&args, &file, std::path::Path::new("/"))?;
    init_tracing(settings.log_format)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(settings))
}

async fn serve(settings: Settings) -> Result<(), super::CliError> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let relay = RelayBuilder::new(&settings.listen, &settings.runtime)
        .socket_options(settings.socket)
        .shutdown_grace(settings.shutdown_grace)
        .bind()
        .await?;
    info!(
        listen = %relay.path().display(),
        runtime = %relay.runtime().display(),
        version = env!("CARGO_PKG_VERSION"),
        "numa-shim serving"
    );
    relay
        .serve_with_shutdown(async move {
            tokio::select! {
                _ = term.recv() => info!(signal = "SIGTERM", "shutdown requested"),
                _ = int.recv() => info!(signal = "SIGINT", "shutdown requested"),
            }
        })
        .await;
    Ok(())
}

/// Merges flags over the config file over defaults; `root` is where runtime sockets are probed.
pub fn settings(
    args: &Args,
    file: &Config,
    root: &std::path::Path,
) -> Result<Settings, super::CliError> {
    let listen = args
        .listen
        .as_deref()
        .or(file.listen.as_deref())
        .unwrap_or(DEFAULT_LISTEN);
    let runtime = match args
        .runtime
        .as_deref()
        .or(file.container_runtime_endpoint.as_deref())
    {
        Some(endpoint) => relay::parse_endpoint(endpoint)?,
        None => relay::detect_runtime(root)?,
    };
    let mode = match args.socket_mode.as_deref().or(file.socket_mode.as_deref()) {
        Some(text) => config::parse_mode(text)?,
        None => SocketOptions::default().mode,
    };
    let shutdown_grace = match args
        .shutdown_grace
        .as_deref()
        .or(file.shutdown_grace_period.as_deref())
    {
        Some(text) => config::parse_duration(text)?,
        None => relay::DEFAULT_SHUTDOWN_GRACE,
    };
    Ok(Settings {
        listen: relay::parse_endpoint(listen)?,
        runtime,
        socket: SocketOptions {
            mode,
            group: args.socket_group.or(file.socket_group),
        },
        shutdown_grace,
        log_format: args
            .log_format
            .or(file.logging.as_ref().and_then(|l| l.format))
            .unwrap_or_default(),
    })
}

fn init_tracing(format: LogFormat) -> Result<(), super::CliError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| -> super::CliError { e })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> Args {
        Args {
            listen: None,
            runtime: None,
            config: None,
            socket_mode: None,
            socket_group: None,
            shutdown_grace: None,
            log_format: None,
        }
    }

    #[test]
    fn flags_override_file_over_defaults() {
        let file = Config {
            listen: Some("unix:///file.sock".into()),
            container_runtime_endpoint: Some("unix:///rt.sock".into()),
            socket_mode: Some("0600".into()),
            socket_group: Some(5),
            shutdown_grace_period: Some("3s".into()),
            logging: None,
        };
        let root = std::path::Path::new("/nonexistent");
        let s = settings(&args(), &file, root).unwrap();
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
        let s = settings(&a, &file, root).unwrap();
        assert_eq!(s.listen, PathBuf::from("/flag.sock"));
        assert_eq!(s.socket.mode, 0o660);
        assert_eq!(s.log_format, LogFormat::Json);
    }

    #[test]
    fn defaults_need_a_runtime_socket() {
        let root = tempfile::tempdir().unwrap();
        let err = settings(&args(), &Config::default(), root.path()).unwrap_err();
        assert!(err.to_string().contains("pass --runtime"), "{err}");
        std::fs::create_dir_all(root.path().join("run/containerd")).unwrap();
        let sock = root.path().join("run/containerd/containerd.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let s = settings(&args(), &Config::default(), root.path()).unwrap();
        assert_eq!(s.runtime, sock);
        assert_eq!(s.listen, PathBuf::from("/run/numa-shim/cri.sock"));
        assert_eq!(s.socket, SocketOptions::default());
        assert_eq!(s.shutdown_grace, relay::DEFAULT_SHUTDOWN_GRACE);
    }
}

//! CRI load generator of the earlier rounds of integration/bench-relay.sh, and its Rust byte
//! floor (a plain binary, not a criterion bench). The script now drives its load with the
//! grpc-go client integration/bench-peers/cri-load and runs `byte-relay` from here as its
//! `floor-rust` target; `version` and `pods` stay to reproduce the earlier rounds in
//! docs/PERFORMANCE.md: they time the same calls straight to a runtime socket and through
//! numa-shim, interleaving the targets so that drift on a shared machine hits both alike, and
//! print one JSON line per target.
//!
//! - `version`: `Version` calls from `--clients` concurrent clients (one connection each).
//! - `pods`: RunPodSandbox + CreateContainer + StartContainer per pod, one pod at a time,
//!   alternating targets; every pod is stopped and removed (untimed) right after it is timed.
//! - `byte-relay`: not a test but a reference: a plain user-space byte relay (one runtime
//!   connection per client connection, bytes copied both ways, nothing parsed) that `version
//!   --floor` times as a third target, so the cost of any extra hop on this machine is measured
//!   beside numa-shim's.
//!
//! Talks only to the unix sockets it is given; bounded in calls and in time (`--deadline`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use numa_shim::proto::cri::v1 as cri;
use tokio::net::UnixStream;

use numa_shim::testing::cri_client::{
    connect, container_config, resources, sandbox_config, Client, Error,
};

#[derive(Debug, Parser)]
struct Args {
    /// The runtime's own socket.
    #[arg(long, requires = "via")]
    direct: Option<PathBuf>,
    /// numa-shim's socket in front of the same runtime.
    #[arg(long, requires = "direct")]
    via: Option<PathBuf>,
    /// A plain byte relay in front of the same runtime (`byte-relay`), timed as a third
    /// target by `version`.
    #[arg(long)]
    floor: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    deadline: u64,
    /// Without a test (as under `cargo test --all-targets` or a bare `cargo bench`), nothing runs.
    #[command(subcommand)]
    test: Option<Test>,
    /// `cargo bench` appends `--bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Subcommand)]
enum Test {
    /// Version latency under concurrent clients.
    Version {
        /// Timed calls per target.
        #[arg(long, default_value_t = 10_000)]
        calls: usize,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Alternations between the two targets.
        #[arg(long, default_value_t = 4)]
        rounds: usize,
        /// Untimed calls per client and target first.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
    },
    /// Pod start sequence time.
    Pods {
        /// Pods per target.
        #[arg(long, default_value_t = 30)]
        pods: usize,
        #[arg(long)]
        image: String,
        /// cgroupfs parent of the pods, e.g. /numa-shim-bench.
        #[arg(long)]
        cgroup_parent: String,
        /// Folder for pod log directories.
        #[arg(long)]
        log_dir: PathBuf,
    },
    /// Serves a plain byte relay on `--listen` to `--upstream` until killed.
    ByteRelay {
        #[arg(long)]
        listen: PathBuf,
        #[arg(long)]
        upstream: PathBuf,
    },
}

/// The reference hop: accept, dial the runtime, copy bytes both ways; one thread, like
/// numa-shim's default.
fn byte_relay(listen: &Path, upstream: &Path) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::UnixListener::bind(listen)?;
        loop {
            let (mut client, _) = listener.accept().await?;
            let upstream = upstream.to_path_buf();
            tokio::spawn(async move {
                if let Ok(mut runtime) = UnixStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut runtime).await;
                }
            });
        }
    })
}

/// Nearest-rank percentile of sorted samples, in microseconds.
fn pct_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e6
}

fn report(test: &str, target: &str, clients: usize, mut samples: Vec<Duration>) {
    samples.sort();
    let n = samples.len();
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / n.max(1) as f64 * 1e6;
    println!(
        "{{\"test\":\"{test}\",\"target\":\"{target}\",\"clients\":{clients},\"n\":{n},\"p50_us\":{:.1},\"p90_us\":{:.1},\"p99_us\":{:.1},\"mean_us\":{mean:.1},\"max_us\":{:.1}}}",
        pct_us(&samples, 0.50),
        pct_us(&samples, 0.90),
        pct_us(&samples, 0.99),
        pct_us(&samples, 1.0),
    );
}

async fn version_calls(
    client: &mut Client,
    n: usize,
    out: &mut Vec<Duration>,
) -> Result<(), Error> {
    for _ in 0..n {
        let started = Instant::now();
        client.version(cri::VersionRequest::default()).await?;
        out.push(started.elapsed());
    }
    Ok(())
}

/// One round on one target: every client makes `per_client` calls at once.
async fn version_round(clients: &[Client], per_client: usize) -> Result<Vec<Duration>, Error> {
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|mut c| {
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(per_client);
                version_calls(&mut c, per_client, &mut out)
                    .await
                    .map(|()| out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(per_client * clients.len());
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

async fn version(
    sockets: &[(&Path, &'static str)],
    calls: usize,
    clients: usize,
    rounds: usize,
    warmup: usize,
) -> Result<(), Error> {
    let mut targets = Vec::new();
    for (path, _) in sockets {
        let mut conns = Vec::with_capacity(clients);
        for _ in 0..clients {
            conns.push(connect(path).await?);
        }
        version_round(&conns, warmup).await?;
        targets.push((conns, Vec::with_capacity(calls)));
    }
    let per_client = calls.div_ceil(rounds * clients);
    for _ in 0..rounds {
        for (conns, samples) in &mut targets {
            samples.extend(version_round(conns, per_client).await?);
        }
    }
    for ((_, samples), (_, name)) in targets.into_iter().zip(sockets) {
        report("version", name, clients, samples);
    }
    Ok(())
}

/// Times one pod's start sequence, then stops and removes it.
async fn one_pod(
    client: &mut Client,
    name: &str,
    image: &str,
    cgroup_parent: &str,
    log_dir: &Path,
) -> Result<Duration, Error> {
    let config = sandbox_config(name, "bench", cgroup_parent, log_dir, None);
    let started = Instant::now();
    let sandbox = client
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let timed = async {
        let container = client
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox.clone(),
                config: Some(container_config(image, resources(500))),
                sandbox_config: Some(config),
            })
            .await?
            .into_inner()
            .container_id;
        client
            .start_container(cri::StartContainerRequest {
                container_id: container,
            })
            .await?;
        Ok::<_, Error>(started.elapsed())
    }
    .await;
    let direct_cleanup = async {
        client
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sandbox.clone(),
            })
            .await?;
        client
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: sandbox,
            })
            .await?;
        Ok::<_, Error>(())
    }
    .await;
    let elapsed = timed?;
    direct_cleanup?;
    Ok(elapsed)
}

async fn pods(
    [direct, via]: [&Path; 2],
    n: usize,
    image: &str,
    cgroup_parent: &str,
    log_dir: &Path,
) -> Result<(), Error> {
    let mut targets = [
        ("direct", connect(direct).await?, Vec::with_capacity(n)),
        ("via", connect(via).await?, Vec::with_capacity(n)),
    ];
    // One untimed pod per target first (image unpack, first shim start).
    for i in 0..=n {
        for (name, client, samples) in &mut targets {
            let pod = format!("bench-{name}-{i}");
            let took = one_pod(client, &pod, image, cgroup_parent, log_dir).await?;
            if i > 0 {
                samples.push(took);
            }
        }
    }
    // Pod i of each side ran back to back: the median of the pairwise ratios is less sensitive
    // to load that drifts over the run than the ratio of the medians.
    let mut ratios: Vec<f64> = targets[1]
        .2
        .iter()
        .zip(&targets[0].2)
        .map(|(via, direct)| via.as_secs_f64() / direct.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    for (name, _, samples) in targets {
        report("pods", name, 1, samples);
    }
    println!(
        "{{\"test\":\"pods-paired\",\"n\":{},\"median_ratio\":{median:.4}}}",
        ratios.len()
    );
    Ok(())
}

fn main() -> Result<(), Error> {
    let args = Args::parse();
    if let Some(Test::ByteRelay { listen, upstream }) = &args.test {
        return byte_relay(listen, upstream);
    }
    let (Some(test), Some(direct), Some(via)) = (&args.test, &args.direct, &args.via) else {
        eprintln!("relay_load: nothing to do without --direct, --via and a test (integration/bench-relay.sh runs it)");
        return Ok(());
    };
    let sockets = [direct.as_path(), via.as_path()];
    let mut targets = vec![(direct.as_path(), "direct"), (via.as_path(), "via")];
    if let Some(floor) = &args.floor {
        targets.push((floor.as_path(), "floor"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let work = async {
            match test {
                Test::Version {
                    calls,
                    clients,
                    rounds,
                    warmup,
                } => version(&targets, *calls, *clients, *rounds, *warmup).await,
                Test::Pods {
                    pods: n,
                    image,
                    cgroup_parent,
                    log_dir,
                } => pods(sockets, *n, image, cgroup_parent, log_dir).await,
                Test::ByteRelay { .. } => Ok(()),
            }
        };
        tokio::time::timeout(Duration::from_secs(args.deadline), work)
            .await
            .map_err(|_| -> Error { format!("deadline of {}s passed", args.deadline).into() })?
    })
}

//! Memory benchmark driver for integration/bench-memory.sh (a plain binary, not a criterion
//! bench): pod churn through numa-shim for the whole run, plus bursts of client load from many
//! short-lived connections, while numa-shim's RSS is sampled from /proc. Prints one JSON line
//! per sample and a summary line at the end.
//!
//! - churn: one pod after another (RunPodSandbox, CreateContainer, StartContainer,
//!   StopPodSandbox, RemovePodSandbox) on one connection, as a kubelet would, all run long;
//! - load: cycles of `--load` seconds with `--clients` new connections, each calling Version,
//!   ListPodSandbox, ListContainers and an UpdateContainerResources of a container that does
//!   not exist (intercepted, answered NotFound trailers-only) in a loop, then `--idle` seconds
//!   with every load connection closed.
//!
//! Talks only to the unix socket it is given; bounded in time (`--duration`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use numa_shim::proto::cri::v1 as cri;

use numa_shim::testing::cri_client::{
    connect, container_config, resources, sandbox_config, Client, Error,
};

#[derive(Debug, Parser)]
struct Args {
    /// numa-shim's CRI socket.
    #[arg(long)]
    via: Option<PathBuf>,
    /// numa-shim's pid (its /proc/<pid>/status is sampled).
    #[arg(long)]
    pid: Option<u32>,
    /// Length of the run in seconds.
    #[arg(long, default_value_t = 1800)]
    duration: u64,
    /// Seconds of client load per cycle.
    #[arg(long, default_value_t = 240)]
    load: u64,
    /// Seconds without client load after each load phase.
    #[arg(long, default_value_t = 60)]
    idle: u64,
    /// Concurrent load connections during a load phase.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Calls in flight at once on each load connection.
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// Bytes of annotations on each load UpdateContainerResources (a large request).
    #[arg(long, default_value_t = 64 << 10)]
    payload: usize,
    /// Seconds between RSS samples.
    #[arg(long, default_value_t = 5)]
    every: u64,
    #[arg(long, default_value = "")]
    image: String,
    /// cgroupfs parent of the pods.
    #[arg(long, default_value = "")]
    cgroup_parent: String,
    /// Folder for pod log directories.
    #[arg(long, default_value = "/tmp")]
    log_dir: PathBuf,
    /// `cargo bench` appends `--bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// `VmRSS`, `VmHWM` (KiB) and `Threads` of `pid`.
fn status(pid: u32) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?, field("Threads:")?))
}

/// One pod created, started, stopped and removed.
async fn one_pod(client: &mut Client, name: &str, args: &Args) -> Result<(), Error> {
    // A Guaranteed pod of one CPU as the kubelet describes it (inferred by numa-shim).
    let config = sandbox_config(
        name,
        "bench-memory",
        &args.cgroup_parent,
        &args.log_dir,
        Some(resources(1000)),
    );
    std::fs::create_dir_all(args.log_dir.join(name))?;
    let id = client
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let created = client
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: id.clone(),
            config: Some(container_config(&args.image, resources(1000))),
            sandbox_config: Some(config),
        })
        .await;
    if let Ok(created) = created {
        let container_id = created.into_inner().container_id;
        client
            .start_container(cri::StartContainerRequest { container_id })
            .await?;
    }
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await?;
    client
        .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
        .await?;
    Ok(())
}

/// One load connection with `streams` callers on it until `stop`.
async fn load_client(
    path: PathBuf,
    (streams, payload): (usize, usize),
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
) {
    let Ok(client) = connect(&path).await else {
        return;
    };
    let callers: Vec<_> = (0..streams)
        .map(|_| tokio::spawn(caller(client.clone(), payload, stop.clone(), calls.clone())))
        .collect();
    for c in callers {
        let _ = c.await;
    }
}

async fn caller(mut client: Client, payload: usize, stop: Arc<AtomicBool>, calls: Arc<AtomicU64>) {
    let annotations = [("bench".to_string(), "x".repeat(payload))].into();
    while !stop.load(Ordering::Relaxed) {
        let _ = client.version(cri::VersionRequest::default()).await;
        let _ = client
            .list_pod_sandbox(cri::ListPodSandboxRequest::default())
            .await;
        let _ = client
            .list_containers(cri::ListContainersRequest::default())
            .await;
        let missing = cri::UpdateContainerResourcesRequest {
            container_id: "bench-memory-no-such-container".into(),
            annotations: std::collections::HashMap::clone(&annotations),
            ..Default::default()
        };
        let _ = client.update_container_resources(missing).await;
        calls.fetch_add(4, Ordering::Relaxed);
    }
}

async fn run(args: Args, via: PathBuf, pid: u32) -> Result<(), Error> {
    let started = Instant::now();
    let end = started + Duration::from_secs(args.duration);
    let args = Arc::new(args);
    let loaded = Arc::new(AtomicBool::new(false));
    let pods = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));

    let sampler = {
        let (loaded, pods, calls, every) =
            (loaded.clone(), pods.clone(), calls.clone(), args.every);
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < end {
                if let Some((rss, hwm, threads)) = status(pid) {
                    let load = loaded.load(Ordering::Relaxed);
                    println!(
                        "{{\"t\":{},\"phase\":\"{}\",\"rss_kib\":{rss},\"hwm_kib\":{hwm},\"threads\":{threads},\"pods\":{},\"calls\":{}}}",
                        started.elapsed().as_secs(),
                        if load { "load" } else { "idle" },
                        pods.load(Ordering::Relaxed),
                        calls.load(Ordering::Relaxed),
                    );
                    samples.push((load, rss, hwm));
                }
                tokio::time::sleep(Duration::from_secs(every)).await;
            }
            samples
        })
    };
    let churn = {
        let (args, via, pods) = (args.clone(), via.clone(), pods.clone());
        tokio::spawn(async move {
            let mut client = connect(&via).await?;
            let mut i = 0u64;
            while Instant::now() < end {
                let name = format!("churn-{}-{i}", std::process::id());
                if let Err(err) = one_pod(&mut client, &name, &args).await {
                    eprintln!("relay_memory: pod {i}: {err}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                i += 1;
                pods.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, Error>(())
        })
    };
    let cycle = Duration::from_secs(args.load + args.idle);
    while Instant::now() + cycle <= end + Duration::from_secs(1) {
        let stop = Arc::new(AtomicBool::new(false));
        loaded.store(true, Ordering::Relaxed);
        let clients: Vec<_> = (0..args.clients)
            .map(|_| {
                let (stop, calls) = (stop.clone(), calls.clone());
                tokio::spawn(load_client(
                    via.clone(),
                    (args.streams, args.payload),
                    stop,
                    calls,
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(args.load)).await;
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            let _ = c.await;
        }
        loaded.store(false, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(args.idle)).await;
    }
    let samples = sampler.await?;
    churn.await??;
    summary(
        &samples,
        pods.load(Ordering::Relaxed),
        calls.load(Ordering::Relaxed),
    );
    Ok(())
}

/// Start, peak, and the last sample of each idle phase (RSS after load).
fn summary(samples: &[(bool, u64, u64)], pods: u64, calls: u64) {
    let start = samples.first().map_or(0, |s| s.1);
    let peak = samples.iter().map(|s| s.2).max().unwrap_or(0);
    let after_load: Vec<u64> = samples
        .windows(2)
        .filter(|w| !w[0].0 && w[1].0)
        .map(|w| w[0].1)
        .chain(samples.last().filter(|s| !s.0).map(|s| s.1))
        .collect();
    let list = after_load
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "{{\"summary\":true,\"rss_start_kib\":{start},\"hwm_kib\":{peak},\"rss_after_load_kib\":[{list}],\"pods\":{pods},\"calls\":{calls}}}"
    );
}

fn main() -> Result<(), Error> {
    let args = Args::parse();
    let (Some(via), Some(pid)) = (args.via.clone(), args.pid) else {
        eprintln!("relay_memory: nothing to do without --via and --pid (integration/bench-memory.sh runs it)");
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(args, via, pid))
}

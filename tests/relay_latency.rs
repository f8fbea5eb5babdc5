//! Added latency of the relay: the same unary calls straight to the fake runtime and through
//! the relay, p50/p99 printed. Ignored by default (timing on a shared machine is not a pass/fail
//! signal); run with `cargo test --release --test relay_latency -- --ignored --nocapture`.

#[path = "relay_support/fake.rs"]
mod fake;

use std::time::{Duration, Instant};

use fake::{channel, runtime_client, RunningRelay, Runtime};
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::NoopHook;

const CALLS: usize = 2000;

async fn measure(path: &std::path::Path, intercepted: bool) -> Vec<Duration> {
    let mut client = runtime_client(channel(path).await);
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 100 {
        let started = Instant::now();
        if intercepted {
            client
                .create_container(cri::CreateContainerRequest::default())
                .await
                .unwrap();
        } else {
            client
                .version(cri::VersionRequest::default())
                .await
                .unwrap();
        }
        if i >= 100 {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    samples
}

fn pct(samples: &[Duration], p: f64) -> Duration {
    samples[((samples.len() as f64 - 1.0) * p) as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing measurement, run by hand"]
async fn added_latency_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let relay = RunningRelay::start(&dir.path().join("shim.sock"), &runtime.path, NoopHook).await;
    for (name, intercepted) in [
        ("Version (passthrough)", false),
        ("CreateContainer (intercepted)", true),
    ] {
        let direct = measure(&runtime.path, intercepted).await;
        let relayed = measure(&relay.path, intercepted).await;
        println!(
            "{name}: direct p50 {:?} p99 {:?} | via relay p50 {:?} p99 {:?}",
            pct(&direct, 0.5),
            pct(&direct, 0.99),
            pct(&relayed, 0.5),
            pct(&relayed, 0.99)
        );
        assert!(pct(&relayed, 0.5) > Duration::ZERO);
    }
}

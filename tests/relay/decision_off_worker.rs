//! Issue 25 item 4: a placement decision never stalls the relay. With the relay on one tokio
//! worker (as `serve` runs it), a decision made slow on purpose (the `testing` feature's
//! decision hook) leaves Version, ListContainers and another pod's StopPodSandbox at their usual
//! latency; a decision that outlives its caller's deadline is abandoned with nothing held; one
//! that panics is refused with INTERNAL and the proxy keeps serving.
//!
//! `cargo test --features testing --test decision_off_worker`

use numa_shim::testing::relay::frames;
use numa_shim::testing::relay::live;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use frames::Conn;
use live::{live, sandbox, Live, RUN};
use numa_shim::proto::cri::v1 as cri;
use prost::Message;

const VERSION: &str = "/runtime.v1.RuntimeService/Version";
const LIST: &str = "/runtime.v1.RuntimeService/ListContainers";
const STOP: &str = "/runtime.v1.RuntimeService/StopPodSandbox";
/// How long the slow decision takes.
const SLOW: Duration = Duration::from_millis(1500);
/// The latency every other call must keep meanwhile (usually well under a millisecond).
const USUAL: Duration = Duration::from_millis(200);

/// Makes the next decision take `SLOW` (the first attempt only), on its own thread.
fn slow_once(l: &Live) {
    let armed = Arc::new(AtomicBool::new(true));
    l.placer
        .set_decision_hook(Some(Arc::new(move |_what: &str| {
            if armed.swap(false, Ordering::SeqCst) {
                std::thread::sleep(SLOW);
            }
        })));
}

/// Sends `calls` one after the other from a thread of its own (so a stalled relay worker cannot
/// stall the measurement) and returns each one's status and latency.
fn probe(
    socket: PathBuf,
    calls: Vec<(&'static str, Vec<u8>)>,
) -> std::thread::JoinHandle<Vec<(String, Option<String>, Duration)>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut conn = Conn::connect(&socket).await;
            let mut seen = Vec::new();
            for (path, message) in calls {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let started = Instant::now();
                let frames = tokio::time::timeout(SLOW * 3, conn.unary(path, &[], &message))
                    .await
                    .unwrap_or_default();
                let status = frames
                    .last()
                    .and_then(|f| f.header("grpc-status"))
                    .map(str::to_string);
                seen.push((path.to_string(), status, started.elapsed()));
            }
            seen
        })
    })
}

async fn run(
    conn: &mut Conn,
    name: &str,
    timeout: &'static str,
) -> (Option<String>, Option<String>) {
    let headers: Vec<(&str, &str)> = if timeout.is_empty() {
        vec![]
    } else {
        vec![("grpc-timeout", timeout)]
    };
    let frames = conn.unary(RUN, &headers, &sandbox(name)).await;
    let last = frames.last().unwrap();
    (
        last.header("grpc-status").map(str::to_string),
        last.header("grpc-message").map(str::to_string),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn other_calls_keep_their_latency_while_a_decision_is_slow() {
    let l = live().await;
    let mut conn = Conn::connect(&l.relay.path).await;
    // Another pod, admitted before: its StopPodSandbox needs no decision.
    assert_eq!(run(&mut conn, "other", "").await.0.as_deref(), Some("0"));
    slow_once(&l);
    let started = Instant::now();
    let path = l.relay.path.clone();
    let slow = tokio::spawn(async move {
        let mut conn = Conn::connect(&path).await;
        run(&mut conn, "slow", "10S").await
    });
    // Once the slow decision has begun.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let list = cri::ListContainersRequest::default().encode_to_vec();
    let stop = cri::StopPodSandboxRequest {
        pod_sandbox_id: "sb-other".into(),
    }
    .encode_to_vec();
    let mut calls = Vec::new();
    for _ in 0..5 {
        calls.push((VERSION, Vec::new()));
        calls.push((LIST, list.clone()));
    }
    calls.insert(3, (STOP, stop));
    let seen = probe(l.relay.path.clone(), calls);
    let seen = tokio::task::spawn_blocking(move || seen.join().unwrap())
        .await
        .unwrap();
    for (path, status, took) in &seen {
        assert_eq!(status.as_deref(), Some("0"), "{path}");
        assert!(*took < USUAL, "{path} took {took:?} while a decision ran");
    }
    // All of them answered while the decision was still running.
    assert!(started.elapsed() < SLOW, "{:?}", started.elapsed());
    let active = l
        .placer
        .registry()
        .pods()
        .get("uid-other")
        .map(|p| p.active);
    assert_eq!(active, Some(false), "the stop was not recorded");
    // The slow decision ends and is placed (decided again: the stop changed the registry).
    let (status, message) = slow.await.unwrap();
    assert_eq!(status.as_deref(), Some("0"), "{message:?}");
    assert!(started.elapsed() >= SLOW);
    assert!(l.reserved("uid-slow"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_decision_that_outlives_its_deadline_is_abandoned_with_nothing_held() {
    let l = live().await;
    let free = l.placer.registry().node().shared_cpus();
    slow_once(&l);
    let mut conn = Conn::connect(&l.relay.path).await;
    let started = Instant::now();
    let (status, _) = run(&mut conn, "late", "300m").await;
    assert_eq!(status.as_deref(), Some("4"));
    assert!(started.elapsed() < SLOW / 2, "{:?}", started.elapsed());
    // The relay answers meanwhile.
    let frames = conn.unary(VERSION, &[], &[]).await;
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("0"));
    // The decision finishes on its thread and is thrown away.
    tokio::time::sleep(SLOW).await;
    assert!(!l.reserved("uid-late"));
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
    assert!(
        l.runtime.log.for_path(RUN).is_empty(),
        "the runtime saw the call"
    );
    assert_eq!(
        l.placer
            .metrics()
            .decision_failed_count("RunPodSandbox", "deadline"),
        1
    );
    // The kubelet's retry is placed.
    assert_eq!(run(&mut conn, "late", "").await.0.as_deref(), Some("0"));
    assert!(l.reserved("uid-late"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_decision_that_panics_is_refused_and_the_proxy_keeps_serving() {
    let l = live().await;
    let free = l.placer.registry().node().shared_cpus();
    l.placer.set_decision_hook(Some(Arc::new(|what: &str| {
        panic!("decision for {what} broke on purpose")
    })));
    let mut conn = Conn::connect(&l.relay.path).await;
    let (status, message) = run(&mut conn, "broken", "5S").await;
    assert_eq!(status.as_deref(), Some("13"));
    let message = message.unwrap_or_default();
    assert!(message.contains("decision"), "{message}");
    assert!(message.contains("panicked"), "{message}");
    assert!(!l.reserved("uid-broken"));
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
    assert_eq!(
        l.placer
            .metrics()
            .decision_failed_count("RunPodSandbox", "panicked"),
        1
    );
    // Still serving: passthrough calls and the next decision.
    let frames = conn.unary(VERSION, &[], &[]).await;
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("0"));
    l.placer.set_decision_hook(None);
    assert_eq!(run(&mut conn, "broken", "").await.0.as_deref(), Some("0"));
    assert!(l.reserved("uid-broken"));
}

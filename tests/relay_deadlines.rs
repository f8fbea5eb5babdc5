//! Issue 23: a runtime that accepts CRI streams and never answers (and ignores `grpc-timeout`),
//! callers with deadlines. Every runtime stream numa-shim opened for a caller is reset when the
//! caller's deadline passes (passthrough and intercepted calls alike), numa-shim's own lookups
//! end with their timeouts, and a reservation whose call was cut off is given back within the
//! stated bound (`settle_limit` after the deadline) even while the runtime stays silent.

#[path = "support/relay/client.rs"]
mod client;
#[path = "support/relay/fake.rs"]
mod fake;
#[path = "support/relay/frames.rs"]
mod frames;
#[path = "support/relay/live.rs"]
mod live;
#[path = "support/podresources/registry.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use client::{channel, raw_unary, runtime_client};
use live::{live_with, sandbox, Live, RUN};
use numa_shim::proto::cri::v1 as cri;

/// The callers' deadline.
const DEADLINE: Duration = Duration::from_millis(500);
/// Longest a cut-off reservation is kept while the runtime does not say what it did.
const LIMIT: Duration = Duration::from_millis(1500);

async fn hanging() -> Live {
    // The default lookup timeout (5 s): longer than the limit.
    let l = live_with(|b| b.settle_lookup_timeout(Duration::from_secs(5))).await;
    l.runtime.fake.hang_all.store(true, Ordering::SeqCst);
    l
}

/// 10 Version and 10 RunPodSandbox calls with `DEADLINE`, as a grpc client sends them (tonic:
/// `grpc-timeout`, and a reset of its stream when the deadline passes); every one must end in
/// the deadline on time.
async fn storm(l: &Live) {
    let channel = channel(&l.relay.path).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..10 {
        let mut client = runtime_client(channel.clone());
        calls.spawn(async move {
            let mut req = tonic::Request::new(cri::VersionRequest::default());
            req.set_timeout(DEADLINE);
            client.version(req).await.map(|_| ()).unwrap_err().code()
        });
        let message = bytes::Bytes::from(sandbox(&format!("p{i}")));
        let channel = channel.clone();
        calls.spawn(async move {
            let mut req = tonic::Request::new(message);
            req.set_timeout(DEADLINE);
            raw_unary(channel, RUN, req).await.unwrap_err().code()
        });
    }
    let started = Instant::now();
    while let Some(code) = calls.join_next().await {
        // tonic's client says CANCELLED ("Timeout expired") when its own timer fires first,
        // DEADLINE_EXCEEDED when numa-shim's answer arrives first.
        let code = code.unwrap();
        assert!(
            matches!(code, tonic::Code::DeadlineExceeded | tonic::Code::Cancelled),
            "{code:?}"
        );
    }
    assert!(started.elapsed() < DEADLINE + Duration::from_millis(500));
}

/// A caller that sends `grpc-timeout` but never resets its stream (no timer of its own, as a
/// raw HTTP/2 client): numa-shim itself answers at the deadline and resets the runtime's stream,
/// for calls it only passes through too.
#[tokio::test]
async fn a_passthrough_call_is_cut_off_at_the_deadline_without_the_callers_reset() {
    let l = hanging().await;
    let mut conn = frames::Conn::connect(&l.relay.path).await;
    let started = Instant::now();
    let version = "/runtime.v1.RuntimeService/Version";
    let frames = tokio::time::timeout(
        Duration::from_secs(3),
        conn.unary(version, &[("grpc-timeout", "300m")], &[]),
    )
    .await
    .expect("no answer at the deadline");
    assert!(started.elapsed() < Duration::from_millis(1000));
    match frames::shape(&frames).as_slice() {
        [frames::Shape::Headers { end: true, headers }] => {
            let status = headers.iter().find(|(n, _)| n == "grpc-status");
            assert_eq!(status.map(|(_, v)| v.as_str()), Some("4"), "{headers:?}");
        }
        other => panic!("not a trailers-only DEADLINE_EXCEEDED: {other:?}"),
    }
    assert!(
        l.until(Duration::from_millis(500), |l| l.runtime.fake.open_total()
            == 0)
            .await,
        "{:?}",
        l.runtime.fake.open_calls()
    );
    let metrics = l.placer.metrics();
    assert_eq!(metrics.relay_cancelled_count("Version", "deadline"), 1);
}

fn reserved(l: &Live) -> usize {
    (0..10).filter(|i| l.reserved(&format!("uid-p{i}"))).count()
}

#[tokio::test]
async fn a_silent_runtime_keeps_no_stream_of_a_caller_past_its_deadline() {
    let l = hanging().await;
    storm(&l).await;
    // The callers' streams are reset at the deadline: the runtime holds none of them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = l.runtime.fake.open_calls();
    assert_eq!(
        open.get("/runtime.v1.RuntimeService/Version"),
        None,
        "{open:?}"
    );
    assert_eq!(open.get(RUN), None, "{open:?}");
    // numa-shim's own lookups end with their timeouts and stop once the limit passed: nothing
    // is left open on the runtime.
    tokio::time::sleep(LIMIT + Duration::from_millis(200)).await;
    assert_eq!(
        l.runtime.fake.open_total(),
        0,
        "{:?}",
        l.runtime.fake.open_calls()
    );
}

#[tokio::test]
async fn a_pod_never_retried_gets_its_cpus_back_within_the_limit_of_a_silent_runtime() {
    let l = hanging().await;
    let free = l.placer.registry().node().shared_cpus();
    storm(&l).await;
    let cut = Instant::now();
    // Still kept shortly after the deadline: the runtime may yet act on the calls.
    assert_eq!(reserved(&l), 10);
    assert!(
        l.until(LIMIT + Duration::from_secs(1), |l| reserved(l) == 0)
            .await,
        "{} pods still hold CPUs {:?} after the deadline",
        reserved(&l),
        cut.elapsed()
    );
    assert!(cut.elapsed() >= LIMIT - Duration::from_millis(300));
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
}

#[tokio::test]
async fn reservations_cut_off_are_released_once_the_runtime_recovers() {
    let l = hanging().await;
    storm(&l).await;
    l.runtime.fake.hang_all.store(false, Ordering::SeqCst);
    // The runtime lists nothing of them now: released after the two lookups, well before the
    // limit.
    assert!(
        l.until(LIMIT, |l| reserved(l) == 0).await,
        "{} pods still reserved after the runtime recovered",
        reserved(&l)
    );
}

//! Issue 23: a runtime that accepts CRI streams and never answers (and ignores `grpc-timeout`),
//! callers with deadlines. Every runtime stream numa-shim opened for a caller is reset when the
//! caller's deadline passes (passthrough and intercepted calls alike), numa-shim's own lookups
//! end with their timeouts, and a reservation whose call was cut off is given back within the
//! stated bound (`settle_limit` after the deadline) even while the runtime stays silent.

use numa_shim::testing::relay::client;
use numa_shim::testing::relay::frames;
use numa_shim::testing::relay::live;

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
    let l = live_with(|b| {
        b.settle_lookup_timeout(Duration::from_secs(5))
            .settle_limit(LIMIT)
    })
    .await;
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

#[tokio::test]
async fn cancelled_calls_and_what_became_of_them_are_counted() {
    let l = hanging().await;
    storm(&l).await;
    assert!(
        l.until(LIMIT + Duration::from_secs(1), |l| reserved(l) == 0)
            .await
    );
    let metrics = l.placer.metrics();
    // tonic's client resets at its deadline, numa-shim's timer fires at the same moment: each
    // call is counted once, as one or the other.
    for method in ["Version", "RunPodSandbox"] {
        let cut = metrics.relay_cancelled_count(method, "deadline")
            + metrics.relay_cancelled_count(method, "hangup");
        assert_eq!(cut, 10, "{method}");
    }
    assert_eq!(
        metrics.relay_settled_count("RunPodSandbox", "released_unconfirmed"),
        10
    );
    let text = metrics.render();
    assert!(
        text.contains("numa_shim_relay_cancelled_total{method=\"RunPodSandbox\""),
        "{text}"
    );
    assert!(text.contains("numa_shim_relay_settled_total{method=\"RunPodSandbox\",result=\"released_unconfirmed\"} 10"), "{text}");
}

/// Both orders of the runtime's answer and the caller's deadline, with a runtime that carries
/// on after a cancel (`late-<ms>`): before the deadline the pod is committed as usual; after it,
/// the lookup finds the sandbox and keeps its CPUs until the kubelet stops it.
#[tokio::test]
async fn an_answer_before_or_after_the_deadline_keeps_the_pod_once() {
    let l = live_with(|b| b.settle_limit(LIMIT)).await;
    let free = l.placer.registry().node().shared_cpus();
    let mut conn = frames::Conn::connect(&l.relay.path).await;
    let frames = conn
        .unary(RUN, &[("grpc-timeout", "500m")], &sandbox("late-100"))
        .await;
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("0"));
    assert_eq!(l.sandbox_of("uid-late-100").as_deref(), Some("sb-late-100"));
    let frames = conn
        .unary(RUN, &[("grpc-timeout", "200m")], &sandbox("late-300"))
        .await;
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("4"));
    assert!(
        l.until(LIMIT, |l| l.sandbox_of("uid-late-300").is_some())
            .await
    );
    let metrics = l.placer.metrics();
    assert_eq!(
        metrics.relay_cancelled_count("RunPodSandbox", "deadline"),
        1
    );
    assert_eq!(metrics.relay_settled_count("RunPodSandbox", "kept"), 1);
    // Two pods of 2 CPUs held, not three: the kept one was not granted twice.
    let held = free.len() - l.placer.registry().node().shared_cpus().len();
    assert_eq!(held, 4);
    for id in ["sb-late-100", "sb-late-300"] {
        let stop = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let frames = conn
            .unary(
                "/runtime.v1.RuntimeService/StopPodSandbox",
                &[],
                &prost::Message::encode_to_vec(&stop),
            )
            .await;
        assert_eq!(frames.last().unwrap().header("grpc-status"), Some("0"));
    }
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
}

/// A runtime that closes the connection in the middle of the call: the caller gets UNAVAILABLE
/// and the pod holds nothing (the runtime has no sandbox), and the next pod gets the CPUs once.
#[tokio::test]
async fn a_runtime_that_drops_the_connection_mid_call_leaves_nothing_held() {
    let l = live_with(|b| b.settle_limit(LIMIT)).await;
    let free = l.placer.registry().node().shared_cpus();
    let path = l.relay.path.clone();
    let call = tokio::spawn(async move {
        let mut conn = frames::Conn::connect(&path).await;
        conn.unary(RUN, &[("grpc-timeout", "10S")], &sandbox("hang"))
            .await
    });
    assert!(
        l.until(Duration::from_secs(1), |l| l.reserved("uid-hang"))
            .await
    );
    assert!(
        l.until(Duration::from_secs(1), |l| l.runtime.fake.open_total() == 1)
            .await
    );
    l.runtime.cut_connections();
    let frames = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .expect("no answer after the runtime went away")
        .unwrap();
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("14"));
    assert!(!l.reserved("uid-hang"));
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
    assert_eq!(l.runtime.fake.open_total(), 0);
    // The runtime is back: the next pod is placed on a fresh connection.
    let mut conn = frames::Conn::connect(&l.relay.path).await;
    let frames = conn.unary(RUN, &[], &sandbox("next")).await;
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("0"));
    assert_eq!(
        free.len() - l.placer.registry().node().shared_cpus().len(),
        2
    );
}

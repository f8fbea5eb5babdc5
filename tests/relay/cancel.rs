//! Deadlines and cancellation on the calls numa-shim intercepts, with the real placement hook in
//! front of the fake runtime: the caller's `grpc-timeout` or hang-up cancels the runtime call
//! (the runtime sees its stream reset), the caller gets what a grpc-go server answers at a
//! deadline (trailers-only DEADLINE_EXCEEDED), and the reservation is released only once the
//! runtime shows it holds nothing of the call — kept, and committed, when the runtime created
//! the object anyway, and kept while the runtime does not answer.

use numa_shim::testing::relay::frames;
use numa_shim::testing::relay::live;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use frames::{shape, Conn, Shape};
use live::{container, live, sandbox, CREATE, RUN, SETTLE};
use numa_shim::proto::cri::v1 as cri;
use prost::Message;

/// A call with `grpc-timeout: 200m` whose answer must be trailers-only DEADLINE_EXCEEDED,
/// soon after the deadline.
async fn expect_deadline(conn: &mut Conn, path: &str, message: &[u8]) {
    let started = Instant::now();
    let frames = conn.unary(path, &[("grpc-timeout", "200m")], message).await;
    let elapsed = started.elapsed();
    match shape(&frames).as_slice() {
        [Shape::Headers { end: true, headers }] => {
            let status = headers.iter().find(|(n, _)| n == "grpc-status");
            assert_eq!(status.map(|(_, v)| v.as_str()), Some("4"), "{headers:?}");
        }
        other => panic!("not a trailers-only DEADLINE_EXCEEDED: {other:?}"),
    }
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
}

#[tokio::test]
async fn a_deadline_on_a_hanging_runtime_cancels_the_call_and_releases_the_pod() {
    let l = live().await;
    let free = l.placer.registry().node().shared_cpus();
    let mut conn = Conn::connect(&l.relay.path).await;
    expect_deadline(&mut conn, RUN, &sandbox("hang")).await;
    // The runtime's stream was reset, so its handler was dropped.
    assert!(
        l.until(Duration::from_secs(1), |l| l
            .runtime
            .fake
            .cancelled
            .load(Ordering::SeqCst)
            == 1)
            .await,
        "the runtime call was not cancelled"
    );
    // Kept while the runtime may still act on it, released once it listed nothing twice.
    assert!(
        l.reserved("uid-hang"),
        "released before the runtime was asked"
    );
    assert!(l.until(SETTLE * 4, |l| !l.reserved("uid-hang")).await);
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
}

#[tokio::test]
async fn a_sandbox_the_runtime_creates_after_the_deadline_keeps_its_reservation() {
    let l = live().await;
    let free = l.placer.registry().node().shared_cpus();
    let mut conn = Conn::connect(&l.relay.path).await;
    // Created 300 ms after the call although the call was cancelled at 200 ms: after the first
    // lookup, before the second.
    expect_deadline(&mut conn, RUN, &sandbox("late-300")).await;
    assert!(
        l.until(SETTLE * 4, |l| l.sandbox_of("uid-late-300").is_some())
            .await,
        "the sandbox the runtime created was not committed"
    );
    assert_eq!(l.sandbox_of("uid-late-300").as_deref(), Some("sb-late-300"));
    assert_ne!(l.placer.registry().node().shared_cpus(), free);
    // Its CPUs stay taken until the sandbox goes the usual way.
    tokio::time::sleep(SETTLE).await;
    assert!(l.reserved("uid-late-300"));
    let stop = cri::StopPodSandboxRequest {
        pod_sandbox_id: "sb-late-300".into(),
    }
    .encode_to_vec();
    conn.unary("/runtime.v1.RuntimeService/StopPodSandbox", &[], &stop)
        .await;
    assert_eq!(l.placer.registry().node().shared_cpus(), free);
}

#[tokio::test]
async fn a_caller_that_hangs_up_cancels_the_runtime_call() {
    let l = live().await;
    let mut conn = Conn::connect(&l.relay.path).await;
    let stream = conn.start(RUN, "localhost", &[]).await;
    conn.send_message(stream, &sandbox("hang")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(l.reserved("uid-hang"));
    // RST_STREAM CANCEL, as a grpc-go client sends when its context is cancelled.
    conn.write_frame(frames::RST_STREAM, 0, stream, &8u32.to_be_bytes())
        .await;
    assert!(
        l.until(Duration::from_secs(1), |l| l
            .runtime
            .fake
            .cancelled
            .load(Ordering::SeqCst)
            == 1)
            .await,
        "the runtime call was not cancelled"
    );
    assert!(l.until(SETTLE * 4, |l| !l.reserved("uid-hang")).await);
}

#[tokio::test]
async fn while_the_runtime_does_not_answer_the_reservation_is_kept() {
    let l = live().await;
    l.runtime.fake.lists_hang.store(true, Ordering::SeqCst);
    let mut conn = Conn::connect(&l.relay.path).await;
    expect_deadline(&mut conn, RUN, &sandbox("hang")).await;
    tokio::time::sleep(SETTLE * 4).await;
    assert!(
        l.reserved("uid-hang"),
        "released without the runtime's word"
    );
    l.runtime.fake.lists_hang.store(false, Ordering::SeqCst);
    assert!(
        l.until(Duration::from_secs(5), |l| !l.reserved("uid-hang"))
            .await
    );
}

#[tokio::test]
async fn a_container_created_after_the_deadline_is_recorded() {
    let l = live().await;
    let mut conn = Conn::connect(&l.relay.path).await;
    let frames = conn.unary(RUN, &[], &sandbox("p1")).await;
    assert_eq!(frames.last().unwrap().header("grpc-status"), Some("0"));
    assert_eq!(l.sandbox_of("uid-p1").as_deref(), Some("sb-p1"));
    expect_deadline(&mut conn, CREATE, &container("sb-p1", "late-300")).await;
    assert!(
        l.until(SETTLE * 4, |l| l
            .placer
            .registry()
            .applied("ctr-late-300")
            .is_some())
            .await,
        "the container the runtime created is unknown to numa-shim"
    );
    // A container the runtime never made is not recorded; its pod keeps its CPUs.
    expect_deadline(&mut conn, CREATE, &container("sb-p1", "hang")).await;
    tokio::time::sleep(SETTLE * 3).await;
    assert!(l.placer.registry().applied("ctr-hang").is_none());
    assert!(l.reserved("uid-p1"));
}

//! Relay lifecycle: runtime down and back, runtime restart, socket ownership, graceful drain
//! with a bounded grace period, and hook outcomes when the caller hangs up.

use numa_shim::testing::relay::client;
use numa_shim::testing::relay::fake;

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::{channel, runtime_client, RunningRelay};
use fake::Runtime;
use numa_shim::listen::ListenError;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::{
    CriRequest, Decision, Hook, NoopHook, Outcome, RelayBuilder, RelayError, SocketOptions,
};
use tonic::Code;

async fn version(
    client: &mut cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
) -> Result<String, tonic::Status> {
    client
        .version(cri::VersionRequest::default())
        .await
        .map(|r| r.into_inner().runtime_name)
}

#[tokio::test]
async fn runtime_down_gives_unavailable_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let runtime_path = dir.path().join("runtime.sock");
    let relay = RunningRelay::start(&dir.path().join("shim.sock"), &runtime_path, NoopHook).await;
    let mut client = runtime_client(channel(&relay.path).await);

    let err = version(&mut client).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.message().contains("is unavailable"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("runtime.sock"), "{}", err.message());
    // Intercepted calls fail the same way, before and after decoding.
    let err = client
        .create_container(cri::CreateContainerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);

    let runtime = Runtime::start(&runtime_path).await;
    assert_eq!(version(&mut client).await.unwrap(), "fake-runtime");

    // The runtime restarts: calls fail while it is gone and work again once it is back.
    runtime.stop().await;
    let err = version(&mut client).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let runtime = Runtime::start(&runtime_path).await;
    assert_eq!(version(&mut client).await.unwrap(), "fake-runtime");
    assert_eq!(
        runtime
            .log
            .for_path("/runtime.v1.RuntimeService/Version")
            .len(),
        1
    );
}

#[tokio::test]
async fn socket_mode_group_and_stale_socket() {
    let dir = tempfile::tempdir().unwrap();
    let listen = dir.path().join("run/numa-shim/cri.sock");
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let gid = std::fs::metadata(dir.path())
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .unwrap();

    // Default mode 0660; a group given explicitly is applied.
    let mut first = RunningRelay::start_with(
        RelayBuilder::new(&listen, &runtime.path).socket_options(SocketOptions {
            mode: 0o660,
            group: Some(gid),
        }),
    )
    .await;
    let meta = std::fs::metadata(&listen).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), gid);

    // A second relay refuses to steal a live socket.
    let err = RelayBuilder::new(&listen, &runtime.path)
        .bind()
        .await
        .unwrap_err();
    assert!(
        matches!(err, RelayError::Listen(ListenError::InUse { .. })),
        "{err}"
    );

    // A stale socket file (nobody listening) is replaced.
    first.shutdown();
    first.task.await.unwrap();
    assert!(!listen.exists(), "clean shutdown removes the socket");
    let stale = std::os::unix::net::UnixListener::bind(&listen).unwrap();
    drop(stale);
    assert!(listen.exists());
    let second = RunningRelay::start_with(
        RelayBuilder::new(&listen, &runtime.path).socket_options(SocketOptions {
            mode: 0o600,
            group: None,
        }),
    )
    .await;
    assert_eq!(
        std::fs::metadata(&listen).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let mut client = runtime_client(channel(&second.path).await);
    assert_eq!(version(&mut client).await.unwrap(), "fake-runtime");
}

async fn slow_status(
    mut client: cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    ms: u64,
) -> Result<String, tonic::Status> {
    client
        .container_status(cri::ContainerStatusRequest {
            container_id: format!("slow-{ms}"),
            verbose: false,
        })
        .await
        .map(|r| r.into_inner().status.unwrap().id)
}

#[tokio::test]
async fn shutdown_drains_in_flight_calls() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let mut relay =
        RunningRelay::start(&dir.path().join("shim.sock"), &runtime.path, NoopHook).await;
    let client = runtime_client(channel(&relay.path).await);
    let call = tokio::spawn(slow_status(client, 500));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    relay.shutdown();
    // New connections are refused at once while the in-flight call finishes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(tokio::net::UnixStream::connect(&relay.path).await.is_err());
    assert_eq!(call.await.unwrap().unwrap(), "slow-500");
    relay.task.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn shutdown_grace_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let mut relay = RunningRelay::start_with(
        RelayBuilder::new(dir.path().join("shim.sock"), &runtime.path)
            .shutdown_grace(Duration::from_millis(300)),
    )
    .await;
    let client = runtime_client(channel(&relay.path).await);
    let call = tokio::spawn(slow_status(client, 10_000));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    relay.shutdown();
    relay.task.await.unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(call.await.unwrap().is_err());
}

/// Records outcomes; lets everything through.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Code>>>);

impl Hook for Recorder {
    type Decided = ();

    async fn before(&self, _request: &CriRequest) -> Decision {
        Decision::Continue
    }
    async fn after(&self, _request: &CriRequest, _decided: Option<()>, outcome: &Outcome) {
        self.0.lock().unwrap().push(outcome.status.code());
    }
}

#[tokio::test]
async fn hook_learns_the_outcome_even_if_the_caller_hangs_up() {
    // The runtime would take 400 ms; the caller gives up after 100 ms. The relay cancels the
    // runtime call, asks the runtime whether the container exists (it does not: this runtime
    // stops at a cancel) and reports CANCELLED to the hook, exactly once.
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let hook = Recorder::default();
    let relay = RunningRelay::start_with(
        RelayBuilder::new(dir.path().join("shim.sock"), &runtime.path)
            .hook(hook.clone())
            .settle_delay(Duration::from_millis(100)),
    )
    .await;
    let request = cri::CreateContainerRequest {
        pod_sandbox_id: "slow-400".into(),
        ..Default::default()
    };
    let message = prost::Message::encode_to_vec(&request);
    // No grpc-timeout: the caller just drops its connection after 100 ms.
    let call = client::h2_unary(
        &relay.path,
        "/runtime.v1.RuntimeService/CreateContainer",
        &[],
        &message,
    );
    assert!(tokio::time::timeout(Duration::from_millis(100), call)
        .await
        .is_err());
    assert!(
        hook.0.lock().unwrap().is_empty(),
        "the runtime has not been asked yet"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let reported = hook.0.lock().unwrap().clone();
    assert_eq!(reported, vec![Code::Cancelled]);
    assert_eq!(
        runtime
            .log
            .for_path("/runtime.v1.RuntimeService/CreateContainer")
            .len(),
        1
    );
    assert!(runtime.fake.containers.lock().unwrap().is_empty());
    // Asked twice (at the cancel and after the settle delay).
    assert_eq!(
        runtime
            .log
            .for_path("/runtime.v1.RuntimeService/ListContainers")
            .len(),
        2
    );
}

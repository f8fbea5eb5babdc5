use std::collections::HashMap;
use std::pin::Pin;

use prost::Message;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::*;
use crate::placement::ContainerRole;
use crate::proto::podsapi::v1alpha1::pods_server::{Pods, PodsServer};
use crate::proto::podsapi::v1alpha1::WatchPodsEvent;

fn quantities(pairs: &[(&str, &str)]) -> HashMap<String, core_v1::Quantity> {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                core_v1::Quantity {
                    string: Some(v.to_string()),
                },
            )
        })
        .collect()
}

fn guaranteed(cpu: &str, mem: &str) -> Option<core_v1::ResourceRequirements> {
    let list = quantities(&[("cpu", cpu), ("memory", mem)]);
    Some(core_v1::ResourceRequirements {
        limits: list.clone(),
        requests: list,
    })
}

/// A pod as the kubelet marshals it: pod-level resources, a sidecar, an app container with only
/// limits (requests come from API defaulting) and fields numa-shim does not read.
fn kubelet_pod(uid: &str) -> Vec<u8> {
    let pod = core_v1::Pod {
        metadata: Some(core_v1::ObjectMeta {
            name: Some("web".into()),
            namespace: Some("prod".into()),
            uid: Some(uid.into()),
            creation_timestamp: None,
        }),
        spec: Some(core_v1::PodSpec {
            node_name: Some("node-1".into()),
            resources: guaranteed("4", "4Gi"),
            init_containers: vec![core_v1::Container {
                name: Some("proxy".into()),
                restart_policy: Some("Always".into()),
                resources: None,
            }],
            containers: vec![core_v1::Container {
                name: Some("main".into()),
                restart_policy: None,
                resources: Some(core_v1::ResourceRequirements {
                    limits: quantities(&[("cpu", "2"), ("memory", "2Gi")]),
                    requests: HashMap::new(),
                }),
            }],
        }),
        status: Some(core_v1::PodStatus {
            phase: Some("Running".into()),
        }),
    };
    let mut bytes = pod.encode_to_vec();
    // An unknown top-level field (as newer API versions add) must be skipped.
    bytes.extend_from_slice(&[0xfa, 0x01, 0x03, b'n', b'e', b'w']);
    bytes
}

#[test]
fn decodes_kubelet_pod_bytes_with_defaulting_and_roles() {
    let spec = decode_pod(&kubelet_pod("uid-1")).unwrap();
    assert_eq!(
        (
            spec.uid.as_str(),
            spec.namespace.as_str(),
            spec.name.as_str()
        ),
        ("uid-1", "prod", "web")
    );
    assert_eq!(
        spec.resources.as_ref().unwrap().requests.cpu_milli,
        Some(4000)
    );
    assert_eq!(spec.init_containers[0].role, ContainerRole::Sidecar);
    assert_eq!(spec.containers[0].role, ContainerRole::App);
    assert_eq!(
        spec.containers[0].resources.requests.cpu_milli,
        Some(2000),
        "requests default to limits"
    );
}

#[test]
fn garbage_bytes_are_an_error_not_a_panic() {
    assert!(matches!(
        decode_pod(&[0xff, 0xff, 0xff]),
        Err(PodsApiError::Decode(_))
    ));
}

struct FakeKubelet;

type EventStream = Pin<Box<dyn Stream<Item = Result<WatchPodsEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Pods for FakeKubelet {
    async fn watch_pods(
        &self,
        _: Request<WatchPodsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let events = vec![
            Ok(WatchPodsEvent {
                r#type: EventType::Added as i32,
                pod: kubelet_pod("a"),
            }),
            Ok(WatchPodsEvent {
                r#type: EventType::Added as i32,
                pod: kubelet_pod("b"),
            }),
            Ok(WatchPodsEvent {
                r#type: EventType::InitialSyncComplete as i32,
                pod: vec![],
            }),
            Ok(WatchPodsEvent {
                r#type: EventType::Deleted as i32,
                pod: kubelet_pod("b"),
            }),
        ];
        let stream = tokio_stream::iter(events).chain(tokio_stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }
}

use tokio_stream::StreamExt;

#[tokio::test]
async fn watch_fills_the_cache_from_a_pods_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pods-api.sock");
    let incoming = UnixListenerStream::new(UnixListener::bind(&socket).unwrap());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PodsServer::new(FakeKubelet))
            .serve_with_incoming(incoming),
    );
    let cache = Arc::new(PodCache::default());
    let watcher = tokio::spawn(watch(socket, cache.clone()));

    let a = cache
        .wait_for("a", Duration::from_secs(5))
        .await
        .expect("pod a arrives");
    assert_eq!(a.name, "web");
    for _ in 0..50 {
        if cache.get("b").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(cache.get("b").is_none(), "deleted pod leaves the cache");
    assert!(cache
        .wait_for("never", Duration::from_millis(50))
        .await
        .is_none());
    watcher.abort();
    server.abort();
}

/// A kubelet whose stream breaks when `stop` turns true (its process went away).
struct StoppingKubelet {
    stop: tokio::sync::watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Pods for StoppingKubelet {
    async fn watch_pods(
        &self,
        _: Request<WatchPodsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let mut stop = self.stop.clone();
        let events = vec![
            Ok(WatchPodsEvent {
                r#type: EventType::Added as i32,
                pod: kubelet_pod("a"),
            }),
            Ok(WatchPodsEvent {
                r#type: EventType::InitialSyncComplete as i32,
                pod: vec![],
            }),
        ];
        let broken = async_stream_end(async move {
            let _ = stop.wait_for(|s| *s).await;
        });
        Ok(Response::new(Box::pin(
            tokio_stream::iter(events).chain(broken),
        )))
    }
}

/// A stream that yields one UNAVAILABLE once `until` completes.
fn async_stream_end(
    until: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl Stream<Item = Result<WatchPodsEvent, Status>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        until.await;
        let _ = tx.send(Err(Status::unavailable("kubelet stopped"))).await;
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The kubelet makes its socket when it starts, usually after numa-shim: the watcher must pick
/// it up when it appears, and when the kubelet goes away keep the pods it delivered and say the
/// source is not live (so RunPodSandbox does not wait for it).
#[tokio::test]
async fn a_socket_that_appears_later_is_picked_up_and_losing_it_is_graceful() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pods-api.sock");
    let cache = Arc::new(PodCache::new(Some(socket.clone())));
    let watcher = tokio::spawn(watch(socket.clone(), cache.clone()));
    tokio::time::sleep(POLL * 3).await;
    assert_eq!(cache.link(), Link::Absent, "no socket yet");

    let serve = |socket: &std::path::Path| {
        let (stop, rx) = tokio::sync::watch::channel(false);
        let incoming = UnixListenerStream::new(UnixListener::bind(socket).unwrap());
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(PodsServer::new(StoppingKubelet { stop: rx }))
                .serve_with_incoming(incoming),
        );
        (stop, task)
    };
    let (stop, server) = serve(&socket);
    let a = cache.wait_for("a", Duration::from_secs(5)).await;
    assert!(a.is_some(), "pods from a socket that appeared after start");
    assert_eq!(cache.link(), Link::Live);

    // The kubelet stops: its stream breaks and its socket goes.
    std::fs::remove_file(&socket).unwrap();
    stop.send(true).unwrap();
    server.abort();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cache.link() != Link::Absent && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cache.link(), Link::Absent);
    assert!(cache.get("a").is_some(), "what it delivered stays known");

    // Back again.
    let (_stop, server) = serve(&socket);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cache.link() != Link::Live && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cache.link(), Link::Live);
    watcher.abort();
    server.abort();
}

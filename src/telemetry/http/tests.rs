//! Scrapes the real endpoint over loopback TCP with a hand-written HTTP/1.1 client, so the tests
//! see the bytes a Prometheus server or a kubelet-style probe would.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;
use crate::telemetry::metrics::{AssignmentType, Pool, ResourceName, Source};
use crate::telemetry::scrape::Exposition;

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

struct Reply {
    status: u16,
    headers: String,
    body: String,
}

async fn start(metrics: Arc<Metrics>, readiness: Readiness) -> Running {
    let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
    let server = MetricsServer::bind(any_port, metrics, readiness)
        .await
        .expect("bind loopback");
    let addr = server.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    Running { addr, stop, task }
}

async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw));
    read.await.expect("reply in time").expect("read");
    let raw = String::from_utf8(raw).expect("utf-8 reply");
    let (headers, body) = raw.split_once("\r\n\r\n").expect("header end");
    let status = headers
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status code");
    Reply {
        status,
        headers: headers.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn metrics_scrape_shows_recorded_events() {
    let metrics = Arc::new(Metrics::new());
    let running = start(Arc::clone(&metrics), Readiness::new()).await;
    metrics.allocation(ResourceName::Cpu, Source::Pod, true);
    metrics.allocation(ResourceName::Cpu, Source::Pod, true);
    metrics.allocation(ResourceName::Cpu, Source::Pod, true);
    metrics.allocation(ResourceName::Memory, Source::Pod, false);
    metrics.container_assignment(ResourceName::Memory, AssignmentType::PodExclusive);
    metrics.record_relay("RunPodSandbox", 0.0003, 0.2);
    metrics.set_pool_cpus(1, Pool::Shared, 12);
    metrics.set_runtime_connected(true);

    let reply = request(running.addr, "GET", "/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .headers
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        reply.headers
    );
    let exposition = Exposition::parse(&reply.body);
    let cpu_pod = [("resource_name", "cpu"), ("source", "pod")];
    let value = exposition.value("resource_manager_allocations_total", &cpu_pod);
    assert_eq!(value, Some(3.0));
    let memory_pod = [("resource_name", "memory"), ("source", "pod")];
    let errors = exposition.value("resource_manager_allocation_errors_total", &memory_pod);
    assert_eq!(errors, Some(1.0));
    let exclusive = [
        ("resource_name", "memory"),
        ("assignment_type", "pod_exclusive"),
    ];
    let assigned = exposition.value("resource_manager_container_assignments", &exclusive);
    assert_eq!(assigned, Some(1.0));
    let run = [("method", "RunPodSandbox")];
    let count = exposition.value("numa_shim_relay_runtime_duration_seconds_count", &run);
    assert_eq!(count, Some(1.0));
    let node1 = [("numa_node", "1"), ("pool", "shared")];
    assert_eq!(exposition.value("numa_shim_pool_cpus", &node1), Some(12.0));
    assert_eq!(
        exposition.value("numa_shim_runtime_connected", &[]),
        Some(1.0)
    );

    metrics.allocation(ResourceName::Cpu, Source::Pod, true);
    let again = Exposition::parse(&request(running.addr, "GET", "/metrics").await.body);
    let value = again.value("resource_manager_allocations_total", &cpu_pod);
    assert_eq!(value, Some(4.0), "a second scrape sees the new count");

    let _ = running.stop.send(());
    running.task.await.expect("server task");
}

#[tokio::test]
async fn readyz_flips_with_the_flag_and_healthz_always_answers() {
    let readiness = Readiness::new();
    let running = start(Arc::new(Metrics::new()), readiness.clone()).await;
    assert_eq!(request(running.addr, "GET", "/healthz").await.status, 200);
    let before = request(running.addr, "GET", "/readyz").await;
    assert_eq!(before.status, 503);
    assert_eq!(before.body, "not ready\n");

    readiness.mark_ready();
    assert!(readiness.is_ready());
    assert_eq!(request(running.addr, "GET", "/readyz").await.status, 200);
    assert_eq!(request(running.addr, "GET", "/healthz").await.status, 200);

    readiness.mark_not_ready();
    assert_eq!(request(running.addr, "GET", "/readyz").await.status, 503);

    let _ = running.stop.send(());
    running.task.await.expect("server task");
}

/// A failing check makes `/readyz` 503 with its reason, and ready again once it passes.
#[tokio::test]
async fn readyz_says_why_a_check_fails() {
    let readiness = Readiness::new();
    readiness.mark_ready();
    let problem = Arc::new(std::sync::Mutex::new(Some("disk full".to_string())));
    let seen = Arc::clone(&problem);
    readiness.add_check(Arc::new(move || seen.lock().unwrap().clone()));
    let running = start(Arc::new(Metrics::new()), readiness.clone()).await;
    let reply = request(running.addr, "GET", "/readyz").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (503, "not ready:\ndisk full\n")
    );
    assert!(!readiness.is_ready());
    *problem.lock().unwrap() = None;
    let reply = request(running.addr, "GET", "/readyz").await;
    assert_eq!((reply.status, reply.body.as_str()), (200, "ok\n"));
    let _ = running.stop.send(());
    running.task.await.expect("server task");
}

#[tokio::test]
async fn unknown_paths_and_methods_are_refused() {
    let running = start(Arc::new(Metrics::new()), Readiness::new()).await;
    assert_eq!(request(running.addr, "GET", "/nope").await.status, 404);
    assert_eq!(request(running.addr, "POST", "/metrics").await.status, 405);
    let head = request(running.addr, "HEAD", "/healthz").await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let _ = running.stop.send(());
    running.task.await.expect("server task");
}

#[tokio::test]
async fn shutdown_stops_the_listener() {
    let running = start(Arc::new(Metrics::new()), Readiness::new()).await;
    assert_eq!(request(running.addr, "GET", "/healthz").await.status, 200);
    let _ = running.stop.send(());
    tokio::time::timeout(Duration::from_secs(10), running.task)
        .await
        .expect("serve returns after shutdown")
        .expect("server task");
    assert!(
        TcpStream::connect(running.addr).await.is_err(),
        "port still open"
    );
}

#[tokio::test]
async fn shutdown_lets_an_idle_keep_alive_connection_go() {
    let running = start(Arc::new(Metrics::new()), Readiness::new()).await;
    let mut idle = TcpStream::connect(running.addr).await.expect("connect");
    let head = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", running.addr);
    idle.write_all(head.as_bytes()).await.expect("write");
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.expect("reply");
    assert_eq!(&first, b"HTTP/1.1 200");
    let _ = running.stop.send(());
    tokio::time::timeout(Duration::from_secs(4), running.task)
        .await
        .expect("a kept-alive idle connection does not hold shutdown up")
        .expect("server task");
}

#[tokio::test]
async fn binding_a_taken_port_names_the_address() {
    let metrics = Arc::new(Metrics::new());
    let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
    let first = MetricsServer::bind(any_port, Arc::clone(&metrics), Readiness::new())
        .await
        .expect("bind");
    let taken = first.local_addr();
    let err = MetricsServer::bind(taken, metrics, Readiness::new())
        .await
        .expect_err("port is taken");
    assert!(matches!(err, HttpError::Bind { addr, .. } if addr == taken));
    assert!(err.to_string().contains(&taken.to_string()), "{err}");
}

#[test]
fn default_address_is_loopback_9464() {
    assert_eq!(DEFAULT_ADDRESS.to_string(), "127.0.0.1:9464");
}

#[tokio::test]
async fn placement_route_uses_the_provider() {
    let state = |placement| State {
        metrics: Arc::new(Metrics::new()),
        readiness: Readiness::new(),
        placement,
    };
    let off = answer(&state(None), &Method::GET, "/placement").await;
    assert_eq!(off.status(), StatusCode::NOT_FOUND);
    let starting: PlacementProvider = Arc::new(|| Box::pin(async { None }));
    let r = answer(&state(Some(starting)), &Method::GET, "/placement").await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let live: PlacementProvider =
        Arc::new(|| Box::pin(async { Some("{\"pods\":[]}".to_string()) }));
    let r = answer(&state(Some(live)), &Method::GET, "/placement").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
}

//! `numa-shim serve` end to end: the binary takes its machine from a topology JSON (a kubelet
//! fixture) or a fake sysfs tree, its settings from a KubeletConfiguration file, and places
//! kubelet-shaped pods in front of the in-process fake runtime; a restart on the same state
//! directory keeps every placement.

use numa_shim::testing::e2e as support;

use std::path::Path;
use std::time::Duration;

use numa_shim::cpuset::CpuSet;
use numa_shim::testing::process::ShimProcess;
use numa_shim::topology::fake::FakeSysfs;
use support::harness::{fixture, kubelet_yaml, Kubelet, PodsApi};
use support::kubelet::{pod_def, quota, PodDef, Res, GI};
use support::runtime::{Fake, Runtime};
use support::{one_numa, received};

/// `numa-shim serve` in `dir` (its socket `shim.sock`, its state `state`, its log `serve.log`) in
/// front of the fake runtime on `runtime.sock`, with the machine at `topology`, the kubelet's
/// settings `kubelet_config` and `extra` flags; answering.
async fn start_serve(
    dir: &Path,
    topology: &Path,
    kubelet_config: &str,
    extra: &[&str],
) -> ShimProcess {
    ShimProcess::start(
        Path::new(env!("CARGO_BIN_EXE_numa-shim")),
        serve_flags(dir, topology, kubelet_config, extra),
        &dir.join("shim.sock"),
        &dir.join("serve.log"),
    )
    .await
}

/// The arguments of [`start_serve`]; writes `kubelet.yaml`.
fn serve_flags(dir: &Path, topology: &Path, kubelet_config: &str, extra: &[&str]) -> Vec<String> {
    let config = dir.join("kubelet.yaml");
    std::fs::write(&config, kubelet_config).unwrap();
    crate::serve_args(
        &dir.join("shim.sock"),
        &dir.join("runtime.sock"),
        topology,
        &config,
        &dir.join("state"),
        extra,
    )
}

fn plr_pod(name: &str, budget: u64, exclusive: u64) -> PodDef {
    pod_def(name)
        .pod_level(Res::guaranteed(budget * 1000, budget * GI))
        .container("main", Res::guaranteed(exclusive * 1000, exclusive * GI))
        .container("helper", Res::default())
}

fn pod_cpus(fake: &Fake, pod: &PodDef) -> CpuSet {
    pod.all().fold(CpuSet::new(), |acc, c| {
        acc.union(&received(&fake.created(&pod.name, &c.name)).cpus)
    })
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..250 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_from_topology_json_places_pods_and_keeps_them_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let topology = fixture("topoDualSocketMultiNumaPerSocketHT");
    let machine = dir.path().join("machine.json");
    std::fs::write(&machine, topology.to_json().unwrap()).unwrap();
    let settings = kubelet_yaml("single-numa-node", "pod", "");
    let runtime = Runtime::start(&dir.path().join("runtime.sock"), Fake::default()).await;
    let fake = runtime.fake.clone();
    let cri = ["--pod-knowledge", "cri"];

    let mut serve = start_serve(dir.path(), &machine, &settings, &cri).await;
    let kubelet = Kubelet::connect(serve.socket()).await;
    let burst = kubelet
        .start_pod(
            &pod_def("burst").container("app", Res::burstable(250, 500, 64 << 20, 128 << 20)),
        )
        .await
        .unwrap();
    let a = plr_pod("a", 4, 2);
    kubelet.start_pod(&a).await.unwrap();
    let main = received(&fake.created("a", "main"));
    let helper = received(&fake.created("a", "helper"));
    let bubble = pod_cpus(&fake, &a);
    let node = one_numa(&topology, &bubble);
    assert_eq!((main.cpus.len(), helper.cpus.len()), (2, 2));
    assert_eq!((main.quota, helper.quota), (-1, quota(4000)));
    assert_eq!(
        (main.mems.clone(), helper.mems.clone()),
        (node.to_string(), node.to_string())
    );
    let pool = topology.cpu_set().difference(&bubble).to_string();
    eventually("the burstable container leaves the bubble", || {
        fake.resources(burst.id("app")).cpuset_cpus == pool
    })
    .await;
    serve.stop().await;

    let mut serve = start_serve(dir.path(), &machine, &settings, &cri).await;
    let kubelet = Kubelet::connect(serve.socket()).await;
    let b = plr_pod("b", 4, 2);
    kubelet.start_pod(&b).await.unwrap();
    let second = pod_cpus(&fake, &b);
    assert!(second.is_disjoint(&bubble), "{second} overlaps {bubble}");
    one_numa(&topology, &second);
    serve.stop().await;
    runtime.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_from_a_fake_sysfs_tree_with_the_pods_api() {
    let dir = tempfile::tempdir().unwrap();
    let topology = fixture("topoDualSocketMultiNumaPerSocketHTLarge");
    let sys = dir.path().join("sys");
    FakeSysfs::new(topology.clone()).write(&sys).unwrap();
    let socket = dir.path().join("pods-api.sock");
    let api = PodsApi::default();
    let server = api.serve(&socket);
    let runtime = Runtime::start(&dir.path().join("runtime.sock"), Fake::default()).await;
    let fake = runtime.fake.clone();
    let settings = kubelet_yaml("single-numa-node", "pod", "");
    let args = [
        "--pod-knowledge",
        "pods-api",
        "--pods-api-socket",
        socket.to_str().unwrap(),
    ];
    let mut serve = start_serve(dir.path(), &sys, &settings, &args).await;
    let kubelet = Kubelet::connect(serve.socket()).await;

    let mesh = pod_def("mesh")
        .pod_level(Res::guaranteed(6000, 6 * GI))
        .sidecar("proxy", Res::guaranteed(2000, GI))
        .container("main", Res::guaranteed(2000, 2 * GI))
        .container("log", Res::default());
    api.add_bytes(mesh.pods_api_bytes());
    kubelet.start_pod(&mesh).await.unwrap();
    let proxy = received(&fake.created("mesh", "proxy"));
    let main = received(&fake.created("mesh", "main"));
    let log = received(&fake.created("mesh", "log"));
    let all = pod_cpus(&fake, &mesh);
    assert_eq!(all.len(), 6);
    let node = one_numa(&topology, &all);
    assert_eq!((proxy.quota, main.quota, log.quota), (-1, -1, quota(6000)));
    assert_eq!(log.cpus.len(), 2, "the pod pool is what the slices leave");
    for r in [&proxy, &main, &log] {
        assert_eq!(r.mems, node.to_string());
    }
    serve.stop().await;
    server.abort();
    runtime.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_from_the_raw_fixture_json_without_the_memory_manager() {
    let dir = tempfile::tempdir().unwrap();
    let machine = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/topologies/topoDualSocketHT.json");
    let topology = fixture("topoDualSocketHT");
    let settings = kubelet_yaml("single-numa-node", "pod", "memoryManagerPolicy: None\n");
    let runtime = Runtime::start(&dir.path().join("runtime.sock"), Fake::default()).await;
    let fake = runtime.fake.clone();
    let mut serve = start_serve(dir.path(), &machine, &settings, &["--pod-knowledge", "cri"]).await;
    let kubelet = Kubelet::connect(serve.socket()).await;
    let a = plr_pod("a", 4, 2);
    let b = plr_pod("b", 4, 2);
    kubelet.start_pod(&a).await.unwrap();
    kubelet.start_pod(&b).await.unwrap();
    let (first, second) = (pod_cpus(&fake, &a), pod_cpus(&fake, &b));
    assert_ne!(one_numa(&topology, &first), one_numa(&topology, &second));
    assert_eq!(received(&fake.created("a", "main")).mems, "");
    let err = kubelet.start_pod(&plr_pod("c", 4, 2)).await.unwrap_err();
    assert_eq!(
        err.message(),
        "TopologyAffinityError: Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
    );
    serve.stop().await;
    runtime.stop().await;
}

/// `GET /healthz` on `port` answers.
async fn healthz(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if s.write_all(request).await.is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer).await;
    answer.starts_with("HTTP/1.1 200")
}

/// SIGHUP re-reads `--config`: a new `logLevel` replaces the log filter and a new
/// `metricsAddress` moves the endpoint, without a restart; a setting bound at start is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_log_level_and_metrics_address() {
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    std::fs::write(&machine, fixture("topoDualSocketHT").to_json().unwrap()).unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock"), Fake::default()).await;
    let config = dir.path().join("numa-shim.yaml");
    let (first, second) = (
        numa_shim::testing::free_port(),
        numa_shim::testing::free_port(),
    );
    std::fs::write(
        &config,
        format!("logLevel: warn\nmetricsAddress: 127.0.0.1:{first}\npodKnowledge: cri\n"),
    )
    .unwrap();
    let settings = kubelet_yaml("best-effort", "pod", "");
    let args = ["--config", config.to_str().unwrap()];
    let mut serve = start_serve(dir.path(), &machine, &settings, &args).await;
    let log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    eventually("metrics on the first port", || futures_lite(healthz(first))).await;
    let kubelet = Kubelet::connect(serve.socket()).await;
    kubelet
        .start_pod(&pod_def("quiet").container("app", Res::default()))
        .await
        .unwrap();
    assert!(
        !log().contains(" INFO "),
        "warn filters info out:\n{}",
        log()
    );
    assert!(!log().contains(" DEBUG "), "{}", log());

    std::fs::write(
        &config,
        format!(
            "logLevel: debug\nmetricsAddress: 127.0.0.1:{second}\npodKnowledge: cri\n\
             driftPeriod: 30s\n"
        ),
    )
    .unwrap();
    serve.signal("HUP");
    eventually("the reload is logged", || {
        log().contains("configuration reloaded")
    })
    .await;
    let text = log();
    assert!(text.contains("log filter replaced"), "{text}");
    assert!(
        text.contains("field=\"driftPeriod\"") && text.contains("next restart"),
        "a start-up setting is refused:\n{text}"
    );
    eventually("metrics on the second port", || {
        futures_lite(healthz(second))
    })
    .await;
    assert!(!futures_lite(healthz(first)), "the first port is closed");
    kubelet
        .start_pod(&pod_def("loud").container("app", Res::default()))
        .await
        .unwrap();
    eventually("debug lines after the reload", || log().contains(" DEBUG ")).await;
    serve.stop().await;
    runtime.stop().await;
}

/// Runs a short future to completion from a synchronous check (inside the test's runtime).
fn futures_lite<F: std::future::Future<Output = bool>>(f: F) -> bool {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// SIGTERM while start-up still waits for the runtime (none answers on its socket) ends
/// numa-shim: a DaemonSet rollout or `kill` must not hang on a node whose runtime is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_start_up_ends_serve() {
    let dir = tempfile::tempdir().unwrap();
    let topology = fixture("topoDualSocketMultiNumaPerSocketHT");
    let machine = dir.path().join("machine.json");
    std::fs::write(&machine, topology.to_json().unwrap()).unwrap();
    let mut serve = ShimProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_numa-shim")),
        serve_flags(
            dir.path(),
            &machine,
            &kubelet_yaml("single-numa-node", "pod", ""),
            &[],
        ),
        &dir.path().join("shim.sock"),
        &dir.path().join("serve.log"),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        serve.exited().is_none(),
        "serve should wait for the runtime: {}",
        serve.log_text()
    );
    assert!(!serve.socket().exists(), "{}", serve.log_text());
    serve.stop().await;
}

//! A running relay with placement in front of the fake runtime: pods are admitted, rejected and
//! placed through real CRI calls, then `/metrics` and `/placement` are read over HTTP like
//! Prometheus and `numa-shim inspect` would, and must match what happened.
//!
//! Machine: `topoDualSocketHT` (2 NUMA nodes × 6 CPUs, cores = thread pairs), static CPU policy,
//! reserved CPU 0, pod scope, single-numa-node; no memory manager.

use numa_shim::testing::relay::client;
use numa_shim::testing::relay::fake;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use client::{channel, runtime_client, RunningRelay};
use fake::Runtime;
use numa_shim::inspect::{self, Owner, PlacementView};
use numa_shim::k8s::{KubeletConfiguration, Pod};
use numa_shim::knowledge::{Knowledge, PodCache, SpecOrigin, Watched};
use numa_shim::lifecycle::store::CHECKPOINT_NAME;
use numa_shim::lifecycle::{Placer, Registry, Store};
use numa_shim::placement::node::Node;
use numa_shim::placement::PodSpec;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::LifecycleHook;
use numa_shim::relay::RelayBuilder;
use numa_shim::state::Checkpoint;
use numa_shim::telemetry::{Metrics, MetricsServer, PlacementProvider, Readiness};
use numa_shim::topology::Topology;

const KUBELET: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
                       topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n";

const GUARANTEED: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: guaranteed}\nspec:\n  containers:\n  - name: app\n    resources:\n      requests: {cpu: \"2\", memory: 1Gi}\n      limits: {cpu: \"2\", memory: 1Gi}\n";

fn shared(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures")
        .join(sub)
}

fn spec_from_yaml(text: &str) -> PodSpec {
    Pod::all_from_yaml(text).unwrap()[0].to_pod_spec().unwrap()
}

fn example(name: &str) -> PodSpec {
    spec_from_yaml(&std::fs::read_to_string(shared(&format!("examples/{name}.yaml"))).unwrap())
}

fn sandbox(spec: &PodSpec) -> cri::RunPodSandboxRequest {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: spec.name.clone(),
                uid: spec.uid.clone(),
                namespace: spec.namespace.clone(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container(sandbox_id: &str, name: &str) -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: sandbox_id.to_string(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.to_string(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The value of the sample `name{labels}` in a Prometheus text exposition.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
        .parse()
        .unwrap()
}

async fn get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// A relay with placement in front of the fake runtime, and the metrics endpoint.
struct Live {
    _dir: tempfile::TempDir,
    _runtime: Runtime,
    relay: RunningRelay,
    cache: Arc<PodCache>,
    addr: SocketAddr,
}

async fn start(kubelet: &str, machine: Topology) -> Live {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(&dir.path().join("runtime.sock")).await;
    let config = KubeletConfiguration::from_yaml(kubelet)
        .unwrap()
        .resolve(&machine)
        .unwrap()
        .config;
    let node = Node::new(machine, config).unwrap();
    let cache = Arc::new(PodCache::default());
    let metrics = Arc::new(Metrics::new());
    let store = Store::new(Checkpoint::new(dir.path(), CHECKPOINT_NAME));
    let placer = Arc::new(Placer::new(
        Registry::new(node),
        store,
        Knowledge::Watched(vec![Watched {
            origin: SpecOrigin::PodsApi,
            cache: cache.clone(),
        }]),
        metrics.clone(),
    ));
    placer.publish_pools();
    let relay = RunningRelay::start_with(
        RelayBuilder::new(dir.path().join("shim.sock"), &runtime.path)
            .hook(LifecycleHook::new(placer.clone()))
            .metrics(metrics.clone()),
    )
    .await;
    let provider: PlacementProvider = Arc::new(move || {
        let json = PlacementView::from_registry(&placer.registry()).to_json();
        Box::pin(async move { Some(json) })
    });
    let server = MetricsServer::bind(([127, 0, 0, 1], 0).into(), metrics, Readiness::new())
        .await
        .unwrap()
        .with_placement(provider);
    let addr = server.local_addr();
    tokio::spawn(server.serve(std::future::pending()));
    Live {
        _dir: dir,
        _runtime: runtime,
        relay,
        cache,
        addr,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_placement_follow_the_pods() {
    let machine = Topology::load(&shared("topologies/topoDualSocketHT.json")).unwrap();
    let live = start(KUBELET, machine).await;
    let (cache, relay, addr) = (&live.cache, &live.relay, live.addr);
    let mixed = example("pod-scope-mixed");
    let empty = example("empty-shared-pool");
    let guaranteed = spec_from_yaml(GUARANTEED);
    for p in [&mixed, &empty, &guaranteed] {
        cache.insert(p.clone());
    }
    let mut client = runtime_client(channel(&relay.path).await);
    let sb = client
        .run_pod_sandbox(sandbox(&mixed))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    for name in ["metrics-sidecar", "logging-sidecar", "main-app"] {
        client.create_container(container(&sb, name)).await.unwrap();
    }
    let rejected = client.run_pod_sandbox(sandbox(&empty)).await.unwrap_err();
    assert_eq!(
        rejected.code(),
        tonic::Code::FailedPrecondition,
        "{rejected:?}"
    );
    let sb = client
        .run_pod_sandbox(sandbox(&guaranteed))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    client
        .create_container(container(&sb, "app"))
        .await
        .unwrap();

    let text = get(addr, "/metrics").await;
    let alloc = |res: &str, src: &str| {
        sample(
            &text,
            &format!(
                r#"resource_manager_allocations_total{{resource_name="{res}",source="{src}"}}"#
            ),
        )
    };
    assert_eq!(
        alloc("cpu", "pod"),
        1.0,
        "the pod budget of pod-scope-mixed"
    );
    assert_eq!(
        alloc("cpu", "node"),
        1.0,
        "the exclusive slice of guaranteed/app"
    );
    assert_eq!(alloc("memory", "pod"), 0.0);
    let errors = sample(
        &text,
        r#"resource_manager_allocation_errors_total{resource_name="cpu",source="pod"}"#,
    );
    assert_eq!(errors, 1.0, "empty-shared-pool rejected");
    let assigned = |kind: &str| {
        sample(
            &text,
            &format!(
                r#"resource_manager_container_assignments{{assignment_type="{kind}",resource_name="cpu"}}"#
            ),
        )
    };
    assert_eq!(assigned("pod_exclusive"), 1.0, "main-app");
    assert_eq!(assigned("pod_shared"), 2.0, "the two sidecars");
    assert_eq!(assigned("node_exclusive"), 1.0, "guaranteed/app");
    let count = |method: &str| {
        sample(
            &text,
            &format!(r#"numa_shim_relay_shim_duration_seconds_count{{method="{method}"}}"#),
        )
    };
    assert_eq!(count("RunPodSandbox"), 3.0);
    assert_eq!(count("CreateContainer"), 4.0);
    let runtime_count = sample(
        &text,
        r#"numa_shim_relay_runtime_duration_seconds_count{method="RunPodSandbox"}"#,
    );
    assert_eq!(runtime_count, 3.0);
    assert_eq!(sample(&text, "numa_shim_runtime_connected"), 1.0);

    // /placement, fetched the way `numa-shim inspect` does.
    let endpoint = format!("http://{addr}");
    let view = tokio::task::spawn_blocking(move || inspect::fetch(&endpoint))
        .await
        .unwrap()
        .unwrap();
    let names: Vec<&str> = view.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"pod-scope-mixed") && names.contains(&"guaranteed"));
    let mut by_owner: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_node: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    for n in &view.numa_nodes {
        for c in &n.cpus {
            let kind = match &c.owner {
                Owner::Exclusive {
                    in_pod_budget: true,
                    ..
                } => "pod",
                Owner::Exclusive { .. } => "exclusive",
                Owner::PodPool { .. } => "pod",
                Owner::Reserved => "reserved",
                Owner::Shared => "shared",
                Owner::Unavailable => "unavailable",
            };
            *by_owner.entry(kind).or_default() += 1;
            *per_node.entry((n.id, kind)).or_default() += 1;
        }
    }
    assert_eq!(by_owner.get("reserved"), Some(&1));
    assert_eq!(by_owner.get("pod"), Some(&4), "{by_owner:?}");
    assert_eq!(by_owner.get("exclusive"), Some(&2), "{by_owner:?}");
    assert_eq!(by_owner.get("shared"), Some(&5), "{by_owner:?}");
    let mixed_view = view
        .pods
        .iter()
        .find(|p| p.name == "pod-scope-mixed")
        .unwrap();
    let main = mixed_view
        .containers
        .iter()
        .find(|c| c.name == "main-app")
        .unwrap();
    assert_eq!(main.pool, "exclusive");
    assert_eq!(main.id.as_deref(), Some("ctr-main-app"));

    // The pool gauges agree with the view, node by node.
    for n in &view.numa_nodes {
        for (kind, pool) in [
            ("reserved", "reserved"),
            ("pod", "pod"),
            ("exclusive", "exclusive"),
            ("shared", "shared"),
        ] {
            let want = per_node.get(&(n.id, kind)).copied().unwrap_or(0) as f64;
            let got = sample(
                &text,
                &format!(
                    r#"numa_shim_pool_cpus{{numa_node="{}",pool="{pool}"}}"#,
                    n.id
                ),
            );
            assert_eq!(got, want, "numa {} {pool}", n.id);
        }
    }

    // The SVG of the same view is XML and draws every CPU once.
    let svg = inspect::render_svg(&view);
    let doc = roxmltree::Document::parse(&svg).expect("the SVG parses as XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let cells: Vec<&str> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("cpu"))
        .filter_map(|n| n.attribute("id"))
        .collect();
    assert_eq!(cells.len(), 12);
    for cpu in 0..12 {
        assert!(cells.contains(&format!("cpu-{cpu}").as_str()), "cpu {cpu}");
    }
    let table = inspect::render_table(&view);
    assert_eq!(table.matches("  cpu ").count(), 12, "{table}");
    // The command prints the same three forms.
    let endpoint = format!("http://{addr}");
    let run = move |output: &'static str| {
        let endpoint = endpoint.clone();
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_numa-shim"))
                .args(["inspect", "--endpoint", &endpoint, "--output", output])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        })
    };
    assert_eq!(run("table").await.unwrap(), table);
    assert_eq!(run("svg").await.unwrap(), inspect::render_svg(&view));
    let json: PlacementView = serde_json::from_str(&run("json").await.unwrap()).unwrap();
    assert_eq!(json, view);
    assert!(table.contains("default/pod-scope-mixed"), "{table}");

    // Removing the guaranteed pod gives its CPUs back, in the view and the gauges.
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: sb.clone(),
        })
        .await
        .unwrap();
    let view: PlacementView = serde_json::from_str(&get(addr, "/placement").await).unwrap();
    assert_eq!(view.pods.len(), 1);
    let text = get(addr, "/metrics").await;
    let exclusive: f64 = (0..2)
        .map(|n| {
            sample(
                &text,
                &format!(r#"numa_shim_pool_cpus{{numa_node="{n}",pool="exclusive"}}"#),
            )
        })
        .sum();
    assert_eq!(exclusive, 0.0);
}

const KUBELET_MEMORY: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
                              memoryManagerPolicy: Static\n\
                              reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n\
                              topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n";

/// With the Static memory policy: memory budgets and pinnings are counted, and each NUMA
/// node's memory appears in the view and the memory pool gauges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_counted_and_drawn() {
    let mut machine = Topology::load(&shared("topologies/topoDualSocketHT.json")).unwrap();
    machine.numa = (0..2)
        .map(|id| numa_shim::topology::NumaNode {
            id,
            memory: 16 << 30,
            ..Default::default()
        })
        .collect();
    let live = start(KUBELET_MEMORY, machine).await;
    let mixed = example("pod-scope-mixed");
    let guaranteed = spec_from_yaml(GUARANTEED);
    let mut client = runtime_client(channel(&live.relay.path).await);
    for (p, names) in [
        (
            &mixed,
            &["metrics-sidecar", "logging-sidecar", "main-app"][..],
        ),
        (&guaranteed, &["app"][..]),
    ] {
        live.cache.insert(p.clone());
        let sb = client
            .run_pod_sandbox(sandbox(p))
            .await
            .unwrap()
            .into_inner()
            .pod_sandbox_id;
        for name in names {
            client.create_container(container(&sb, name)).await.unwrap();
        }
    }
    let text = get(live.addr, "/metrics").await;
    let view: PlacementView = serde_json::from_str(&get(live.addr, "/placement").await).unwrap();
    let series = |name: &str, labels: String| sample(&text, &format!("{name}{{{labels}}}"));
    let alloc = |res: &str, src: &str| {
        series(
            "resource_manager_allocations_total",
            format!(r#"resource_name="{res}",source="{src}""#),
        )
    };
    assert_eq!(alloc("memory", "pod"), 1.0, "pod-scope-mixed's 4Gi budget");
    assert_eq!(alloc("memory", "node"), 1.0, "guaranteed/app's 1Gi");
    let assigned = |kind: &str| {
        series(
            "resource_manager_container_assignments",
            format!(r#"assignment_type="{kind}",resource_name="memory""#),
        )
    };
    assert_eq!(assigned("node_exclusive"), 1.0, "guaranteed/app");
    // Inside the budget: containers with their own blocks are pod_exclusive, the others that
    // are pinned to the budget's nodes pod_shared, as the view shows them.
    let mixed_view = view
        .pods
        .iter()
        .find(|p| p.name == "pod-scope-mixed")
        .unwrap();
    let pinned = mixed_view
        .containers
        .iter()
        .filter(|c| c.memory_nodes.is_some())
        .count() as f64;
    assert_eq!(
        assigned("pod_exclusive") + assigned("pod_shared"),
        pinned,
        "{mixed_view:?}"
    );
    assert!(
        assigned("pod_exclusive") >= 1.0,
        "main-app has 2Gi of its own"
    );

    // Memory per NUMA node: what the view shows is what the gauges say, and it adds up.
    let mut held = 0;
    for n in &view.numa_nodes {
        let m = n
            .memory
            .iter()
            .find(|m| m.resource == "memory")
            .expect("memory accounted");
        assert_eq!(m.total, 16 << 30);
        assert_eq!(
            m.system_reserved + m.pod + m.exclusive + m.free,
            m.total,
            "{m:?}"
        );
        held += m.pod + m.exclusive;
        for (pool, value) in [
            ("reserved", m.system_reserved),
            ("pod", m.pod),
            ("exclusive", m.exclusive),
            ("shared", m.free),
        ] {
            let got = series(
                "numa_shim_pool_memory_bytes",
                format!(r#"numa_node="{}",pool="{pool}""#, n.id),
            );
            assert_eq!(got, value as f64, "numa {} {pool}", n.id);
        }
    }
    assert_eq!(view.numa_nodes[0].memory[0].system_reserved, 100 << 20);
    assert_eq!(held, (4 << 30) + (1 << 30), "the budget and guaranteed/app");
    let table = inspect::render_table(&view);
    assert!(table.contains("total 16Gi  reserved 100Mi"), "{table}");
}

//! Restarts without a usable checkpoint keep exclusivity and keep the view whole, in front of
//! the fake runtime: a pod whose pool moved after its sidecar was created (the create-time
//! `numa-shim.io/cpus` annotation is stale) is rebuilt where it runs, never with the sidecar on
//! the main container's exclusive CPU; the checkpoint is missing, corrupt or refused, and
//! `/placement` and PodResources show the same pod afterwards; a machine whose memory size
//! moved and a node with every CPU allocated and no reservation restore their own checkpoint.

use numa_shim::testing::e2e as support;

use numa_shim::cpuset::CpuSet;
use numa_shim::inspect::{PlacementView, PodView};
use numa_shim::podresources::{PodEntry, Snapshot};
use numa_shim::state::Checkpoint;
use support::harness::{config, machine, Setup, Shim};
use support::kubelet::{pod_def, PodDef, Res, GI};
use support::runtime::Runtime;

const TWO: &str = "topoDualSocketHT";
const CHECKPOINT: &str = "numa-shim-state.json";

/// The demo's mixed pod, CRI only: the sidecar arrives first with the whole 4-CPU budget, then
/// main takes 2 of them and the running sidecar is moved to the other 2.
fn mixed() -> PodDef {
    pod_def("mixed")
        .pod_level(Res::guaranteed(4000, 2 * GI))
        .container("proxy", Res::default())
        .container("main", Res::guaranteed(2000, GI))
}

fn cpus_of(shim: &Shim, id: &str) -> CpuSet {
    CpuSet::parse(&shim.fake().resources(id).cpuset_cpus).unwrap()
}

fn view(shim: &Shim, name: &str) -> PodView {
    let view = PlacementView::from_registry(&shim.started.placer.registry());
    view.pods
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} is not in /placement"))
}

fn podresources(shim: &Shim, name: &str) -> PodEntry {
    Snapshot::capture_pod(&shim.started.placer.registry(), "e2e", name)
        .unwrap_or_else(|| panic!("{name} is not in PodResources"))
}

/// What a checkpoint can be at restart.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Missing,
    Corrupt,
    /// Readable, but it does not add up on this machine, so it is refused as a whole.
    Refused,
}

fn damage(dir: &std::path::Path, how: Damage) {
    let state = dir.join("state");
    let path = state.join(CHECKPOINT);
    match how {
        Damage::Missing => std::fs::remove_file(&path).unwrap(),
        Damage::Corrupt => {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        }
        Damage::Refused => {
            let checkpoint = Checkpoint::new(&state, CHECKPOINT);
            let mut value: serde_json::Value = checkpoint.read().unwrap().unwrap();
            let free = &mut value["node"]["memory"]["machine"]["0"]["memory"]["memory"]["free"];
            *free = serde_json::json!(free.as_u64().unwrap() - GI);
            checkpoint.write(&value).unwrap();
        }
    }
}

#[tokio::test]
async fn a_rebuilt_pod_is_where_it_runs_and_whole() {
    for how in [Damage::Missing, Damage::Corrupt, Damage::Refused] {
        let dir = tempfile::tempdir().unwrap();
        let setup = Setup::new(TWO, "single-numa-node", "pod");
        let shim = Shim::start(dir.path(), &setup).await;
        let kubelet = shim.kubelet().await;
        let def = mixed();
        let running = kubelet.start_pod(&def).await.unwrap();
        let (proxy, main) = (running.id("proxy"), running.id("main"));
        let slice = cpus_of(&shim, main);
        shim.eventually("the sidecar leaves main's slice", |f| {
            CpuSet::parse(&f.resources(proxy).cpuset_cpus)
                .unwrap()
                .is_disjoint(&slice)
        })
        .await;
        let annotated = shim.fake().state().containers[proxy].container.annotations
            ["numa-shim.io/cpus"]
            .clone();
        assert!(
            !CpuSet::parse(&annotated).unwrap().is_disjoint(&slice),
            "the premise: the sidecar's annotation ({annotated}) is stale"
        );
        let before = (view(&shim, "mixed"), podresources(&shim, "mixed"));

        let runtime: Runtime = shim.stop().await;
        // A checkpoint write already on a blocking thread outlives the stop: let it land.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        damage(dir.path(), how);
        let shim = Shim::start_with(dir.path(), &setup, runtime).await;
        let recovery = shim.started.recovery.clone();
        assert!(!recovery.from_checkpoint, "{how:?}: {recovery:?}");
        assert_eq!(
            (recovery.rebuilt, recovery.held),
            (1, 0),
            "{how:?}: {recovery:?}"
        );
        let registry = shim.started.placer.registry();
        for (id, record) in registry.containers() {
            let want = registry.desired(record).unwrap();
            if id != main {
                assert!(
                    want.is_disjoint(&slice),
                    "{how:?}: {} would be put on main's exclusive cpus {slice}: {want}",
                    record.name
                );
            }
        }
        drop(registry);
        assert_eq!(cpus_of(&shim, main), slice, "{how:?}: main never moves");
        assert!(cpus_of(&shim, proxy).is_disjoint(&slice), "{how:?}");
        assert_eq!(view(&shim, "mixed"), before.0, "{how:?}: /placement");
        assert_eq!(
            podresources(&shim, "mixed"),
            before.1,
            "{how:?}: PodResources"
        );
        let _ = shim.stop().await;
    }
}

/// The machine's NUMA memory total moved while numa-shim was down (issue 15: it does on this
/// machine): the decisions still fit, so the checkpoint is used and the pods stay whole.
#[tokio::test]
async fn a_memory_size_that_moved_keeps_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(TWO, "single-numa-node", "pod");
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    kubelet.start_pod(&mixed()).await.unwrap();
    let before = (view(&shim, "mixed"), podresources(&shim, "mixed"));
    let runtime = shim.stop().await;

    let mut resized = setup.clone();
    resized.topology = machine(TWO, 16 * GI - (300 << 20));
    let shim = Shim::start_with(dir.path(), &resized, runtime).await;
    let recovery = shim.started.recovery.clone();
    assert!(recovery.from_checkpoint, "{recovery:?}");
    assert_eq!(view(&shim, "mixed"), before.0);
    assert_eq!(podresources(&shim, "mixed"), before.1);
}

/// `reservedSystemCPUs: ""` and every CPU allocated: the shared pool is empty, which the
/// kubelet's check refuses; numa-shim's own checkpoint must still restore.
#[tokio::test]
async fn every_cpu_allocated_without_a_reservation_restores() {
    let dir = tempfile::tempdir().unwrap();
    let topology = support::harness::fixture(TWO);
    let yaml = "cpuManagerPolicy: static\nreservedSystemCPUs: \"\"\n\
                topologyManagerPolicy: best-effort\ntopologyManagerScope: pod\n\
                memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n";
    let setup = Setup {
        config: config(yaml, &topology),
        topology,
        spec_source: numa_shim::lifecycle::SpecSource::CriOnly,
        cgroups: None,
        drift_period: std::time::Duration::from_secs(3600),
        devices: None,
    };
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    for name in ["a", "b"] {
        let def = pod_def(name).container("c", Res::guaranteed(6000, GI));
        kubelet.start_pod(&def).await.unwrap();
    }
    assert!(shim.shared().is_empty(), "every CPU is allocated");
    let before = (view(&shim, "a"), view(&shim, "b"));
    let runtime = shim.stop().await;
    let shim = Shim::start_with(dir.path(), &setup, runtime).await;
    let recovery = shim.started.recovery.clone();
    assert!(recovery.from_checkpoint, "{recovery:?}");
    assert_eq!((view(&shim, "a"), view(&shim, "b")), before);
}

/// A pod whose spec is nowhere (a sandbox without numa-shim's annotation, as an older
/// numa-shim left it) cannot be put back whole: its containers keep their CPUs, held, the
/// sidecar still never on main's slice, and `/placement` still lists them.
#[tokio::test]
async fn containers_of_a_pod_without_a_spec_are_held_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(TWO, "single-numa-node", "pod");
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let running = kubelet.start_pod(&mixed()).await.unwrap();
    let (proxy, main) = (running.id("proxy"), running.id("main"));
    let slice = cpus_of(&shim, main);
    shim.eventually("the sidecar leaves main's slice", |f| {
        CpuSet::parse(&f.resources(proxy).cpuset_cpus)
            .unwrap()
            .is_disjoint(&slice)
    })
    .await;
    let runtime = shim.stop().await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    runtime
        .fake
        .state()
        .sandboxes
        .get_mut(&running.sandbox)
        .unwrap()
        .annotations
        .remove("numa-shim.io/pod");
    damage(dir.path(), Damage::Missing);
    let shim = Shim::start_with(dir.path(), &setup, runtime).await;
    let recovery = shim.started.recovery.clone();
    assert_eq!((recovery.rebuilt, recovery.held), (0, 2), "{recovery:?}");
    let registry = shim.started.placer.registry();
    let record = registry.applied(proxy).unwrap().clone();
    assert!(registry.desired(&record).unwrap().is_disjoint(&slice));
    assert!(
        registry.node().shared_cpus().is_disjoint(&slice),
        "main's slice is held"
    );
    drop(registry);
    let listed = view(&shim, "mixed");
    let names: Vec<(&str, Option<&str>)> = listed
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.id.as_deref()))
        .collect();
    assert_eq!(
        names,
        vec![("proxy", Some(proxy)), ("main", Some(main))],
        "{listed:?}"
    );
    let main_view = listed.containers.iter().find(|c| c.name == "main").unwrap();
    assert_eq!(
        (main_view.cpus.as_str(), main_view.pool.as_str()),
        (slice.to_list().as_str(), "exclusive")
    );
}

/// numa-shim's own runtime calls fail with an error that names the socket and the method:
/// start-up against a runtime that is not there says which socket and which call.
#[tokio::test]
async fn a_runtime_that_does_not_answer_is_named_with_its_socket_and_method() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(TWO, "single-numa-node", "pod");
    let socket = dir.path().join("no-runtime.sock");
    let options = numa_shim::lifecycle::Options {
        topology: setup.topology.clone(),
        config: setup.config.clone(),
        state_dir: dir.path().join("state"),
        spec_source: setup.spec_source.clone(),
        pool: Default::default(),
        runtime_wait: Some(std::time::Duration::from_millis(300)),
        devices: None,
        claims: None,
        reports: None,
    };
    let metrics = std::sync::Arc::new(numa_shim::telemetry::Metrics::new());
    let err = numa_shim::lifecycle::start(options, socket.clone(), metrics)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains(&socket.display().to_string()), "{err}");
    assert!(err.contains("ListPodSandbox"), "{err}");
}

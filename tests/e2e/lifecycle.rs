//! The lifecycle shell end to end: numa-shim's own UpdateContainerResources calls when the node
//! shared pool changes, kubelet updates rewritten back, restarts with and without the
//! checkpoint, many pods from several clients at once, and runtime failures after a reservation.

use numa_shim::testing::e2e as support;

use std::collections::BTreeSet;

use numa_shim::cpuset::CpuSet;
use numa_shim::proto::cri::v1 as cri;
use support::harness::{Kubelet, RunningPod, Setup, Shim};
use support::kubelet::{pod_def, quota, PodDef, Res, GI};
use support::{one_numa, received};
use tonic::Code;

const TWO: &str = "topoDualSocketHT";
const FOUR: &str = "topoDualSocketMultiNumaPerSocketHT";
const EIGHT: &str = "topoDualSocketMultiNumaPerSocketHTLarge";

fn plr_pod(name: &str, budget: u64, exclusive: u64) -> PodDef {
    pod_def(name)
        .pod_level(Res::guaranteed(budget * 1000, budget * GI))
        .container("main", Res::guaranteed(exclusive * 1000, exclusive * GI))
        .container("helper", Res::default())
}

fn burstable(name: &str) -> PodDef {
    pod_def(name).container("app", Res::burstable(500, 1000, 256 << 20, 512 << 20))
}

/// The CPUs the runtime was told to give the pod's containers (bubble in pod scope).
fn pod_cpus(shim: &Shim, pod: &PodDef) -> CpuSet {
    pod.all().fold(CpuSet::new(), |acc, c| {
        acc.union(&received(&shim.fake().created(&pod.name, &c.name)).cpus)
    })
}

fn current_cpus(shim: &Shim, id: &str) -> CpuSet {
    CpuSet::parse(&shim.fake().resources(id).cpuset_cpus).unwrap()
}

#[tokio::test]
async fn node_shared_pool_follows_exclusive_pods_in_and_out() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(FOUR, "single-numa-node", "pod");
    let all = setup.topology.cpu_set();
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;

    let burst = kubelet.start_pod(&burstable("burst")).await.unwrap();
    let app = burst.id("app").to_string();
    assert_eq!(received(&shim.fake().created("burst", "app")).cpus, all);

    let web_def = plr_pod("web", 4, 2);
    let web = kubelet.start_pod(&web_def).await.unwrap();
    let bubble = pod_cpus(&shim, &web_def);
    let want = all.difference(&bubble);
    shim.eventually("the burstable container leaves the bubble", |f| {
        f.resources(&app).cpuset_cpus == want.to_string()
    })
    .await;
    let updates = shim.fake().updates_for(&app);
    let last = updates.last().unwrap().linux.clone().unwrap();
    assert_eq!(
        (last.cpuset_cpus.as_str(), last.cpu_quota, last.cpu_shares),
        (want.to_string().as_str(), 0, 0),
        "numa-shim's own update carries only the cpuset"
    );
    for name in ["main", "helper"] {
        assert!(
            shim.fake().updates_for(web.id(name)).is_empty(),
            "placed container {name} was never moved"
        );
    }

    // StopPodSandbox alone gives the bubble back; the later removal changes nothing more.
    kubelet.stop_sandbox(&web.sandbox).await;
    shim.eventually("the bubble returns to the burstable container", |f| {
        f.resources(&app).cpuset_cpus == all.to_string()
    })
    .await;
    assert_eq!(shim.shared(), all);
    let pushed = shim.fake().updates_for(&app).len();
    kubelet.delete_pod(&web).await;
    assert_eq!(shim.shared(), all);
    let web2 = plr_pod("web2", 4, 2);
    kubelet.start_pod(&web2).await.unwrap();
    let bubble2 = pod_cpus(&shim, &web2);
    shim.eventually("and leaves again for the next pod", |f| {
        f.resources(&app).cpuset_cpus == all.difference(&bubble2).to_string()
    })
    .await;
    assert_eq!(shim.fake().updates_for(&app).len(), pushed + 1);
}

#[tokio::test]
async fn kubelet_cpuset_updates_are_rewritten_to_numa_shims_cpuset() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(EIGHT, "single-numa-node", "pod");
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let web_def = plr_pod("web", 4, 2);
    let web = kubelet.start_pod(&web_def).await.unwrap();
    let burst = kubelet.start_pod(&burstable("burst")).await.unwrap();

    let cases = [
        (
            web.id("main"),
            received(&shim.fake().created("web", "main")),
            (2000, 2 * GI),
        ),
        (
            web.id("helper"),
            received(&shim.fake().created("web", "helper")),
            // A container without resources of its own gets the pod's limits (rule C2).
            (4000, 4 * GI),
        ),
    ];
    for (id, placed, (milli, memory)) in cases {
        // The kubelet's update with the container's own resources (no resize) and a foreign
        // cpuset; resizes are in tests/e2e/resize.rs.
        let shares = (milli * 1024 / 1000) as i64;
        let request = cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(cri::LinuxContainerResources {
                cpu_period: 100_000,
                cpu_quota: quota(milli),
                cpu_shares: shares,
                memory_limit_in_bytes: memory as i64,
                cpuset_cpus: "0-255".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        kubelet.update(request).await.unwrap();
        let seen = shim.fake().updates_for(id).pop().unwrap().linux.unwrap();
        assert_eq!(seen.cpuset_cpus, placed.cpus.to_string(), "{id}");
        assert_eq!(seen.cpuset_mems, placed.mems, "{id}");
        assert_eq!(
            seen.cpu_quota, placed.quota,
            "{id}: quota -1 only for the slice"
        );
        assert_eq!(seen.cpu_shares, shares, "{id}: the rest passes");
    }

    // A node-shared-pool container is kept on the current pool.
    let app = burst.id("app");
    let request = cri::UpdateContainerResourcesRequest {
        container_id: app.to_string(),
        linux: Some(cri::LinuxContainerResources {
            cpuset_cpus: "0-3".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    kubelet.update(request).await.unwrap();
    let seen = shim.fake().updates_for(app).pop().unwrap().linux.unwrap();
    assert_eq!(seen.cpuset_cpus, shim.shared().to_string());
    assert_eq!(current_cpus(&shim, app), shim.shared());
}

/// Every CPU any running container of `pods` was given, per pod.
fn holdings(shim: &Shim, pods: &[&PodDef]) -> Vec<CpuSet> {
    pods.iter().map(|p| pod_cpus(shim, p)).collect()
}

/// A kubelet update with a foreign cpuset for container `id`; returns the cpuset the runtime got.
async fn kubelet_moves(shim: &Shim, kubelet: &Kubelet, id: &str) -> String {
    let request = cri::UpdateContainerResourcesRequest {
        container_id: id.to_string(),
        linux: Some(cri::LinuxContainerResources {
            cpuset_cpus: "1-2".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    kubelet.update(request).await.unwrap();
    shim.fake()
        .updates_for(id)
        .pop()
        .unwrap()
        .linux
        .unwrap()
        .cpuset_cpus
}

#[tokio::test]
async fn restart_with_the_checkpoint_keeps_every_placement() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(FOUR, "single-numa-node", "pod");
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let a = plr_pod("a", 6, 2);
    let b = plr_pod("b", 4, 3);
    let mut running = Vec::new();
    for p in [&a, &b] {
        running.push(kubelet.start_pod(p).await.unwrap());
    }
    let burst = kubelet.start_pod(&burstable("burst")).await.unwrap();
    let before = holdings(&shim, &[&a, &b]);
    let shared = shim.shared();
    shim.eventually("burstable on the pool", |f| {
        f.resources(burst.id("app")).cpuset_cpus == shared.to_string()
    })
    .await;
    let updates = shim.fake().state().updates.len();

    let runtime = shim.stop().await;
    let shim = Shim::start_with(dir.path(), &setup, runtime).await;
    let recovery = shim.started.recovery.clone();
    assert!(recovery.from_checkpoint, "{recovery:?}");
    assert_eq!((recovery.dropped, recovery.adopted), (0, 0), "{recovery:?}");
    assert_eq!(shim.shared(), shared, "same holdings after restart");
    assert_eq!(
        shim.fake().state().updates.len(),
        updates,
        "nothing moved at start-up"
    );
    let kubelet = shim.kubelet().await;
    let main_a = received(&shim.fake().created("a", "main")).cpus;
    assert_eq!(
        kubelet_moves(&shim, &kubelet, running[0].id("main")).await,
        main_a.to_string()
    );

    // Nothing granted twice: a new pod avoids every old bubble.
    let c = plr_pod("c", 4, 2);
    kubelet.start_pod(&c).await.unwrap();
    let new = pod_cpus(&shim, &c);
    for old in &before {
        assert!(new.is_disjoint(old), "{new} overlaps {old}");
    }
    shim.eventually("pool update after the new pod", |f| {
        f.resources(burst.id("app")).cpuset_cpus == shared.difference(&new).to_string()
    })
    .await;
}

#[tokio::test]
async fn restart_without_the_checkpoint_rebuilds_from_runtime_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(TWO, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let a = plr_pod("a", 4, 2);
    let b = plr_pod("b", 4, 2);
    let running_a = kubelet.start_pod(&a).await.unwrap();
    kubelet.start_pod(&b).await.unwrap();
    let burst = kubelet.start_pod(&burstable("burst")).await.unwrap();
    let before = holdings(&shim, &[&a, &b]);
    let shared = shim.shared();
    // What numa-shim annotated is what the runtime keeps and lists.
    let main_cpus = received(&shim.fake().created("a", "main")).cpus.to_string();
    {
        let state = shim.fake().state();
        let main = &state.containers[running_a.id("main")].container;
        assert_eq!(main.annotations["numa-shim.io/cpus"], main_cpus);
        assert_eq!(main.annotations["numa-shim.io/exclusive"], "true");
        assert_eq!(main.annotations["numa-shim.io/isolation"], "container");
        let helper = &state.containers[running_a.id("helper")].container;
        assert_eq!(helper.annotations["numa-shim.io/isolation"], "pod");
        assert!(state.sandboxes[&running_a.sandbox]
            .annotations
            .contains_key("numa-shim.io/pod"));
    }

    let runtime = shim.stop().await;
    std::fs::remove_file(dir.path().join("state/numa-shim-state.json")).unwrap();
    let shim = Shim::start_with(dir.path(), &setup, runtime).await;
    let recovery = shim.started.recovery.clone();
    assert!(!recovery.from_checkpoint, "{recovery:?}");
    assert_eq!(recovery.adopted, 5, "{recovery:?}");
    assert!(recovery.problems.is_empty(), "{recovery:?}");
    assert_eq!(shim.shared(), shared, "adopted CPUs are held");
    let kubelet = shim.kubelet().await;
    for (pod, name) in [("a", "main"), ("a", "helper")] {
        let id = running_a.id(name);
        assert_eq!(
            kubelet_moves(&shim, &kubelet, id).await,
            received(&shim.fake().created(pod, name)).cpus.to_string()
        );
    }

    // Both nodes are taken: a third bubble does not fit until an adopted pod leaves.
    let c = plr_pod("c", 4, 2);
    let err = kubelet.start_pod(&c).await.unwrap_err();
    assert!(
        err.message().starts_with("TopologyAffinityError"),
        "{err:?}"
    );
    kubelet.delete_pod(&running_a).await;
    kubelet.start_pod(&c).await.unwrap();
    let new = pod_cpus(&shim, &c);
    assert!(
        new.is_disjoint(&before[1]),
        "{new} overlaps b's {}",
        before[1]
    );
    assert_eq!(one_numa(&topology, &new), one_numa(&topology, &before[0]));
    let _ = burst;
}

/// Pods started concurrently from several clients; returns each pod's outcome.
async fn start_all(
    kubelets: &[Kubelet],
    pods: &[PodDef],
) -> Vec<(PodDef, Result<RunningPod, tonic::Status>)> {
    let mut tasks = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let kubelet = kubelets[i % kubelets.len()].clone();
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let result = kubelet.start_pod(&p).await;
            (p, result)
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_pods_from_several_clients_never_share_a_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(EIGHT, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let mut kubelets = Vec::new();
    for _ in 0..4 {
        kubelets.push(shim.kubelet().await);
    }
    {
        let mut state = shim.fake().state();
        state.fail_sandboxes.insert("sb-fails-0".into());
        state.fail_sandboxes.insert("sb-fails-1".into());
    }
    // 24 pods of 2–5 CPUs and GiB: about 84 of 256 CPUs and 84 of 128 GiB.
    let mut pods: Vec<PodDef> = (0..24)
        .map(|i| plr_pod(&format!("p{i}"), 2 + (i % 4), 1 + (i % 2)))
        .collect();
    pods.extend((0..8).map(|i| burstable(&format!("burst{i}"))));
    pods.push(plr_pod("sb-fails-0", 8, 4));
    pods.push(plr_pod("sb-fails-1", 6, 2));
    let outcomes = start_all(&kubelets, &pods).await;

    let mut bubbles: Vec<(String, CpuSet)> = Vec::new();
    for (p, result) in &outcomes {
        if p.name.starts_with("sb-fails") {
            let err = result.as_ref().unwrap_err();
            assert_eq!(err.code(), Code::Internal, "{err:?}");
            continue;
        }
        result
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e:?}", p.name));
        if p.resources.is_some() {
            let cpus = pod_cpus(&shim, p);
            one_numa(&topology, &cpus);
            let main = received(&shim.fake().created(&p.name, "main"));
            assert_eq!(main.quota, -1);
            bubbles.push((p.name.clone(), cpus));
        }
    }
    let mut seen = CpuSet::new();
    for (name, cpus) in &bubbles {
        assert!(seen.is_disjoint(cpus), "{name}: {cpus} granted twice");
        seen = seen.union(cpus);
    }
    // The failed sandboxes' reservations went back: exactly the live bubbles are held.
    assert_eq!(shim.shared(), topology.cpu_set().difference(&seen));
    let uids: BTreeSet<String> = shim
        .started
        .placer
        .registry()
        .pods()
        .keys()
        .cloned()
        .collect();
    assert!(!uids.contains("uid-sb-fails-0") && !uids.contains("uid-sb-fails-1"));
    // No placed container was moved afterwards (pool updates only touch the node pool).
    for (p, result) in &outcomes {
        let (Some(_), Ok(running)) = (&p.resources, result) else {
            continue;
        };
        for (name, id) in &running.containers {
            let created = received(&shim.fake().created(&p.name, name)).cpus;
            assert_eq!(current_cpus(&shim, id), created, "{}/{name}", p.name);
        }
    }
    // Every burstable container ends on the final node pool.
    let shared = shim.shared().to_string();
    for i in 0..8 {
        let name = format!("burst{i}");
        let id = outcomes
            .iter()
            .find(|(p, _)| p.name == name)
            .map(|(_, r)| r.as_ref().unwrap().id("app").to_string())
            .unwrap();
        shim.eventually("burstable on the final pool", |f| {
            f.resources(&id).cpuset_cpus == shared
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_machine_admits_exactly_what_fits_under_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(TWO, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let mut kubelets = Vec::new();
    for _ in 0..3 {
        kubelets.push(shim.kubelet().await);
    }
    // Node 0 has 5 free CPUs (CPU 0 reserved), node 1 has 6: 2 + 3 pods of 2 CPUs fit.
    let pods: Vec<PodDef> = (0..10)
        .map(|i| {
            pod_def(&format!("p{i}"))
                .pod_level(Res::guaranteed(2000, GI))
                .container("main", Res::guaranteed(1000, GI / 2))
                .container("helper", Res::default())
        })
        .collect();
    let outcomes = start_all(&kubelets, &pods).await;
    let mut seen = CpuSet::new();
    let mut admitted = 0;
    for (p, result) in &outcomes {
        match result {
            Ok(_) => {
                let cpus = pod_cpus(&shim, p);
                one_numa(&topology, &cpus);
                assert!(seen.is_disjoint(&cpus), "{}: {cpus} granted twice", p.name);
                seen = seen.union(&cpus);
                admitted += 1;
            }
            Err(err) => assert!(
                err.message().starts_with("TopologyAffinityError"),
                "{}: {err:?}",
                p.name
            ),
        }
    }
    assert_eq!(admitted, 5);
    assert_eq!(shim.fake().state().sandbox_requests.len(), 5);
}

#[tokio::test]
async fn a_failed_create_container_is_retried_on_the_same_cpus_and_released_with_the_pod() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(FOUR, "single-numa-node", "pod");
    let all = setup.topology.cpu_set();
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let p = plr_pod("flaky", 4, 2);
    shim.fake().state().fail_containers.insert("main".into());
    let sandbox = kubelet.run_sandbox(&p).await.unwrap();
    let err = kubelet.create(&p, &sandbox, "main").await.unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    let first = received(&shim.fake().created("flaky", "main"));
    shim.fake().state().fail_containers.clear();
    let main = kubelet.create(&p, &sandbox, "main").await.unwrap();
    let helper = kubelet.create(&p, &sandbox, "helper").await.unwrap();
    let second = received(&shim.fake().created("flaky", "main"));
    assert_eq!(first, second, "the retry lands on the same slice");
    let bubble = pod_cpus(&shim, &p);
    assert_eq!(bubble.len(), 4);
    assert_eq!(shim.shared(), all.difference(&bubble));
    let running = RunningPod {
        sandbox,
        containers: [("main".to_string(), main), ("helper".to_string(), helper)].into(),
    };
    kubelet.delete_pod(&running).await;
    assert_eq!(shim.shared(), all);
    assert!(shim.started.placer.registry().pods().is_empty());
}

#[tokio::test]
async fn a_sandbox_without_containers_is_readmitted_from_its_annotation() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(FOUR, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let early = plr_pod("early", 4, 2);
    let sandbox = kubelet.run_sandbox(&early).await.unwrap();
    let shared = shim.shared();
    assert_eq!(
        shared.len(),
        topology.cpu_set().len() - 4,
        "bubble reserved"
    );

    let runtime = shim.stop().await;
    std::fs::remove_file(dir.path().join("state/numa-shim-state.json")).unwrap();
    let shim = Shim::start_with(dir.path(), &setup, runtime).await;
    let recovery = shim.started.recovery.clone();
    assert_eq!(
        (recovery.readmitted, recovery.adopted),
        (1, 0),
        "{recovery:?}"
    );
    assert_eq!(shim.shared(), shared, "the same bubble, nothing moved");
    let kubelet = shim.kubelet().await;
    for c in early.all() {
        kubelet.create(&early, &sandbox, &c.name).await.unwrap();
    }
    let bubble = pod_cpus(&shim, &early);
    assert_eq!(bubble, topology.cpu_set().difference(&shared));
    assert_eq!(received(&shim.fake().created("early", "main")).quota, -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_pods_with_the_pods_api_never_share_a_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pods-api.sock");
    let api = support::harness::PodsApi::default();
    let server = api.serve(&socket);
    let setup = Setup::new(EIGHT, "single-numa-node", "pod").pods_api(&socket);
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let mut kubelets = Vec::new();
    for _ in 0..3 {
        kubelets.push(shim.kubelet().await);
    }
    let pods: Vec<PodDef> = (0..18)
        .map(|i| {
            pod_def(&format!("m{i}"))
                .pod_level(Res::guaranteed(5000, 5 * GI))
                .sidecar("proxy", Res::guaranteed(1000, GI))
                .container("main", Res::guaranteed(2000 + 1000 * (i % 2), 2 * GI))
                .container("log", Res::default())
        })
        .collect();
    for p in &pods {
        api.add_bytes(p.pods_api_bytes());
    }
    let outcomes = start_all(&kubelets, &pods).await;
    let mut seen = CpuSet::new();
    for (p, result) in &outcomes {
        result
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e:?}", p.name));
        let proxy = received(&shim.fake().created(&p.name, "proxy"));
        let main = received(&shim.fake().created(&p.name, "main"));
        let log = received(&shim.fake().created(&p.name, "log"));
        let bubble = pod_cpus(&shim, p);
        assert_eq!(bubble.len(), 5, "{}", p.name);
        assert_eq!(
            proxy.cpus.len() + main.cpus.len() + log.cpus.len(),
            5,
            "{}: slices and pool disjoint",
            p.name
        );
        let node = one_numa(&topology, &bubble);
        for r in [&proxy, &main, &log] {
            assert_eq!(r.mems, node.to_string(), "{}", p.name);
        }
        assert!(
            seen.is_disjoint(&bubble),
            "{}: {bubble} granted twice",
            p.name
        );
        seen = seen.union(&bubble);
    }
    assert_eq!(shim.shared(), topology.cpu_set().difference(&seen));
    server.abort();
}

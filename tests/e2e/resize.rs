//! In-place resize end to end (docs/resize.md): kubelet-shaped UpdateContainerResources and
//! UpdatePodSandboxResources through the relay and `LifecycleHook` to the stateful fake runtime.
//! Grow keeps the promised CPUs and adds CPUs on the container's NUMA node, shrink gives back
//! only what was added, an infeasible resize is refused with what was asked and what is free,
//! a runtime error undoes the resize, and a thousand resizes leak nothing.

use numa_shim::testing::e2e as support;

use numa_shim::cpuset::CpuSet;
use numa_shim::lifecycle::RegistrySnapshot;
use support::harness::{Kubelet, PodsApi, RunningPod, Setup, Shim};
use support::kubelet::{pod_def, PodDef, Res, GI};
use support::{numa_of, one_numa, received};
use tonic::Code;

const FOUR: &str = "topoDualSocketMultiNumaPerSocketHT";

fn app(cpus: u64) -> PodDef {
    pod_def("app").container("main", Res::guaranteed(cpus * 1000, GI))
}

fn cpus(n: u64) -> Res {
    Res::guaranteed(n * 1000, GI)
}

/// numa-shim with the pod specs from the Pods API (as with a real kubelet), and `pods`
/// started; the fake Pods API is returned to keep it serving.
async fn start(
    dir: &std::path::Path,
    scope: &str,
    pods: &[&PodDef],
) -> (Shim, PodsApi, Kubelet, Vec<RunningPod>) {
    let socket = dir.join("pods-api.sock");
    let api = PodsApi::default();
    api.serve(&socket);
    let setup = Setup::new(FOUR, "single-numa-node", scope).pods_api(&socket);
    let shim = Shim::start(dir, &setup).await;
    let kubelet = shim.kubelet().await;
    let mut running = Vec::new();
    for p in pods {
        api.add_bytes(p.pods_api_bytes());
        running.push(kubelet.start_pod(p).await.unwrap());
    }
    (shim, api, kubelet, running)
}

fn runtime_cpus(shim: &Shim, id: &str) -> CpuSet {
    CpuSet::parse(&shim.fake().resources(id).cpuset_cpus).unwrap()
}

fn snapshot(shim: &Shim) -> RegistrySnapshot {
    shim.started.placer.registry().snapshot()
}

fn resizes(shim: &Shim, outcome: &str) -> u64 {
    shim.started.placer.metrics().resizes(outcome)
}

#[tokio::test]
async fn grow_keeps_every_cpu_and_adds_on_the_containers_numa_node() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let running = &running[0];
    let topology = shim.started.placer.registry().node().topology().clone();
    let id = running.id("main").to_string();
    let before = received(&shim.fake().created("app", "main")).cpus;
    assert_eq!(before.len(), 2);
    let node = one_numa(&topology, &before);

    kubelet.resize(&id, &cpus(4)).await.unwrap();
    let seen = shim.fake().updates_for(&id).pop().unwrap().linux.unwrap();
    let after = CpuSet::parse(&seen.cpuset_cpus).unwrap();
    assert_eq!(after.len(), 4, "{after}");
    assert!(
        before.is_subset(&after),
        "promised {before} not kept in {after}"
    );
    assert_eq!(numa_of(&topology, &after), [node].into(), "{after}");
    assert_eq!(seen.cpu_quota, -1, "exclusive CPUs: quota lifted");
    assert_eq!(runtime_cpus(&shim, &id), after);
    assert!(shim.shared().intersection(&after).is_empty());
    assert_eq!(resizes(&shim, "applied"), 1);

    // The same values again (the kubelet's retry, or its memory pass): nothing moves.
    kubelet.resize(&id, &cpus(4)).await.unwrap();
    assert_eq!(runtime_cpus(&shim, &id), after);
    assert_eq!(resizes(&shim, "applied"), 1);
}

#[tokio::test]
async fn shrink_gives_back_what_was_added_never_the_promised_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let running = &running[0];
    let id = running.id("main").to_string();
    let promised = received(&shim.fake().created("app", "main")).cpus;
    let shared = shim.shared();

    kubelet.resize(&id, &cpus(6)).await.unwrap();
    assert_eq!(runtime_cpus(&shim, &id).len(), 6);
    kubelet.resize(&id, &cpus(3)).await.unwrap();
    let three = runtime_cpus(&shim, &id);
    assert_eq!(three.len(), 3);
    assert!(promised.is_subset(&three), "{promised} ⊄ {three}");
    kubelet.resize(&id, &cpus(2)).await.unwrap();
    assert_eq!(runtime_cpus(&shim, &id), promised);
    assert_eq!(
        shim.shared(),
        shared,
        "the added CPUs are back in the shared pool"
    );

    let before = snapshot(&shim);
    let err = kubelet.resize(&id, &cpus(1)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message()
            .contains("it keeps the 2 CPUs it was admitted with"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("cpu 2 → 1"), "{}", err.message());
    assert_eq!(snapshot(&shim), before, "a refused resize changes nothing");
    assert_eq!(runtime_cpus(&shim, &id), promised);
}

#[tokio::test]
async fn an_infeasible_grow_is_refused_with_what_is_free_where() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let running = &running[0];
    let id = running.id("main").to_string();
    let placed = runtime_cpus(&shim, &id);
    let updates = shim.fake().updates_for(&id).len();
    let before = snapshot(&shim);

    // More than one NUMA node has (20 CPUs each): single-numa-node keeps the container on
    // its node.
    let err = kubelet.resize(&id, &cpus(22)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    let m = err.message();
    for words in [
        "numa-shim cannot resize container \"main\" of pod e2e/app (cpu 2 → 22)",
        "not enough cpus available to satisfy request: requested=20",
        "NUMA node(s) ",
        "free cpus",
        &format!("it keeps cpus {placed}"),
    ] {
        assert!(m.contains(words), "{words:?} not in {m}");
    }
    assert_eq!(
        shim.fake().updates_for(&id).len(),
        updates,
        "nothing reached the runtime"
    );
    assert_eq!(snapshot(&shim), before);
    assert_eq!(resizes(&shim, "refused"), 1);
}

#[tokio::test]
async fn a_runtime_error_undoes_the_resize() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let running = &running[0];
    let id = running.id("main").to_string();
    let placed = runtime_cpus(&shim, &id);
    let shared = shim.shared();
    let before = snapshot(&shim);

    shim.fake().state().fail_updates.insert(id.clone());
    let err = kubelet.resize(&id, &cpus(4)).await.unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert_eq!(
        snapshot(&shim),
        before,
        "checkpointed state is back exactly"
    );
    assert_eq!(shim.shared(), shared);
    assert_eq!(resizes(&shim, "rolled_back"), 1);
    shim.started.placer.flush().await.unwrap();

    // The kubelet retries at its next pod sync; now the runtime takes it.
    shim.fake().state().fail_updates.clear();
    kubelet.resize(&id, &cpus(4)).await.unwrap();
    let grown = runtime_cpus(&shim, &id);
    assert!(placed.is_subset(&grown) && grown.len() == 4, "{grown}");
    assert_eq!(resizes(&shim, "applied"), 1);
}

#[tokio::test]
async fn a_thousand_resizes_leak_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let other_def = pod_def("other").container("c", Res::guaranteed(2000, GI));
    let (shim, _api, kubelet, running) =
        start(dir.path(), "container", &[&app(2), &other_def]).await;
    let id = running[0].id("main").to_string();
    let neighbour = &running[1];
    let other = runtime_cpus(&shim, neighbour.id("c"));

    // One cycle first: the promised set is recorded at the first resize.
    kubelet.resize(&id, &cpus(4)).await.unwrap();
    kubelet.resize(&id, &cpus(2)).await.unwrap();
    shim.started.placer.flush().await.unwrap();
    let settled = snapshot(&shim);
    let shared = shim.shared();
    let held = runtime_cpus(&shim, &id);
    let state = std::fs::read_dir(dir.path().join("state"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum::<u64>();

    for i in 0..500 {
        kubelet.resize(&id, &cpus(2 + (i % 3) * 2)).await.unwrap();
        kubelet.resize(&id, &cpus(2)).await.unwrap();
    }
    shim.started.placer.flush().await.unwrap();
    assert_eq!(
        snapshot(&shim),
        settled,
        "registry and decision core as before"
    );
    assert_eq!(shim.shared(), shared);
    assert_eq!(runtime_cpus(&shim, &id), held);
    assert_eq!(runtime_cpus(&shim, neighbour.id("c")), other);
    let after = std::fs::read_dir(dir.path().join("state"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum::<u64>();
    assert_eq!(after, state, "checkpoint back to its size");
    // 2 first, then 2 for each of the 333 rounds that grow (the other 167 ask for the 2 CPUs
    // held: nothing to apply).
    assert_eq!(resizes(&shim, "applied"), 2 + 2 * 333);
    assert_eq!(resizes(&shim, "refused") + resizes(&shim, "rolled_back"), 0);
}

#[tokio::test]
async fn a_pod_budget_grows_and_shrinks_its_pool_keeping_the_slice() {
    let dir = tempfile::tempdir().unwrap();
    let def = pod_def("web")
        .pod_level(Res::guaranteed(4000, 4 * GI))
        .container("main", Res::guaranteed(2000, 2 * GI))
        .container("helper", Res::default());
    let (shim, _api, kubelet, running) = start(dir.path(), "pod", &[&def]).await;
    let running = &running[0];
    let topology = shim.started.placer.registry().node().topology().clone();
    let (main, helper) = (
        running.id("main").to_string(),
        running.id("helper").to_string(),
    );
    let slice = runtime_cpus(&shim, &main);
    let pool = runtime_cpus(&shim, &helper);
    assert_eq!((slice.len(), pool.len()), (2, 2));
    let node = one_numa(&topology, &slice.union(&pool));

    kubelet
        .resize_sandbox(&running.sandbox, &Res::guaranteed(6000, 4 * GI))
        .await
        .unwrap();
    shim.eventually("the pod pool grows to 4 CPUs", |f| {
        CpuSet::parse(&f.resources(&helper).cpuset_cpus).is_ok_and(|c| c.len() == 4)
    })
    .await;
    let grown = runtime_cpus(&shim, &helper);
    assert!(pool.is_subset(&grown), "{pool} ⊄ {grown}");
    assert_eq!(numa_of(&topology, &grown), [node].into());
    assert_eq!(runtime_cpus(&shim, &main), slice, "the slice stays");

    kubelet
        .resize_sandbox(&running.sandbox, &Res::guaranteed(4000, 4 * GI))
        .await
        .unwrap();
    shim.eventually("the pod pool is back", |f| {
        f.resources(&helper).cpuset_cpus == pool.to_string()
    })
    .await;
    let err = kubelet
        .resize_sandbox(&running.sandbox, &Res::guaranteed(2000, 4 * GI))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("the pod-level budget"),
        "{}",
        err.message()
    );
}

/// A pod-level budget admitted fractional runs on the node shared pool; grown to whole CPUs (in
/// the kubelet's passes) it gets a bubble on one NUMA node: the exclusive container a slice,
/// the helper the pod pool, both pushed to the runtime; shrunk back, both return to the node
/// shared pool, which is whole again.
#[tokio::test]
async fn a_fractional_budget_grown_whole_gets_a_bubble_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let def = pod_def("web")
        .pod_level(Res::guaranteed(1500, 4 * GI))
        .container("main", Res::guaranteed(1000, GI))
        .container("helper", Res::default());
    let (shim, _api, kubelet, running) = start(dir.path(), "pod", &[&def]).await;
    let running = &running[0];
    let topology = shim.started.placer.registry().node().topology().clone();
    let (main, helper) = (
        running.id("main").to_string(),
        running.id("helper").to_string(),
    );
    let shared = shim.shared();
    assert_eq!(
        runtime_cpus(&shim, &main),
        shared,
        "fractional: node shared pool"
    );
    assert_eq!(runtime_cpus(&shim, &helper), shared);

    let (small, whole) = (Res::guaranteed(1500, 4 * GI), Res::guaranteed(3000, 4 * GI));
    kubelet
        .resize_sandbox_in_passes(&running.sandbox, &small, &whole)
        .await
        .unwrap();
    shim.eventually("the helper on a pod pool of 2 CPUs", |f| {
        CpuSet::parse(&f.resources(&helper).cpuset_cpus).is_ok_and(|c| c.len() == 2)
    })
    .await;
    shim.eventually("main on a slice of 1 CPU", |f| {
        CpuSet::parse(&f.resources(&main).cpuset_cpus).is_ok_and(|c| c.len() == 1)
    })
    .await;
    let (slice, pool) = (runtime_cpus(&shim, &main), runtime_cpus(&shim, &helper));
    let bubble = slice.union(&pool);
    assert_eq!(bubble.len(), 3, "slice {slice}, pool {pool}");
    one_numa(&topology, &bubble);
    assert_eq!(shim.shared(), shared.difference(&bubble));
    assert_eq!(resizes(&shim, "applied"), 1);

    kubelet
        .resize_sandbox_in_passes(&running.sandbox, &whole, &small)
        .await
        .unwrap();
    shim.eventually("both back on the node shared pool", |f| {
        f.resources(&main).cpuset_cpus == shared.to_string()
            && f.resources(&helper).cpuset_cpus == shared.to_string()
    })
    .await;
    assert_eq!(shim.shared(), shared);
    assert_eq!(resizes(&shim, "refused"), 0);
}

/// The CPU ids PodResources `List` (what numa-shim serves, from the same registry) gives the
/// container `name` of pod `pod`.
fn listed_cpus(shim: &Shim, pod: &str, name: &str) -> CpuSet {
    use numa_shim::podresources::{list_response, RegistrySource, Snapshot};
    let list = list_response(&shim.started.placer.with_registry(Snapshot::capture));
    let pod = list
        .pod_resources
        .iter()
        .find(|p| p.name == pod)
        .unwrap_or_else(|| panic!("pod {pod} not listed: {list:?}"));
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("container {name} not listed: {pod:?}"));
    container.cpu_ids.iter().map(|&c| c as u32).collect()
}

#[tokio::test]
async fn pod_resources_follow_a_grow_and_a_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let id = running[0].id("main").to_string();
    let before = runtime_cpus(&shim, &id);
    assert_eq!(listed_cpus(&shim, "app", "main"), before);

    kubelet.resize(&id, &cpus(4)).await.unwrap();
    let grown = runtime_cpus(&shim, &id);
    assert_eq!(grown.len(), 4, "{grown}");
    assert_eq!(listed_cpus(&shim, "app", "main"), grown);

    kubelet.resize(&id, &cpus(2)).await.unwrap();
    assert_eq!(runtime_cpus(&shim, &id), before);
    assert_eq!(listed_cpus(&shim, "app", "main"), before);
}

/// The kubelet v1.37 actuates a pod-level CPU resize in passes (docs/resize.md §1.2): the pod
/// cgroup's limit, then its request, each announced with its own UpdatePodSandboxResources
/// (request first on shrink), then UpdateContainerResources for the containers that inherit the
/// budget's limits. A Guaranteed budget is never half-resized into a QoS change.
#[tokio::test]
async fn a_pod_budget_resized_in_the_kubelets_passes_grows_and_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let def = pod_def("web")
        .pod_level(Res::guaranteed(4000, 4 * GI))
        .container("main", Res::guaranteed(2000, 2 * GI))
        .container("helper", Res::default());
    let (shim, _api, kubelet, running) = start(dir.path(), "pod", &[&def]).await;
    let running = &running[0];
    let (main, helper) = (
        running.id("main").to_string(),
        running.id("helper").to_string(),
    );
    let slice = runtime_cpus(&shim, &main);
    let pool = runtime_cpus(&shim, &helper);
    // What the kubelet sends a container without limits of its own: the budget's limits.
    let inherits = |cpu: u64| Res {
        cpu_lim: Some(cpu),
        mem_lim: Some(4 * GI),
        ..Res::default()
    };

    let (four, six) = (Res::guaranteed(4000, 4 * GI), Res::guaranteed(6000, 4 * GI));
    // containerd 2.4 does not implement UpdatePodSandboxResources; the kubelet takes the
    // UNIMPLEMENTED as a best-effort notice and resizes the pod cgroup itself.
    shim.fake().state().sandbox_updates_unimplemented = true;
    let mut limit_pass = four;
    limit_pass.cpu_lim = six.cpu_lim;
    for pass in [limit_pass, six] {
        let err = kubelet
            .resize_sandbox(&running.sandbox, &pass)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    }
    kubelet.resize(&helper, &inherits(6000)).await.unwrap();
    shim.eventually("the pod pool grows to 4 CPUs", |f| {
        CpuSet::parse(&f.resources(&helper).cpuset_cpus).is_ok_and(|c| c.len() == 4)
    })
    .await;
    assert!(pool.is_subset(&runtime_cpus(&shim, &helper)));
    assert_eq!(runtime_cpus(&shim, &main), slice, "the slice stays");
    assert_eq!(resizes(&shim, "applied"), 1, "one resize, not one per pass");
    assert_eq!(resizes(&shim, "refused"), 0);

    // A runtime that implements it (CRI-O, the fake) for the shrink.
    shim.fake().state().sandbox_updates_unimplemented = false;
    kubelet.resize(&helper, &inherits(4000)).await.unwrap();
    kubelet
        .resize_sandbox_in_passes(&running.sandbox, &six, &four)
        .await
        .unwrap();
    shim.eventually("the pod pool is back", |f| {
        f.resources(&helper).cpuset_cpus == pool.to_string()
    })
    .await;
    assert_eq!(runtime_cpus(&shim, &main), slice);
    assert_eq!(resizes(&shim, "applied"), 2);
    assert_eq!(resizes(&shim, "refused"), 0);
}

/// The same passes on a cgroup v2 node: the kubelet merges each new value over the pod cgroup
/// as it reads it back, and cgroup v2 returns the budget's shares through `cpu.weight` rounded
/// down (2048 as 2046), so the limit pass of a grow says request 1999m, limit 3. Seen in the 2s
/// guest with the real kubelet v1.37.2 (integration/numa-vm/resize-guest.sh): every pod-level
/// grow was refused as a QoS change Guaranteed → Burstable until the read-back shares counted
/// as unchanged. Grow, memory grow (whose own pass carries the read-back shares too) and
/// shrink all apply, and the budget stays Guaranteed.
#[tokio::test]
async fn a_pod_budget_resized_on_cgroup_v2_reads_back_rounded_shares() {
    let dir = tempfile::tempdir().unwrap();
    let def = pod_def("web")
        .pod_level(Res::guaranteed(2000, GI))
        .container("main", Res::guaranteed(1000, GI / 2))
        .container("helper", Res::default());
    let (shim, _api, kubelet, running) = start(dir.path(), "pod", &[&def]).await;
    let running = &running[0];
    let (main, helper) = (
        running.id("main").to_string(),
        running.id("helper").to_string(),
    );
    let slice = runtime_cpus(&shim, &main);
    let pool = runtime_cpus(&shim, &helper);
    let budget = |shim: &Shim| {
        shim.started
            .placer
            .registry()
            .pod_of_sandbox(&running.sandbox)
            .and_then(|p| p.spec.resources.clone())
            .unwrap()
    };
    shim.fake().state().sandbox_updates_unimplemented = true;
    let steps = [
        (Res::guaranteed(2000, GI), Res::guaranteed(3000, GI)),
        (
            Res::guaranteed(3000, GI),
            Res::guaranteed(3000, GI + GI / 2),
        ),
        (
            Res::guaranteed(3000, GI + GI / 2),
            Res::guaranteed(2000, GI + GI / 2),
        ),
    ];
    for (n, (from, to)) in steps.iter().enumerate() {
        let err = kubelet
            .resize_sandbox_in_passes_cgroup_v2(&running.sandbox, from, to)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "step {n}: {err:?}");
        let now = budget(&shim);
        assert_eq!(
            (now.requests.cpu_milli, now.limits.cpu_milli),
            (to.cpu_req, to.cpu_lim),
            "step {n}: the budget is Guaranteed at the new CPU"
        );
        assert_eq!(now.limits.memory, to.mem_lim, "step {n}");
        assert_eq!(resizes(&shim, "refused"), 0, "step {n}");
        assert_eq!(resizes(&shim, "applied"), n as u64 + 1, "step {n}");
    }
    let inherits = Res {
        cpu_lim: Some(2000),
        mem_lim: Some(GI + GI / 2),
        ..Res::default()
    };
    kubelet.resize(&helper, &inherits).await.unwrap();
    shim.eventually("the pod pool is back", |f| {
        f.resources(&helper).cpuset_cpus == pool.to_string()
    })
    .await;
    assert_eq!(runtime_cpus(&shim, &main), slice, "the slice stays");
}

/// The held CPUs of container `id` as numa-shim's registry has them.
fn held(shim: &Shim, id: &str) -> CpuSet {
    shim.started
        .placer
        .registry()
        .applied(id)
        .map(|r| r.cpus.clone())
        .unwrap_or_default()
}

/// Nothing half-applied: every CPU the runtime runs container `id` on is one numa-shim holds
/// for it (never a shared-pool CPU or another's).
fn runs_on_its_own(shim: &Shim, id: &str) {
    let (runs, holds) = (runtime_cpus(shim, id), held(shim, id));
    assert!(runs.is_subset(&holds), "runs on {runs}, holds {holds}");
    assert!(
        shim.shared().intersection(&holds).is_empty(),
        "{holds} also in the shared pool {}",
        shim.shared()
    );
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A runtime that applies the update but answers after the kubelet's deadline: the grow is
/// kept (the runtime may well run the container on the new CPUs), a shrink is undone (the
/// container keeps holding what it may still run on); the kubelet's retry then completes each,
/// and CPUs, pools and the checkpoint end where a plain grow and shrink leave them.
#[tokio::test]
async fn a_resize_cut_off_by_the_callers_deadline_leaves_nothing_half_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let id = running[0].id("main").to_string();
    let placed = runtime_cpus(&shim, &id);
    let shared = shim.shared();
    let slow = std::time::Duration::from_millis(1500);
    let deadline = std::time::Duration::from_millis(200);

    shim.fake().state().slow_updates.insert(id.clone(), slow);
    let err = kubelet
        .resize_within(&id, &cpus(4), deadline)
        .await
        .unwrap_err();
    // The client's own timer may fire first: the kubelet sees CANCELLED, numa-shim a hang-up.
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    until("the cut-off grow is settled", || {
        resizes(&shim, "unanswered_kept") == 1
    })
    .await;
    assert_eq!(runtime_cpus(&shim, &id).len(), 4, "the runtime applied it");
    assert_eq!(held(&shim, &id), runtime_cpus(&shim, &id));
    runs_on_its_own(&shim, &id);
    // The kubelet retries at its next pod sync: numa-shim finds it applied.
    shim.fake().state().slow_updates.clear();
    kubelet.resize(&id, &cpus(4)).await.unwrap();
    let grown = runtime_cpus(&shim, &id);
    assert!(placed.is_subset(&grown) && grown.len() == 4, "{grown}");
    assert_eq!(held(&shim, &id), grown);

    shim.fake().state().slow_updates.insert(id.clone(), slow);
    let err = kubelet
        .resize_within(&id, &cpus(2), deadline)
        .await
        .unwrap_err();
    // The client's own timer may fire first: the kubelet sees CANCELLED, numa-shim a hang-up.
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    until("the cut-off shrink is undone", || {
        resizes(&shim, "rolled_back") == 1
    })
    .await;
    assert_eq!(held(&shim, &id), grown, "it holds what it may still run on");
    runs_on_its_own(&shim, &id);
    shim.fake().state().slow_updates.clear();
    kubelet.resize(&id, &cpus(2)).await.unwrap();
    assert_eq!(runtime_cpus(&shim, &id), placed);
    assert_eq!(held(&shim, &id), placed);
    assert_eq!(shim.shared(), shared, "every CPU back");
    assert_eq!(resizes(&shim, "applied"), 1, "the shrink's retry");
}

/// numa-shim killed while the runtime works on a resize (after the decision was written,
/// before the runtime answered) and started again on its checkpoint: the container holds what
/// it runs on, the kubelet's retry finds the resize applied, and a shrink back leaves every CPU
/// and the checkpoint where they were.
#[tokio::test]
async fn a_resize_across_a_numa_shim_kill_leaves_nothing_half_applied() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pods-api.sock");
    let api = PodsApi::default();
    api.serve(&socket);
    let setup = Setup::new(FOUR, "single-numa-node", "container").pods_api(&socket);
    let mut shim = Shim::start(dir.path(), &setup).await;
    api.add_bytes(app(2).pods_api_bytes());
    let running = shim.kubelet().await.start_pod(&app(2)).await.unwrap();
    let id = running.id("main").to_string();
    let placed = runtime_cpus(&shim, &id);
    let shared = shim.shared();
    // One cycle first: the promised CPUs are recorded at the first resize.
    let kubelet = shim.kubelet().await;
    kubelet.resize(&id, &cpus(4)).await.unwrap();
    kubelet.resize(&id, &cpus(2)).await.unwrap();
    shim.started.placer.flush().await.unwrap();
    let checkpoint = std::fs::read(dir.path().join("state/numa-shim-state.json")).unwrap();

    for (to, n) in [(4, 4), (2, 2)] {
        let updates = shim.fake().updates_for(&id).len();
        shim.fake()
            .state()
            .slow_updates
            .insert(id.clone(), std::time::Duration::from_secs(3));
        let kubelet = shim.kubelet().await;
        let target = id.clone();
        let call = tokio::spawn(async move { kubelet.resize(&target, &cpus(to)).await });
        until("the runtime received the resize", || {
            shim.fake().updates_for(&id).len() > updates
        })
        .await;
        let runtime = shim.kill();
        let _ = call.await;
        runtime.fake.state().slow_updates.clear();
        shim = Shim::start_with(dir.path(), &setup, runtime).await;
        assert!(
            shim.started.recovery.from_checkpoint,
            "{:?}",
            shim.started.recovery
        );
        assert_eq!(runtime_cpus(&shim, &id).len(), n);
        assert_eq!(held(&shim, &id), runtime_cpus(&shim, &id));
        runs_on_its_own(&shim, &id);
        // The kubelet got no answer and retries: nothing left to do.
        shim.kubelet().await.resize(&id, &cpus(to)).await.unwrap();
        assert_eq!(held(&shim, &id), runtime_cpus(&shim, &id));
        assert_eq!(resizes(&shim, "applied"), 0, "found applied");
    }
    assert_eq!(runtime_cpus(&shim, &id), placed);
    assert_eq!(shim.shared(), shared);
    shim.started.placer.flush().await.unwrap();
    let now = std::fs::read(dir.path().join("state/numa-shim-state.json")).unwrap();
    assert_eq!(now.len(), checkpoint.len(), "checkpoint back to its size");
}

/// Memory under the Static Memory Manager (docs/resize.md §2): the kubelet's memory pass (new
/// memory limit, current CPU values) of a classic Guaranteed container grows its blocks on the
/// NUMA node it has while that node holds them (16Gi per node here), and is refused with
/// RESOURCE_EXHAUSTED, nothing changed, once it does not; a pod-level budget's memory the same
/// way, on the pod's node.
#[tokio::test]
async fn static_memory_grows_only_while_the_pods_numa_node_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let (shim, _api, kubelet, running) = start(dir.path(), "container", &[&app(2)]).await;
    let id = running[0].id("main").to_string();
    let mems = shim.fake().resources(&id).cpuset_mems.clone();
    let cpus_before = runtime_cpus(&shim, &id);

    kubelet
        .resize(&id, &Res::guaranteed(2000, 8 * GI))
        .await
        .unwrap();
    assert_eq!(resizes(&shim, "applied"), 1);
    let seen = shim.fake().updates_for(&id).pop().unwrap().linux.unwrap();
    assert_eq!(seen.cpuset_mems, mems, "the memory stays on its node");
    assert_eq!(runtime_cpus(&shim, &id), cpus_before, "the CPUs stay");

    let before = snapshot(&shim);
    let err = kubelet
        .resize(&id, &Res::guaranteed(2000, 17 * GI))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("memory 8Gi → 17Gi"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("memory: "), "{}", err.message());
    assert_eq!(snapshot(&shim), before, "nothing changed");

    // A pod-level budget's memory: re-allocated on the pod's node while it holds it.
    let dir = tempfile::tempdir().unwrap();
    let def = pod_def("web")
        .pod_level(Res::guaranteed(4000, 4 * GI))
        .container("main", Res::guaranteed(2000, 2 * GI))
        .container("helper", Res::default());
    let (shim, _api, kubelet, running) = start(dir.path(), "pod", &[&def]).await;
    let helper = running[0].id("helper").to_string();
    let mems = shim.fake().resources(&helper).cpuset_mems.clone();
    kubelet
        .resize_sandbox(&running[0].sandbox, &Res::guaranteed(4000, 6 * GI))
        .await
        .unwrap();
    assert_eq!(resizes(&shim, "applied"), 1);
    let registry = shim.started.placer.registry();
    let uid = registry.node().pods().pop().unwrap();
    let placed = registry.node().placement(&uid).unwrap();
    drop(registry);
    let budget: u64 = placed
        .memory
        .iter()
        .filter(|b| b.resource == "memory")
        .map(|b| b.size)
        .sum();
    assert_eq!(budget, 6 * GI, "{placed:?}");
    assert_eq!(shim.fake().resources(&helper).cpuset_mems, mems);
    let before = snapshot(&shim);
    let err = kubelet
        .resize_sandbox(&running[0].sandbox, &Res::guaranteed(4000, 17 * GI))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("do not fit on its NUMA node(s)"),
        "{}",
        err.message()
    );
    assert_eq!(snapshot(&shim), before, "nothing changed");
    assert_eq!(resizes(&shim, "refused"), 1);
}

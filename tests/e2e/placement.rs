//! Multi-NUMA end to end: kubelet-shaped CRI calls through the real relay and `LifecycleHook`
//! (started by `lifecycle::start`) to a stateful fake runtime, on kubelet fixture machines with
//! 2, 4 and 8 NUMA nodes; every check is on what the runtime received.

use numa_shim::testing::e2e as support;

use std::path::Path;

use numa_shim::lifecycle::annotations::POD_ANNOTATION;
use support::harness::{PodsApi, Setup, Shim};
use support::kubelet::{pod_def, quota, PodDef, Res, GI};
use support::{cpus_per_numa, numa_of, one_numa, received};
use tonic::Code;

const TWO: &str = "topoDualSocketHT";
const FOUR: &str = "topoDualSocketMultiNumaPerSocketHT";
const EIGHT: &str = "topoDualSocketMultiNumaPerSocketHTLarge";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    CriOnly,
    PodsApi,
}

/// numa-shim in `mode`; with the Pods API, the fake kubelet server is returned too.
async fn start(dir: &Path, setup: Setup, mode: Mode) -> (Shim, Option<PodsApi>) {
    match mode {
        Mode::CriOnly => (Shim::start(dir, &setup).await, None),
        Mode::PodsApi => {
            let socket = dir.join("pods-api.sock");
            let api = PodsApi::default();
            api.serve(&socket);
            let setup = setup.pods_api(&socket);
            (Shim::start(dir, &setup).await, Some(api))
        }
    }
}

async fn announce(api: &Option<PodsApi>, pod: &PodDef) {
    if let Some(api) = api {
        api.add_bytes(pod.pods_api_bytes());
    }
}

/// A PLR pod: `budget` CPUs (and GiB), `main` with `exclusive` whole CPUs, `helper` without
/// resources (pod shared pool).
fn plr_pod(name: &str, budget: u64, exclusive: u64) -> PodDef {
    pod_def(name)
        .pod_level(Res::guaranteed(budget * 1000, budget * GI))
        .container("main", Res::guaranteed(exclusive * 1000, exclusive * GI))
        .container("helper", Res::default())
}

async fn pod_scope_bubble(fixture: &str, mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(fixture, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let (shim, api) = start(dir.path(), setup, mode).await;
    let kubelet = shim.kubelet().await;

    let mut bubbles = Vec::new();
    for name in ["web-a", "web-b"] {
        let pod = plr_pod(name, 4, 2);
        announce(&api, &pod).await;
        kubelet.start_pod(&pod).await.unwrap();
        let main = received(&shim.fake().created(name, "main"));
        let helper = received(&shim.fake().created(name, "helper"));
        let ctx = format!("{fixture} {mode:?} {name}: main {main:?} helper {helper:?}");

        assert_eq!(main.cpus.len(), 2, "{ctx}");
        assert_eq!(helper.cpus.len(), 2, "{ctx}");
        assert!(main.cpus.is_disjoint(&helper.cpus), "{ctx}");
        let bubble = main.cpus.union(&helper.cpus);
        let node = one_numa(&topology, &bubble);
        assert!(!bubble.contains(0), "reserved cpu granted: {ctx}");
        // Exclusive slice: quota lifted; pod shared pool: the kubelet's quota (pod limit) kept.
        assert_eq!(main.quota, -1, "{ctx}");
        assert_eq!(helper.quota, quota(4000), "{ctx}");
        // Static memory manager: every container of the pod on the bubble's node.
        assert_eq!(main.mems, node.to_string(), "{ctx}");
        assert_eq!(helper.mems, node.to_string(), "{ctx}");
        assert!(shim.shared().is_disjoint(&bubble), "{ctx}");
        bubbles.push(bubble);
    }
    assert!(bubbles[0].is_disjoint(&bubbles[1]), "{bubbles:?}");

    // The sandbox went out with the admitted pod annotated and the kubelet's resources intact.
    let state = shim.fake().state();
    let sandbox = &state.sandbox_requests[0].config.as_ref().unwrap();
    assert!(sandbox.annotations.contains_key(POD_ANNOTATION));
    let resources = sandbox.linux.as_ref().unwrap().resources.as_ref().unwrap();
    assert_eq!(resources.cpu_quota, quota(4000));
    assert_eq!(resources.cpuset_cpus, "");
}

#[tokio::test]
async fn pod_scope_bubble_two_numa_cri_only() {
    pod_scope_bubble(TWO, Mode::CriOnly).await;
}

#[tokio::test]
async fn pod_scope_bubble_two_numa_pods_api() {
    pod_scope_bubble(TWO, Mode::PodsApi).await;
}

#[tokio::test]
async fn pod_scope_bubble_four_numa_cri_only() {
    pod_scope_bubble(FOUR, Mode::CriOnly).await;
}

#[tokio::test]
async fn pod_scope_bubble_four_numa_pods_api() {
    pod_scope_bubble(FOUR, Mode::PodsApi).await;
}

#[tokio::test]
async fn pod_scope_bubble_eight_numa_cri_only() {
    pod_scope_bubble(EIGHT, Mode::CriOnly).await;
}

#[tokio::test]
async fn pod_scope_bubble_eight_numa_pods_api() {
    pod_scope_bubble(EIGHT, Mode::PodsApi).await;
}

/// A pod larger than any NUMA node is refused under single-numa-node: the client gets the
/// kubelet's reason and message, the runtime gets nothing.
async fn too_big_for_one_node(fixture: &str, mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(fixture, "single-numa-node", "pod");
    let per_node = cpus_per_numa(&setup.topology) as u64;
    let (shim, api) = start(dir.path(), setup, mode).await;
    let kubelet = shim.kubelet().await;

    let pod = plr_pod("huge", per_node + 2, 2);
    announce(&api, &pod).await;
    let err = kubelet.start_pod(&pod).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(
        err.message(),
        "TopologyAffinityError: Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
    );
    {
        let state = shim.fake().state();
        assert!(
            state.sandbox_requests.is_empty(),
            "runtime received a sandbox"
        );
        assert!(state.create_requests.is_empty());
    }

    // Nothing was held: a pod that fits still gets a node.
    let small = plr_pod("small", 2, 1);
    announce(&api, &small).await;
    kubelet.start_pod(&small).await.unwrap();
    assert_eq!(
        received(&shim.fake().created("small", "main")).cpus.len(),
        1
    );
}

#[tokio::test]
async fn topology_affinity_error_reaches_the_client_on_every_machine() {
    for fixture in [TWO, FOUR, EIGHT] {
        too_big_for_one_node(fixture, Mode::CriOnly).await;
    }
    too_big_for_one_node(FOUR, Mode::PodsApi).await;
}

#[tokio::test]
async fn filling_two_numa_nodes_then_one_more_pod_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(TWO, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let pod = plr_pod(name, 4, 2);
        kubelet.start_pod(&pod).await.unwrap();
        let main = received(&shim.fake().created(name, "main"));
        nodes.push(one_numa(&topology, &main.cpus));
    }
    assert_ne!(
        nodes[0], nodes[1],
        "the second bubble goes to the other node"
    );
    let err = kubelet.start_pod(&plr_pod("c", 4, 2)).await.unwrap_err();
    assert!(
        err.message().starts_with("TopologyAffinityError: "),
        "{err:?}"
    );
    assert_eq!(shim.fake().state().sandbox_requests.len(), 2);
}

#[tokio::test]
async fn empty_pod_shared_pool_is_refused_with_the_kubelet_message() {
    let dir = tempfile::tempdir().unwrap();
    // best-effort: admission proceeds past the empty hint and AllocatePod refuses.
    let setup = Setup::new(FOUR, "best-effort", "pod");
    let (shim, api) = start(dir.path(), setup, Mode::PodsApi).await;
    let kubelet = shim.kubelet().await;
    let pod = plr_pod("greedy", 4, 4);
    announce(&api, &pod).await;
    let err = kubelet.start_pod(&pod).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(
        err.message(),
        "EmptyPodSharedPoolError: pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
    );
    assert!(shim.fake().state().sandbox_requests.is_empty());
}

#[tokio::test]
async fn pods_api_sidecar_keeps_its_slice_and_the_pool_is_what_remains() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(EIGHT, "single-numa-node", "pod");
    let topology = setup.topology.clone();
    let (shim, api) = start(dir.path(), setup, Mode::PodsApi).await;
    let kubelet = shim.kubelet().await;
    let pod = pod_def("mesh")
        .pod_level(Res::guaranteed(6000, 6 * GI))
        .sidecar("proxy", Res::guaranteed(2000, GI))
        .container("main", Res::guaranteed(2000, 2 * GI))
        .container("log", Res::default());
    announce(&api, &pod).await;
    kubelet.start_pod(&pod).await.unwrap();
    let proxy = received(&shim.fake().created("mesh", "proxy"));
    let main = received(&shim.fake().created("mesh", "main"));
    let log = received(&shim.fake().created("mesh", "log"));
    assert_eq!(
        (proxy.cpus.len(), main.cpus.len(), log.cpus.len()),
        (2, 2, 2)
    );
    let all = proxy.cpus.union(&main.cpus).union(&log.cpus);
    assert_eq!(all.len(), 6, "slices and pool are disjoint");
    let node = one_numa(&topology, &all);
    assert_eq!((proxy.quota, main.quota), (-1, -1));
    assert_eq!(log.quota, quota(6000));
    for r in [&proxy, &main, &log] {
        assert_eq!(r.mems, node.to_string());
    }
}

/// Container scope: a PLR pod (exclusive container on its own node, the other in the node shared
/// pool), a classic Guaranteed pod (one slice per container), a Burstable pod (node pool).
/// `static_memory`: the Static memory manager (cpuset_mems = the slice's node) or None (empty).
async fn container_scope(fixture: &str, mode: Mode, static_memory: bool) {
    let dir = tempfile::tempdir().unwrap();
    let setup = if static_memory {
        Setup::new(fixture, "single-numa-node", "container")
    } else {
        Setup::with(
            fixture,
            "single-numa-node",
            "container",
            "memoryManagerPolicy: None\n",
        )
    };
    let mems = |node: u32| {
        if static_memory {
            node.to_string()
        } else {
            String::new()
        }
    };
    let topology = setup.topology.clone();
    let (shim, api) = start(dir.path(), setup, mode).await;
    let kubelet = shim.kubelet().await;

    let plr = plr_pod("plr", 4, 2);
    announce(&api, &plr).await;
    kubelet.start_pod(&plr).await.unwrap();
    let main = received(&shim.fake().created("plr", "main"));
    let helper = received(&shim.fake().created("plr", "helper"));
    let ctx = format!("{fixture} {mode:?}: main {main:?} helper {helper:?}");
    assert_eq!(main.cpus.len(), 2, "{ctx}");
    let node = one_numa(&topology, &main.cpus);
    assert_eq!((main.quota, main.mems.clone()), (-1, mems(node)), "{ctx}");
    assert_eq!(helper.cpus, shim.shared(), "{ctx}");
    assert!(helper.cpus.is_disjoint(&main.cpus), "{ctx}");
    assert_eq!(
        (helper.quota, helper.mems.as_str()),
        (quota(4000), ""),
        "{ctx}"
    );

    let classic = pod_def("classic")
        .container("a", Res::guaranteed(2000, 2 * GI))
        .container("b", Res::guaranteed(3000, GI));
    announce(&api, &classic).await;
    kubelet.start_pod(&classic).await.unwrap();
    let a = received(&shim.fake().created("classic", "a"));
    let b = received(&shim.fake().created("classic", "b"));
    let ctx = format!("{fixture} {mode:?}: a {a:?} b {b:?}");
    assert_eq!((a.cpus.len(), b.cpus.len()), (2, 3), "{ctx}");
    for r in [&a, &b] {
        let n = one_numa(&topology, &r.cpus);
        assert_eq!((r.quota, r.mems.clone()), (-1, mems(n)), "{ctx}");
        assert!(r.cpus.is_disjoint(&main.cpus), "{ctx}");
    }
    assert!(a.cpus.is_disjoint(&b.cpus), "{ctx}");

    let burstable =
        pod_def("burst").container("app", Res::burstable(500, 1000, 256 << 20, 512 << 20));
    announce(&api, &burstable).await;
    kubelet.start_pod(&burstable).await.unwrap();
    let app = received(&shim.fake().created("burst", "app"));
    let shared = shim.shared();
    assert_eq!(app.cpus, shared, "{fixture} {mode:?}");
    assert_eq!((app.quota, app.mems.as_str()), (quota(1000), ""));
    for taken in [&main.cpus, &a.cpus, &b.cpus] {
        assert!(shared.is_disjoint(taken));
    }
    assert_eq!(
        shared.len(),
        topology.cpu_set().len() - 7,
        "every exclusive CPU left the node pool exactly once"
    );
}

#[tokio::test]
async fn container_scope_two_numa_cri_only() {
    container_scope(TWO, Mode::CriOnly, false).await;
}

#[tokio::test]
async fn container_scope_two_numa_pods_api() {
    container_scope(TWO, Mode::PodsApi, false).await;
}

#[tokio::test]
async fn container_scope_four_numa_pods_api() {
    container_scope(FOUR, Mode::PodsApi, false).await;
}

#[tokio::test]
async fn container_scope_eight_numa_cri_only() {
    container_scope(EIGHT, Mode::CriOnly, false).await;
}

/// The tutorial's container-scope shape under the Static memory policy: the container without a
/// memory request is skipped by the Memory Manager (kubelet v1.37.2 `policy_static.go`), the pod
/// is admitted.
#[tokio::test]
async fn container_scope_static_memory_plr_pod_with_shared_container() {
    container_scope(FOUR, Mode::PodsApi, true).await;
}

#[tokio::test]
async fn container_scope_static_memory_classic_and_burstable_pods() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(EIGHT, "single-numa-node", "container");
    let topology = setup.topology.clone();
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let classic = pod_def("classic")
        .container("a", Res::guaranteed(4000, 2 * GI))
        .container("b", Res::guaranteed(2000, GI));
    kubelet.start_pod(&classic).await.unwrap();
    let a = received(&shim.fake().created("classic", "a"));
    let b = received(&shim.fake().created("classic", "b"));
    for r in [&a, &b] {
        let node = one_numa(&topology, &r.cpus);
        assert_eq!((r.quota, r.mems.clone()), (-1, node.to_string()), "{r:?}");
    }
    assert_eq!((a.cpus.len(), b.cpus.len()), (4, 2));
    assert!(a.cpus.is_disjoint(&b.cpus));
    let burstable = pod_def("burst").container("app", Res::burstable(500, 2000, 256 << 20, GI));
    kubelet.start_pod(&burstable).await.unwrap();
    let app = received(&shim.fake().created("burst", "app"));
    assert_eq!(app.cpus, shim.shared());
    assert!(app.cpus.is_disjoint(&a.cpus.union(&b.cpus)));
    assert_eq!((app.quota, app.mems.as_str()), (quota(2000), ""));
    assert!(
        numa_of(&topology, &app.cpus).len() == 8,
        "the node pool spans every node"
    );
}

/// A container asking for exactly the pod budget: the Pods API knows it declared resources
/// (exclusive slice, quota lifted); CRI alone cannot tell it from a container without any
/// (pod shared pool, quota kept) — docs/pod-knowledge.md, rule C2.
#[tokio::test]
async fn the_pods_api_spec_is_what_placement_uses() {
    for mode in [Mode::PodsApi, Mode::CriOnly] {
        let dir = tempfile::tempdir().unwrap();
        let setup = Setup::new(FOUR, "single-numa-node", "pod");
        let topology = setup.topology.clone();
        let (shim, api) = start(dir.path(), setup, mode).await;
        let kubelet = shim.kubelet().await;
        let whole = pod_def("whole")
            .pod_level(Res::guaranteed(4000, 4 * GI))
            .container("main", Res::guaranteed(4000, 4 * GI));
        announce(&api, &whole).await;
        kubelet.start_pod(&whole).await.unwrap();
        let main = received(&shim.fake().created("whole", "main"));
        let node = one_numa(&topology, &main.cpus);
        assert_eq!(
            (main.cpus.len(), main.mems.clone()),
            (4, node.to_string()),
            "{mode:?}"
        );
        let want = if mode == Mode::PodsApi {
            -1
        } else {
            quota(4000)
        };
        assert_eq!(main.quota, want, "{mode:?}");
        let state = shim.fake().state();
        let annotation = &state.sandbox_requests[0]
            .config
            .as_ref()
            .unwrap()
            .annotations[POD_ANNOTATION];
        let source = if mode == Mode::PodsApi {
            "\"spec\""
        } else {
            "\"inferred\""
        };
        assert!(annotation.contains(source), "{mode:?}: {annotation}");
    }
}

//! kubelet `policy_static_test.go` / `topology_hints_test.go` rows not covered by the shared
//! vectors (spec §2.3, §2.8, §6.4, §6.5), plus release, restore and reservation behaviour.

use super::fixtures::{kubelet_topo, machine, set};
use crate::cpuset::CpuSet;
use crate::placement::config::{Config, CpuPolicy, CpuPolicyOptions, ReservedCpus, TopologyPolicy};
use crate::placement::cpu::{ContainerAssignment, CpuError, CpuManager, CpuTopology};
use crate::placement::hint::NumaMask;
use crate::placement::pod::{ContainerRole, ContainerSpec, ResourceList, Resources};
use crate::placement::qos::IsolationLevel;
use crate::placement::{HintProvider, TopologyHint};
use crate::topology::{CpuInfo, Topology};

use crate::placement::test_pods::{self, GI};

pub(super) fn res(cpu_milli: Option<u64>) -> Resources {
    let l = ResourceList {
        cpu_milli,
        memory: Some(GI),
        ..Default::default()
    };
    Resources {
        requests: l.clone(),
        limits: l,
    }
}

pub(super) fn ctr(name: &str, role: ContainerRole, cpus: Option<u64>) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        role,
        resources: cpus.map(|c| res(Some(c * 1000))).unwrap_or_default(),
    }
}

pub(super) fn config(reserved: ReservedCpus, options: CpuPolicyOptions) -> Config {
    Config {
        cpu_policy: CpuPolicy::Static,
        cpu_options: options,
        reserved_cpus: reserved,
        topology_policy: TopologyPolicy::BestEffort,
        ..Config::default()
    }
}

fn manager(topo: &str, reserved: ReservedCpus, options: CpuPolicyOptions) -> CpuManager {
    CpuManager::with_topology(kubelet_topo(topo), &config(reserved, options)).unwrap()
}

fn any() -> TopologyHint {
    TopologyHint {
        affinity: None,
        preferred: true,
    }
}

fn exclusive(cpus: &str) -> ContainerAssignment {
    ContainerAssignment {
        cpus: set(cpus),
        isolation: IsolationLevel::Container,
    }
}

#[test]
fn reserved_cpus_the_kubelet_way() {
    let topo = kubelet_topo("topoDualSocketHT");
    let opts = CpuPolicyOptions::default();
    let reserve =
        |milli| crate::placement::cpu::reserve_cpus(&topo, &opts, &ReservedCpus::Count { milli });
    assert_eq!(reserve(2000).unwrap().0, set("0,6"));
    assert_eq!(reserve(1000).unwrap(), (set("0"), set("0,6")));
    assert_eq!(reserve(1500).unwrap().0, set("0,6"));
    assert_eq!(reserve(0).unwrap().0, CpuSet::new());
    assert_eq!(
        reserve(13000).unwrap_err().to_string(),
        "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 13)"
    );
    let explicit =
        crate::placement::cpu::reserve_cpus(&topo, &opts, &ReservedCpus::Explicit(set("1,6")));
    assert_eq!(explicit.unwrap(), (set("1,6"), set("0,1,6,7")));
}

#[test]
fn strict_reservation_removes_reserved_from_shared_pool() {
    let opts = CpuPolicyOptions {
        strict_cpu_reservation: true,
        ..Default::default()
    };
    let cm = manager(
        "topoDualSocketHT",
        ReservedCpus::Count { milli: 2000 },
        opts,
    );
    assert_eq!(cm.shared_pool(), &set("1-5,7-11"));
    assert_eq!(cm.allocatable(), set("1-5,7-11"));
    let cm = manager(
        "topoDualSocketHT",
        ReservedCpus::Count { milli: 2000 },
        CpuPolicyOptions::default(),
    );
    assert_eq!(cm.shared_pool(), &set("0-11"));
    assert_eq!(cm.available(), set("1-5,7-11"));
}

#[test]
fn incompatible_options_are_refused() {
    let topo = kubelet_topo("topoDualSocketHT");
    let both = CpuPolicyOptions {
        full_pcpus_only: true,
        distribute_cpus_across_cores: true,
        ..Default::default()
    };
    let err = CpuManager::with_topology(topo.clone(), &config(ReservedCpus::default(), both))
        .unwrap_err();
    assert_eq!(err.to_string(), "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time");
    let sock = CpuPolicyOptions {
        align_by_socket: true,
        ..Default::default()
    };
    let mut cfg = config(ReservedCpus::default(), sock);
    cfg.topology_policy = TopologyPolicy::SingleNumaNode;
    assert_eq!(
        CpuManager::with_topology(topo.clone(), &cfg).unwrap_err(),
        CpuError::AlignBySocketSingleNuma
    );
    let fake = kubelet_topo("fakeTopoMultiSocketDualSocketPerNumaHT");
    let err = CpuManager::with_topology(fake, &config(ReservedCpus::default(), sock)).unwrap_err();
    assert_eq!(err, CpuError::AlignBySocketHardware);
}

/// S14 / S15: align-by-socket widens the NUMA hint to whole sockets.
#[test]
fn align_by_socket_allocation() {
    for (align, want) in [(true, "2,11"), (false, "2,21")] {
        let opts = CpuPolicyOptions {
            align_by_socket: align,
            ..Default::default()
        };
        let mut cm = manager(
            "topoDualSocketMultiNumaPerSocketHT",
            ReservedCpus::Count { milli: 1000 },
            opts,
        );
        assert_eq!(cm.reserved(), &set("0"));
        cm.state.default_cpu_set = set("2,11,21,22");
        let hint = TopologyHint {
            affinity: Some(NumaMask::from_ids([0, 2])),
            preferred: true,
        };
        let p = test_pods::pod(
            "p",
            vec![],
            vec![ctr("c", ContainerRole::App, Some(2))],
            None,
        );
        cm.allocate(&p, &p.containers[0], &hint).unwrap();
        assert_eq!(
            cm.cpuset_or_default("p", "c"),
            set(want),
            "align-by-socket {align}"
        );
    }
}

/// S16: TestTopologyAwareAllocateCPUs "Request 8 CPUs, BitMask on Socket 1".
#[test]
fn topology_aware_allocate_spills_after_aligned() {
    let mut cm = manager(
        "topoDualSocketHT",
        ReservedCpus::Count { milli: 0 },
        CpuPolicyOptions::default(),
    );
    let got = cm
        .allocate_cpus(8, Some(NumaMask::from_ids([1])), &CpuSet::new())
        .unwrap();
    assert_eq!(got, set("0,1,3,5,6,7,9,11"));
    assert_eq!(cm.shared_pool(), &set("2,4,8,10"));
}

/// TestStaticPolicyReuseCPUs / TestStaticPolicyDoNotReuseCPUs.
#[test]
fn init_container_cpus_are_reused_sidecar_cpus_are_not() {
    let none = ReservedCpus::Count { milli: 0 };
    let mut cm = manager(
        "topoSingleSocketHT",
        none.clone(),
        CpuPolicyOptions::default(),
    );
    let p = test_pods::pod(
        "p",
        vec![ctr("init", ContainerRole::Init, Some(4))],
        vec![ctr("app", ContainerRole::App, Some(2))],
        None,
    );
    for c in p.init_containers.iter().chain(&p.containers) {
        cm.allocate(&p, c, &any()).unwrap();
    }
    assert_eq!(cm.shared_pool(), &set("2,3,6,7"));
    cm.remove_container("p", "init");
    assert_eq!(cm.shared_pool(), &set("1,2,3,5,6,7"));

    let mut cm = manager("topoSingleSocketHT", none, CpuPolicyOptions::default());
    let p = test_pods::pod(
        "q",
        vec![ctr("side", ContainerRole::Sidecar, Some(4))],
        vec![ctr("app", ContainerRole::App, Some(2))],
        None,
    );
    for c in p.init_containers.iter().chain(&p.containers) {
        cm.allocate(&p, c, &any()).unwrap();
    }
    assert_eq!(cm.shared_pool(), &set("3,7"));
}

/// TestStaticPolicyRemove "SingleSocketHT, DeAllocTwoContainer".
#[test]
fn remove_returns_cpus_to_shared_pool() {
    let mut cm = manager(
        "topoSingleSocketHT",
        ReservedCpus::Count { milli: 0 },
        CpuPolicyOptions::default(),
    );
    cm.state.default_cpu_set = set("6,7");
    let e = cm.state.entries.entry("p".into()).or_default();
    e.insert("c1".into(), exclusive("1,3,5"));
    e.insert("c2".into(), exclusive("2,4"));
    cm.remove_container("p", "c1");
    assert_eq!(cm.shared_pool(), &set("1,3,5,6,7"));
    cm.remove_container("p", "unknown");
    cm.remove_container("p", "c2");
    assert_eq!(cm.shared_pool(), &set("1-7"));
    assert!(cm.snapshot().entries.is_empty());
}

/// TestPodGuaranteedCPUs.
#[test]
fn pod_guaranteed_cpus_with_init_and_sidecars() {
    let cm = manager(
        "topoSingleSocketHT",
        ReservedCpus::Count { milli: 0 },
        CpuPolicyOptions::default(),
    );
    let (i, s, a) = (
        ContainerRole::Init,
        ContainerRole::Sidecar,
        ContainerRole::App,
    );
    let p = test_pods::pod(
        "p",
        vec![ctr("s", s, Some(10)), ctr("i", i, Some(200))],
        vec![ctr("a", a, Some(100))],
        None,
    );
    assert_eq!(cm.pod_guaranteed_cpus(&p), 210);
    let init = vec![
        ctr("i1", i, Some(5)),
        ctr("s1", s, Some(1)),
        ctr("s2", s, Some(2)),
        ctr("i2", i, Some(5)),
        ctr("s3", s, Some(3)),
    ];
    assert_eq!(
        cm.pod_guaranteed_cpus(&test_pods::pod("p", init, vec![ctr("a", a, Some(1))], None)),
        8
    );
    let init = vec![
        ctr("i1", i, Some(5)),
        ctr("s1", s, Some(1)),
        ctr("s2", s, Some(2)),
        ctr("s3", s, Some(3)),
    ];
    assert_eq!(
        cm.pod_guaranteed_cpus(&test_pods::pod("p", init, vec![ctr("a", a, Some(1))], None)),
        7
    );
}

/// topology_hints_test "Request 2 CPUs, 4 available on NUMA 0, 6 available on NUMA 1".
#[test]
fn container_hints_prefer_narrowest() {
    let numa = |id: u32| {
        if [0, 1, 2, 6, 7, 8].contains(&id) {
            0
        } else {
            1
        }
    };
    let cpus = (0..12)
        .map(|id| CpuInfo {
            id,
            core: id % 6,
            socket: numa(id),
            die: 0,
            numa: numa(id),
            uncore: 0,
        })
        .collect();
    let topo = CpuTopology::new(&Topology { cpus, numa: vec![] });
    let mut cm = CpuManager::with_topology(
        topo,
        &config(ReservedCpus::Count { milli: 0 }, Default::default()),
    )
    .unwrap();
    cm.state.default_cpu_set = set("2-11");
    let p = test_pods::pod(
        "p",
        vec![],
        vec![ctr("c", ContainerRole::App, Some(2))],
        None,
    );
    let hints = cm.container_hints(&p, &p.containers[0])["cpu"]
        .clone()
        .unwrap();
    let got: Vec<(Vec<u32>, bool)> = hints
        .iter()
        .map(|h| (h.affinity.unwrap().ids().collect(), h.preferred))
        .collect();
    assert_eq!(
        got,
        vec![(vec![0], true), (vec![1], true), (vec![0, 1], false)]
    );
    // Shared-pool containers and non-Guaranteed pods give no preference.
    let shared = test_pods::pod("q", vec![], vec![ctr("c", ContainerRole::App, None)], None);
    assert!(cm
        .container_hints(&shared, &shared.containers[0])
        .is_empty());
}

/// TestGetPodTopologyHintsWithPolicyOptions.
#[test]
fn pod_hints_with_align_by_socket() {
    for (align, request, default, want_preferred, want_total) in [
        (false, 2, "2,3,11", vec![vec![0]], 8),
        (true, 2, "2,3,11", vec![vec![0], vec![0, 1]], 8),
        (
            true,
            41,
            "0-28,40-57",
            vec![vec![0, 1, 2], vec![0, 1, 2, 3]],
            2,
        ),
    ] {
        let opts = CpuPolicyOptions {
            align_by_socket: align,
            ..Default::default()
        };
        let mut cm = manager(
            "topoDualSocketMultiNumaPerSocketHT",
            ReservedCpus::Count { milli: 1000 },
            opts,
        );
        cm.state.default_cpu_set = set(default);
        let p = test_pods::pod(
            "p",
            vec![],
            vec![ctr("c", ContainerRole::App, Some(request))],
            None,
        );
        let hints = cm.pod_hints(&p)["cpu"].clone().unwrap();
        let preferred: Vec<Vec<u32>> = hints
            .iter()
            .filter(|h| h.preferred)
            .map(|h| h.affinity.unwrap().ids().collect())
            .collect();
        assert_eq!(preferred, want_preferred, "align {align} request {request}");
        assert_eq!(hints.len(), want_total, "align {align} request {request}");
    }
}

/// KEP-5526 example: 5 CPUs, {3, none, none} → one slice of 3, the two others share the rest;
/// slices stay in the bubble until the last container goes.
#[test]
fn pod_bubble_partition_and_release() {
    let mut cm = CpuManager::new(
        &machine("topoDualSocketHT"),
        &config(ReservedCpus::Explicit(set("0")), Default::default()),
    )
    .unwrap();
    let (s, a) = (ContainerRole::Sidecar, ContainerRole::App);
    let p = test_pods::pod(
        "p",
        vec![ctr("side", s, None)],
        vec![ctr("big", a, Some(3)), ctr("x", a, None)],
        Some((5 * 1000, GI)),
    );
    cm.allocate_pod(&p, &any()).unwrap();
    let bubble = cm.pod_cpus("p").unwrap().clone();
    assert_eq!(bubble.len(), 5);
    let (big, big_level) = cm.container_cpus("p", "big").unwrap();
    assert_eq!((big.len(), big_level), (3, IsolationLevel::Container));
    let pool = bubble.difference(&big);
    for name in ["side", "x"] {
        assert_eq!(
            cm.container_cpus("p", name),
            Some((pool.clone(), IsolationLevel::Pod)),
            "{name}"
        );
        assert_eq!(
            cm.isolation_level(
                &p,
                p.init_containers
                    .iter()
                    .chain(&p.containers)
                    .find(|c| c.name == name)
                    .unwrap()
            ),
            IsolationLevel::Pod
        );
    }
    assert_eq!(
        cm.isolation_level(&p, &p.containers[0]),
        IsolationLevel::Container
    );
    assert_eq!(cm.shared_pool(), &set("0-11").difference(&bubble));
    // Re-allocating (e.g. after a restore) changes nothing.
    let before = cm.snapshot();
    cm.allocate_pod(&p, &any()).unwrap();
    assert_eq!(cm.snapshot(), before);
    cm.remove_container("p", "big");
    assert_eq!(cm.shared_pool(), &set("0-11").difference(&bubble));
    cm.remove_container("p", "side");
    cm.remove_container("p", "x");
    assert_eq!(cm.shared_pool(), &set("0-11"));
    assert!(cm.pod_cpus("p").is_none());
}

#[test]
fn snapshot_restore_roundtrip_and_validation() {
    let cfg = config(ReservedCpus::Explicit(set("0,6")), Default::default());
    let mut cm = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    let p = test_pods::pod(
        "p",
        vec![],
        vec![ctr("c", ContainerRole::App, Some(4))],
        None,
    );
    cm.allocate(&p, &p.containers[0], &any()).unwrap();
    let json = serde_json::to_string(&cm.snapshot()).unwrap();
    let mut fresh = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    fresh.restore(serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(fresh.snapshot(), cm.snapshot());
    // Allocating a restored container again keeps its CPUs.
    fresh.allocate(&p, &p.containers[0], &any()).unwrap();
    assert_eq!(fresh.snapshot(), cm.snapshot());

    let mut bad = cm.snapshot();
    bad.default_cpu_set = set("0-1");
    assert_eq!(
        fresh.restore(bad).unwrap_err().to_string(),
        r#"not all reserved cpus: "0,6" are present in defaultCpuSet: "0-1""#
    );
    let mut bad = cm.snapshot();
    bad.default_cpu_set = bad.default_cpu_set.union(&set("12"));
    assert!(matches!(
        fresh.restore(bad),
        Err(CpuError::StateMismatch { .. })
    ));
    let mut bad = cm.snapshot();
    let held = bad.entries["p"]["c"].cpus.clone();
    bad.default_cpu_set = bad.default_cpu_set.union(&held);
    assert!(matches!(fresh.restore(bad), Err(CpuError::Overlap { .. })));
}

/// With no reserved CPUs (numa-shim accepts `reservedSystemCPUs: ""`) every CPU can be handed
/// out, leaving the shared pool empty: numa-shim's own checkpoint of that state must restore.
/// (The kubelet refuses an empty default set with assignments, but it never gets there: it
/// requires a reservation.) With a reservation an empty default set is still refused.
#[test]
fn a_state_with_every_cpu_allocated_restores_without_a_reservation() {
    let cfg = config(ReservedCpus::Explicit(CpuSet::new()), Default::default());
    let mut cm = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    let p = test_pods::pod(
        "p",
        vec![],
        vec![ctr("c", ContainerRole::App, Some(12))],
        None,
    );
    cm.allocate(&p, &p.containers[0], &any()).unwrap();
    assert!(cm.shared_pool().is_empty());
    let mut fresh = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    fresh.restore(cm.snapshot()).unwrap();
    assert_eq!(fresh.snapshot(), cm.snapshot());

    let reserved = config(ReservedCpus::Explicit(set("0")), Default::default());
    let mut fresh = CpuManager::new(&machine("topoDualSocketHT"), &reserved).unwrap();
    assert!(matches!(
        fresh.restore(cm.snapshot()),
        Err(CpuError::EmptyDefaultSet)
    ));
}

#[test]
fn none_policy_is_inert() {
    let cfg = Config {
        cpu_policy: CpuPolicy::None,
        ..Config::default()
    };
    let mut cm = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    let p = test_pods::pod(
        "p",
        vec![],
        vec![ctr("c", ContainerRole::App, Some(2))],
        None,
    );
    assert!(cm.container_hints(&p, &p.containers[0]).is_empty());
    cm.allocate(&p, &p.containers[0], &any()).unwrap();
    // kubelet's none policy never initialises its default set: no cpuset for anyone.
    assert_eq!(cm.shared_pool(), &set(""));
    assert_eq!(cm.cpuset_or_default("p", "c"), set(""));
    assert_eq!(cm.container_cpus("p", "c"), None);
}

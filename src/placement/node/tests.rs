//! `Node` admission end to end: scopes, policies, PLRM, gates, atomicity, release, snapshots.

use std::collections::BTreeMap;

use super::*;
use crate::placement::config::{CpuPolicy, MemoryPolicy, ReservedCpus, ReservedMemory};
use crate::placement::{ContainerRole, ResourceList, Resources};
use crate::topology::{CpuInfo, NumaNode};

pub(super) const GI: u64 = 1 << 30;

/// kubelet's topoDualSocketHT: 12 CPUs, core = id mod 6, socket = NUMA = id mod 2; 8Gi per node.
pub(super) fn dual_socket_ht() -> Topology {
    Topology {
        cpus: (0..12)
            .map(|id| CpuInfo {
                id,
                core: id % 6,
                socket: id % 2,
                die: 0,
                numa: id % 2,
                uncore: 0,
            })
            .collect(),
        numa: (0..2)
            .map(|id| NumaNode {
                id,
                memory: 8 * GI,
                hugepages: BTreeMap::new(),
                distances: if id == 0 { vec![10, 20] } else { vec![20, 10] },
            })
            .collect(),
    }
}

pub(super) fn static_config(policy: TopologyPolicy, scope: TopologyScope) -> Config {
    Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::parse("0").unwrap()),
        topology_policy: policy,
        topology_scope: scope,
        ..Config::default()
    }
}

fn with_memory(mut c: Config) -> Config {
    c.memory_policy = MemoryPolicy::Static;
    c.reserved_memory = (0..2)
        .map(|n| ReservedMemory {
            numa_node: n,
            memory: GI,
            hugepages: BTreeMap::new(),
        })
        .collect();
    c
}

pub(super) fn list(cpu_milli: u64, mem: u64) -> ResourceList {
    ResourceList {
        cpu_milli: Some(cpu_milli),
        memory: Some(mem),
        hugepages: BTreeMap::new(),
    }
}

pub(super) fn gu(name: &str, role: ContainerRole, cpu_milli: u64, mem: u64) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        role,
        resources: Resources {
            requests: list(cpu_milli, mem),
            limits: list(cpu_milli, mem),
        },
    }
}

pub(super) fn bare(name: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        role: ContainerRole::App,
        resources: Resources::default(),
    }
}

pub(super) fn pod(
    uid: &str,
    init: Vec<ContainerSpec>,
    apps: Vec<ContainerSpec>,
    pod_level: Option<(u64, u64)>,
) -> PodSpec {
    PodSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: uid.into(),
        resources: pod_level.map(|(c, m)| Resources {
            requests: list(c, m),
            limits: list(c, m),
        }),
        init_containers: init,
        containers: apps,
    }
}

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

fn node(config: Config) -> Node {
    Node::new(dual_socket_ht(), config).unwrap()
}

#[test]
fn p3_pod_scope_bubble_with_mixed_containers() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Pod,
    ));
    let p = pod(
        "p3",
        vec![],
        vec![
            gu("gu-container-1", ContainerRole::App, 1000, GI),
            gu("gu-container-2", ContainerRole::App, 1000, GI),
            bare("ngu-container"),
        ],
        Some((3000, 3 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    let c: Vec<(&str, String, bool, Isolation, CpuQuota)> = placed
        .containers
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.cpus.to_string(),
                c.exclusive,
                c.isolation,
                c.cpu_quota,
            )
        })
        .collect();
    assert_eq!(
        c,
        vec![
            (
                "gu-container-1",
                "6".to_string(),
                true,
                Isolation::Container,
                CpuQuota::Unlimited
            ),
            (
                "gu-container-2",
                "2".to_string(),
                true,
                Isolation::Container,
                CpuQuota::Unlimited
            ),
            (
                "ngu-container",
                "8".to_string(),
                false,
                Isolation::Pod,
                CpuQuota::Keep
            ),
        ]
    );
    assert_eq!(placed.cpus, Some(cpus("2,6,8")));
    assert_eq!(placed.cpu_quota, CpuQuota::Keep);
    assert_eq!(n.shared_cpus(), cpus("0,1,3-5,7,9-11"));
    let fresh = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Pod,
    ));
    n.remove_container("p3", "gu-container-1");
    assert_eq!(
        n.shared_cpus(),
        cpus("0,1,3-5,7,9-11"),
        "PLRM bubble stays until the last container goes"
    );
    n.remove_pod("p3");
    assert_eq!(n.snapshot(), fresh.snapshot());
    assert!(n.placement("p3").is_none());
}

#[test]
fn p7_empty_shared_pool_rejected_and_nothing_changes() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Pod,
    ));
    let before = n.snapshot();
    let p = pod(
        "p7",
        vec![],
        vec![
            gu("gu-container-1", ContainerRole::App, 1000, GI),
            gu("gu-container-2", ContainerRole::App, 1000, GI),
            bare("ngu-container"),
        ],
        Some((2000, 2 * GI)),
    );
    let err = n.admit(&p).unwrap_err();
    assert_eq!(err.reason(), "EmptyPodSharedPoolError");
    assert_eq!(err.to_string(), "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers");
    assert_eq!(n.snapshot(), before);
    // restricted: the empty CPU hint list makes the merged hint non-preferred → TopologyAffinityError.
    let mut r = node(static_config(
        TopologyPolicy::Restricted,
        TopologyScope::Pod,
    ));
    assert_eq!(r.admit(&p).unwrap_err(), AdmissionError::TopologyAffinity);
}

#[test]
fn container_scope_with_pod_level_resources_uses_node_pool() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 2000, GI), bare("ngu")],
        Some((4000, 4 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    assert!(placed.cpus.is_none(), "no bubble in container scope");
    let gu = &placed.containers[0];
    assert!(gu.exclusive);
    assert_eq!(gu.cpus.len(), 2);
    let ngu = &placed.containers[1];
    assert_eq!((ngu.isolation, ngu.exclusive), (Isolation::Host, false));
    assert_eq!(ngu.cpus, n.shared_cpus());
    assert!(ngu.cpus.is_disjoint(&gu.cpus));
}

#[test]
fn classic_guaranteed_pod_gets_exclusive_cpus_and_release_restores() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    let fresh = n.snapshot();
    let p = pod(
        "g",
        vec![],
        vec![
            gu("a", ContainerRole::App, 4000, GI),
            gu("b", ContainerRole::App, 500, GI),
        ],
        None,
    );
    let placed = n.admit(&p).unwrap();
    let a = &placed.containers[0];
    assert_eq!(a.cpus.len(), 4);
    assert!(
        a.cpus.iter().all(|c| c % 2 == a.cpus.first().unwrap() % 2),
        "one NUMA node: {}",
        a.cpus
    );
    assert!(!a.cpus.contains(0));
    assert_eq!(placed.containers[1].isolation, Isolation::Host);
    assert_eq!(placed.cpu_quota, CpuQuota::Unlimited);
    assert_eq!(n.container("g", "b").unwrap().cpus, n.shared_cpus());
    n.remove_pod("g");
    assert_eq!(n.snapshot(), fresh);
}

#[test]
fn single_numa_node_rejects_what_spans_nodes() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    let before = n.snapshot();
    let p = pod(
        "big",
        vec![],
        vec![gu("a", ContainerRole::App, 7000, GI)],
        None,
    );
    let err = n.admit(&p).unwrap_err();
    assert_eq!(
        (err.reason(), err.to_string().as_str()),
        (
            "TopologyAffinityError",
            "Resources cannot be allocated with Topology locality"
        )
    );
    assert_eq!(n.snapshot(), before);
    // best-effort admits it across both nodes.
    let mut b = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    assert_eq!(b.admit(&p).unwrap().containers[0].cpus.len(), 7);
}

#[test]
fn failure_on_a_later_container_rolls_back_earlier_ones() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    let before = n.snapshot();
    // 11 allocatable CPUs: 6 + 6 does not fit; the first container's grant must be undone.
    let p = pod(
        "p",
        vec![],
        vec![
            gu("a", ContainerRole::App, 6000, GI),
            gu("b", ContainerRole::App, 6000, GI),
        ],
        None,
    );
    let err = n.admit(&p).unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert_eq!(n.snapshot(), before);
    assert!(n.placement("p").is_none());
}

#[test]
fn gates_off_mean_no_alignment_for_pod_level_pods() {
    let mut c = static_config(TopologyPolicy::Restricted, TopologyScope::Pod);
    c.gates.pod_level_resource_managers = false;
    let mut n = node(c);
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 2000, GI)],
        Some((2000, 2 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    assert!(placed.cpus.is_none());
    assert_eq!(placed.containers[0].isolation, Isolation::Host);
    assert_eq!(n.shared_cpus(), cpus("0-11"));
}

#[test]
fn policy_none_still_allocates_per_container() {
    let mut n = node(static_config(TopologyPolicy::None, TopologyScope::Pod));
    let p = pod(
        "p",
        vec![],
        vec![gu("a", ContainerRole::App, 2000, GI), bare("s")],
        Some((3000, 3 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    assert!(
        placed.cpus.is_none(),
        "policy none uses the per-container path, no bubble"
    );
    assert!(placed.containers[0].exclusive);
    assert_eq!(placed.containers[0].hint, None);
}

#[test]
fn memory_follows_the_cpu_numa_node() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 2000, 2 * GI), bare("s")],
        Some((3000, 4 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    let bubble = placed.cpus.clone().unwrap();
    let node_id = bubble.first().unwrap() % 2;
    for c in &placed.containers {
        assert_eq!(
            c.memory_nodes,
            Some(NumaMask::from_ids([node_id])),
            "{}",
            c.name
        );
    }
    assert_eq!(placed.memory.iter().map(|b| b.size).sum::<u64>(), 4 * GI);
    assert_eq!(placed.containers[1].memory[0].size, 2 * GI);
    let alloc = n.allocatable_memory();
    assert_eq!(alloc.iter().map(|b| b.size).sum::<u64>(), 14 * GI);
    // Too much memory for one node under single-numa-node: the only memory hint is {0,1}, filtered
    // away → TopologyAffinityError on a fresh node.
    let big = pod(
        "big",
        vec![],
        vec![gu("gu", ContainerRole::App, 1000, 7 * GI + 1), bare("s")],
        Some((2000, 7 * GI + 2)),
    );
    let mut fresh = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    assert_eq!(
        fresh.admit(&big).unwrap_err(),
        AdmissionError::TopologyAffinity
    );
    // With node 0 already holding a single-NUMA block, {0,1} is not even a memory hint: kubelet's
    // empty hint map means "no preference", the CPU hint wins and the Memory Manager then fails.
    let err = n.admit(&big).unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert_eq!(
        err.to_string(),
        "Allocate failed due to [memorymanager] failed to find NUMA nodes to extend the current topology hint, which is unexpected"
    );
}

#[test]
fn unavailable_cpus_are_never_granted() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    n.mark_unavailable(&cpus("1-5")).unwrap();
    assert_eq!(n.unavailable_cpus(), cpus("1-5"));
    assert_eq!(n.shared_cpus(), cpus("0,6-11"));
    let p = pod(
        "p",
        vec![],
        vec![gu("a", ContainerRole::App, 5000, GI)],
        None,
    );
    let placed = n.admit(&p).unwrap();
    assert_eq!(
        placed.containers[0].cpus,
        cpus("6-11")
            .difference(&n.shared_cpus())
            .union(&placed.containers[0].cpus)
            .intersection(&cpus("6-11"))
    );
    assert!(placed.containers[0].cpus.is_disjoint(&cpus("0-5")));
    assert!(
        n.mark_unavailable(&cpus("0")).is_err(),
        "reserved CPUs cannot be marked"
    );
}

#[test]
fn config_errors_name_the_field() {
    let mut c = static_config(TopologyPolicy::None, TopologyScope::Container);
    c.reserved_cpus = ReservedCpus::Explicit(cpus("12-13"));
    let err = Node::new(dual_socket_ht(), c).unwrap_err();
    assert!(err.to_string().starts_with("reservedSystemCPUs:"), "{err}");
    let mut c = with_memory(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    c.reserved_memory.clear();
    assert_eq!(
        Node::new(dual_socket_ht(), c).unwrap_err().to_string(),
        "reservedMemory: [memorymanager] you should specify the system reserved memory"
    );
}

#[test]
fn snapshot_round_trips_and_restores() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::Restricted,
        TopologyScope::Pod,
    )));
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 2000, 2 * GI), bare("s")],
        Some((3000, 4 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    let json = serde_json::to_string(&n.snapshot()).unwrap();
    let mut other = node(with_memory(static_config(
        TopologyPolicy::Restricted,
        TopologyScope::Pod,
    )));
    other.restore(serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(other.snapshot(), n.snapshot());
    assert_eq!(other.placement("p"), Some(placed));
    assert_eq!(
        other.admit(&p).unwrap(),
        n.placement("p").unwrap(),
        "re-admission is idempotent"
    );
}

//! Static Memory Manager: table, reservedMemory checks, hints, allocation, PLRM bubble, release.

use std::collections::BTreeMap;

use super::*;
use crate::placement::config::{MemoryPolicy, ReservedMemory};
use crate::placement::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};
use crate::topology::{NumaNode, Topology};

const GI: u64 = 1 << 30;
const MI2: u64 = 2 << 20;

/// Two NUMA nodes, 16Gi each, node 0 also 1Gi of 2Mi hugepages.
fn topo() -> Topology {
    Topology {
        cpus: vec![],
        numa: vec![
            NumaNode {
                id: 0,
                memory: 16 * GI,
                hugepages: BTreeMap::from([(MI2, GI)]),
                distances: vec![10, 20],
            },
            NumaNode {
                id: 1,
                memory: 16 * GI,
                hugepages: BTreeMap::new(),
                distances: vec![20, 10],
            },
        ],
    }
}

fn config() -> Config {
    Config {
        memory_policy: MemoryPolicy::Static,
        reserved_memory: vec![
            ReservedMemory {
                numa_node: 0,
                memory: GI,
                hugepages: BTreeMap::new(),
            },
            ReservedMemory {
                numa_node: 1,
                memory: GI,
                hugepages: BTreeMap::new(),
            },
        ],
        ..Config::default()
    }
}

fn mm() -> MemoryManager {
    MemoryManager::new(&topo(), &config()).unwrap()
}

fn gu(name: &str, role: ContainerRole, cpu_milli: u64, mem: u64) -> ContainerSpec {
    let l = ResourceList {
        cpu_milli: Some(cpu_milli),
        memory: Some(mem),
        hugepages: BTreeMap::new(),
    };
    ContainerSpec {
        name: name.into(),
        role,
        resources: Resources {
            requests: l.clone(),
            limits: l,
        },
    }
}

fn bare(name: &str, role: ContainerRole) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        role,
        resources: Resources::default(),
    }
}

fn pod(
    uid: &str,
    init: Vec<ContainerSpec>,
    apps: Vec<ContainerSpec>,
    pod_level: Option<(u64, u64)>,
) -> PodSpec {
    PodSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: uid.into(),
        resources: pod_level.map(|(cpu, mem)| {
            let l = ResourceList {
                cpu_milli: Some(cpu),
                memory: Some(mem),
                hugepages: BTreeMap::new(),
            };
            Resources {
                requests: l.clone(),
                limits: l,
            }
        }),
        init_containers: init,
        containers: apps,
    }
}

fn mask(ids: &[u32]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied())
}

fn hint(ids: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(mask(ids)),
        preferred,
    }
}

fn memory_hints(h: &ResourceHints) -> Vec<(Vec<u32>, bool)> {
    h.get(MEMORY)
        .cloned()
        .flatten()
        .unwrap_or_default()
        .iter()
        .map(|h| (h.affinity.unwrap().ids().collect(), h.preferred))
        .collect()
}

fn free(m: &MemoryManager, node: u32) -> u64 {
    m.state().machine[&node].memory[MEMORY].free
}

#[test]
fn table_subtracts_reserved_and_hugepages() {
    let m = mm();
    let n0 = &m.state().machine[&0];
    assert_eq!(
        n0.memory[MEMORY],
        MemoryTable {
            total: 16 * GI,
            system_reserved: GI,
            allocatable: 14 * GI,
            reserved: 0,
            free: 14 * GI
        }
    );
    assert_eq!(n0.memory["hugepages-2Mi"].allocatable, GI);
    assert_eq!(m.state().machine[&1].memory[MEMORY].allocatable, 15 * GI);
    assert_eq!(n0.cells, vec![0]);
    let alloc = m.allocatable();
    assert_eq!(alloc.len(), 3);
    assert_eq!(hugepage_resource_name(1 << 30), "hugepages-1Gi");
    assert_eq!(hugepage_resource_name(64 << 10), "hugepages-64Ki");
}

#[test]
fn reserved_memory_is_validated() {
    let mut c = config();
    c.reserved_memory.clear();
    assert_eq!(
        MemoryManager::new(&topo(), &c).unwrap_err(),
        MemoryError::NoSystemReserved
    );
    let mut c = config();
    c.reserved_memory.push(ReservedMemory {
        numa_node: 7,
        memory: GI,
        hugepages: BTreeMap::new(),
    });
    let err = MemoryManager::new(&topo(), &c).unwrap_err();
    assert_eq!(err.to_string(), "the reserved memory configuration references a NUMA node 7 that does not exist on this machine");
    // Policy None ignores reservations entirely.
    let none = Config::default();
    assert!(MemoryManager::new(&topo(), &none)
        .unwrap()
        .state()
        .machine
        .is_empty());
}

#[test]
fn hints_prefer_fewest_nodes() {
    let m = mm();
    let p = pod(
        "p",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 5 * GI)],
        None,
    );
    let h = m.container_hints(&p, &p.containers[0]);
    assert_eq!(
        memory_hints(&h),
        vec![(vec![0], true), (vec![1], true), (vec![0, 1], false)]
    );
    let big = pod(
        "b",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 20 * GI)],
        None,
    );
    assert_eq!(
        memory_hints(&m.container_hints(&big, &big.containers[0])),
        vec![(vec![0, 1], true)]
    );
    // Too big for the machine: no hint for any resource → empty map ("no preference"), allocation then fails.
    let huge = pod(
        "h",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 40 * GI)],
        None,
    );
    assert!(m.container_hints(&huge, &huge.containers[0]).is_empty());
    let mut m2 = mm();
    let err = m2
        .allocate(
            &huge,
            &huge.containers[0],
            &TopologyHint {
                affinity: None,
                preferred: false,
            },
        )
        .unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert!(
        err.to_string()
            .contains("failed to get the default NUMA affinity"),
        "{err}"
    );
}

#[test]
fn non_guaranteed_pods_get_nothing() {
    let mut m = mm();
    let mut c = gu("c", ContainerRole::App, 1000, GI);
    c.resources.limits.memory = Some(2 * GI);
    let p = pod("p", vec![], vec![c], None);
    assert!(m.container_hints(&p, &p.containers[0]).is_empty());
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    assert!(m.container_blocks("p", "c").is_none());
    assert_eq!(free(&m, 0), 14 * GI);
}

#[test]
fn allocate_and_release_container() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 4 * GI)],
        None,
    );
    m.allocate(&p, &p.containers[0], &hint(&[1], true)).unwrap();
    assert_eq!(m.memory_nodes("p", "c"), Some(mask(&[1])));
    assert_eq!(free(&m, 1), 11 * GI);
    assert_eq!(m.state().machine[&1].assignments, 1);
    let before = mm();
    m.remove_container("p", "c");
    assert_eq!(m.state(), before.state());
}

#[test]
fn nil_hint_uses_default_and_small_hint_is_extended() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 4 * GI)],
        None,
    );
    m.allocate(
        &p,
        &p.containers[0],
        &TopologyHint {
            affinity: None,
            preferred: false,
        },
    )
    .unwrap();
    assert_eq!(m.memory_nodes("p", "c"), Some(mask(&[0])));
    // 20Gi with hint {1}: extended to {0,1}; a preferred TM hint with a non-preferred extension fails.
    let big = pod(
        "b",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 20 * GI)],
        None,
    );
    let mut m2 = mm();
    m2.allocate(&big, &big.containers[0], &hint(&[1], false))
        .unwrap();
    assert_eq!(m2.memory_nodes("b", "c"), Some(mask(&[0, 1])));
    // Greedy draw, ascending node id.
    assert_eq!(free(&m2, 0), 0);
    assert_eq!(free(&m2, 1), 9 * GI);
    assert_eq!(m2.state().machine[&1].cells, vec![0, 1]);
}

#[test]
fn group_rule_blocks_mixing_single_and_cross_numa() {
    let mut m = mm();
    let big = pod(
        "b",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 20 * GI)],
        None,
    );
    m.allocate(&big, &big.containers[0], &hint(&[0, 1], true))
        .unwrap();
    let small = pod(
        "s",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, GI)],
        None,
    );
    // Single-node masks are out: both nodes belong to the {0,1} group.
    assert_eq!(
        memory_hints(&m.container_hints(&small, &small.containers[0])),
        vec![(vec![0, 1], false)]
    );
    // And a single-node allocation on a grouped node is refused.
    let mut m2 = mm();
    m2.allocate(&small, &small.containers[0], &hint(&[0], true))
        .unwrap();
    let err = m2
        .allocate(&big, &big.containers[0], &hint(&[0, 1], false))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("preferred hint violates NUMA node allocation"),
        "{err}"
    );
}

#[test]
fn init_container_memory_is_reused_by_app() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![gu("init", ContainerRole::Init, 1000, 4 * GI)],
        vec![gu("app", ContainerRole::App, 1000, 3 * GI)],
        None,
    );
    let h = hint(&[0], true);
    m.allocate(&p, &p.init_containers[0], &h).unwrap();
    m.allocate(&p, &p.containers[0], &h).unwrap();
    // Only the init container's 4Gi are charged; its block shrank by what the app reused.
    assert_eq!(free(&m, 0), 10 * GI);
    assert_eq!(m.container_blocks("p", "init").unwrap()[0].size, GI);
    assert_eq!(m.container_blocks("p", "app").unwrap()[0].size, 3 * GI);
    let before = mm();
    m.remove_pod("p");
    assert_eq!(m.state(), before.state());
}

#[test]
fn pod_hints_use_init_sidecar_formula() {
    let m = mm();
    let p = pod(
        "p",
        vec![
            gu("side", ContainerRole::Sidecar, 1000, GI),
            gu("init", ContainerRole::Init, 1000, 14 * GI),
        ],
        vec![gu("app", ContainerRole::App, 1000, 2 * GI)],
        None,
    );
    // max(1+14, 2+1) = 15Gi: only node 1 (15Gi) or both.
    assert_eq!(
        memory_hints(&m.pod_hints(&p)),
        vec![(vec![1], true), (vec![0, 1], false)]
    );
}

#[test]
fn plrm_pod_bubble_partitions_and_releases_with_last_container() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![bare("init", ContainerRole::Init)],
        vec![
            gu("gu", ContainerRole::App, 1000, 2 * GI),
            bare("shared", ContainerRole::App),
        ],
        Some((3000, 6 * GI)),
    );
    assert_eq!(
        memory_hints(&m.pod_hints(&p)),
        vec![(vec![0], true), (vec![1], true), (vec![0, 1], false)]
    );
    m.allocate_pod(&p, &hint(&[1], true)).unwrap();
    let size = |c: &str| {
        m.container_blocks("p", c)
            .unwrap()
            .iter()
            .map(|b| b.size)
            .sum::<u64>()
    };
    assert_eq!(size("gu"), 2 * GI);
    assert_eq!(size("shared"), 4 * GI);
    assert_eq!(size("init"), 6 * GI);
    assert_eq!(m.pod_blocks("p").unwrap()[0].size, 6 * GI);
    assert_eq!(free(&m, 1), 9 * GI);
    for c in ["init", "gu", "shared"] {
        assert_eq!(m.memory_nodes("p", c), Some(mask(&[1])));
    }
    m.remove_container("p", "init");
    m.remove_container("p", "gu");
    assert_eq!(
        free(&m, 1),
        9 * GI,
        "nothing returns before the last container"
    );
    m.remove_container("p", "shared");
    assert_eq!(m.state(), mm().state());
}

#[test]
fn plrm_empty_shared_pool_is_rejected() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![
            gu("a", ContainerRole::App, 1000, GI),
            gu("b", ContainerRole::App, 1000, GI),
            bare("shared", ContainerRole::App),
        ],
        Some((2000, 2 * GI)),
    );
    let h = m.pod_hints(&p);
    assert_eq!(h.get(MEMORY), Some(&Some(vec![])));
    let err = m.allocate_pod(&p, &hint(&[0], false)).unwrap_err();
    assert_eq!(err.reason(), "EmptyPodSharedPoolError");
    assert_eq!(
        err.to_string(),
        "pod rejected, sum of exclusive container memory requests equals pod budget, leaving no memory for shared containers"
    );
    assert_eq!(m.state(), mm().state());
}

#[test]
fn plrm_init_container_larger_than_pool_is_rejected() {
    let m = mm();
    let p = pod(
        "p",
        vec![
            gu("side", ContainerRole::Sidecar, 1000, 2 * GI),
            gu("init", ContainerRole::Init, 1000, 3 * GI),
        ],
        vec![bare("app", ContainerRole::App)],
        Some((4000, 4 * GI)),
    );
    let err = alloc::validate_pod_scope(&p, m.gates).unwrap_err();
    assert_eq!(err, format!("pod rejected, largest exclusive init container requests {} of memory, but only {} available", 3 * GI, 2 * GI));
}

#[test]
fn gates_off_skip_pod_level_pods() {
    let mut c = config();
    c.gates.pod_level_resource_managers = false;
    let mut m = MemoryManager::new(&topo(), &c).unwrap();
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 1000, 2 * GI)],
        Some((2000, 4 * GI)),
    );
    assert!(m.pod_hints(&p).is_empty());
    assert!(m.container_hints(&p, &p.containers[0]).is_empty());
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    assert!(m.container_blocks("p", "gu").is_none());
}

#[test]
fn state_round_trips_through_serde() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 4 * GI)],
        None,
    );
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    let json = serde_json::to_string(m.state()).unwrap();
    let mut fresh = mm();
    fresh.restore(serde_json::from_str(&json).unwrap());
    assert_eq!(fresh.state(), m.state());
}

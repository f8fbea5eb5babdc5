//! Machine table, reservedMemory checks, container hints, allocation, reuse, release, restore.

use super::*;

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
    fresh.restore(serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(fresh.state(), m.state());
}

#[test]
fn restore_rejects_a_machine_state_that_does_not_match_the_blocks() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 4 * GI)],
        None,
    );
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    let mut bad = m.state().clone();
    bad.machine
        .get_mut(&0)
        .unwrap()
        .memory
        .get_mut(MEMORY)
        .unwrap()
        .free += GI;
    let mut fresh = mm();
    assert_eq!(fresh.restore(bad), Err(MemoryError::MachineStateMismatch));
    assert_eq!(
        fresh.state(),
        mm().state(),
        "a failed restore changes nothing"
    );
    let mut orphan = m.state().clone();
    orphan.machine.clear();
    assert_eq!(fresh.restore(orphan), Err(MemoryError::EmptyMachineState));
    // A PLRM pod is validated through its pod blocks.
    let plrm = pod(
        "q",
        vec![],
        vec![
            gu("gu", ContainerRole::App, 1000, GI),
            bare("s", ContainerRole::App),
        ],
        Some((2000, 3 * GI)),
    );
    let mut m2 = mm();
    m2.allocate_pod(&plrm, &hint(&[1], true)).unwrap();
    let mut fresh2 = mm();
    fresh2.restore(m2.state().clone()).unwrap();
    assert_eq!(fresh2.state(), m2.state());
}

/// A machine whose NUMA memory total moved since the checkpoint (a VM's balloon, memory
/// hotplug: issue 15) restores when the stored blocks still fit: the blocks stand, the tables
/// are today's totals charged with them. Blocks that no longer fit, or a state that does not
/// add up on the machine it was taken on, are still refused.
#[test]
fn restore_tolerates_memory_size_drift_that_keeps_every_block() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, 4 * GI)],
        None,
    );
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    let plrm = pod(
        "q",
        vec![],
        vec![
            gu("gu", ContainerRole::App, 1000, GI),
            bare("s", ContainerRole::App),
        ],
        Some((2000, 3 * GI)),
    );
    m.allocate_pod(&plrm, &hint(&[1], true)).unwrap();
    let saved = m.state().clone();

    let resized = |node0: u64| {
        let mut t = topo();
        t.numa[0].memory = node0;
        MemoryManager::new(&t, &config()).unwrap()
    };
    let mut smaller = resized(16 * GI - 300 * (1 << 20));
    smaller.restore(saved.clone()).unwrap();
    assert_eq!(smaller.state().containers, saved.containers);
    assert_eq!(smaller.state().pods, saved.pods);
    let n0 = &smaller.state().machine[&0].memory[MEMORY];
    assert_eq!(n0.total, 16 * GI - 300 * (1 << 20));
    assert_eq!(n0.free, n0.allocatable - 4 * GI);
    assert_eq!(n0.reserved, 4 * GI);
    assert_eq!(smaller.state().machine[&1], saved.machine[&1]);

    // 4Gi no longer fits node 0: the decisions are invalid, refused.
    let mut tiny = resized(4 * GI);
    assert_eq!(
        tiny.restore(saved.clone()),
        Err(MemoryError::MachineStateMismatch)
    );
    assert_eq!(tiny.state(), resized(4 * GI).state(), "nothing changed");

    // Inconsistent on its own machine: refused whatever the size.
    let mut bad = saved.clone();
    bad.machine
        .get_mut(&0)
        .unwrap()
        .memory
        .get_mut(MEMORY)
        .unwrap()
        .free -= GI;
    let mut bigger = resized(20 * GI);
    assert_eq!(bigger.restore(bad), Err(MemoryError::MachineStateMismatch));
}

/// kubelet `Allocate`: a container with no memory or hugepage request (a non-eligible container
/// of a pod-level-resources pod, allocated container by container) is skipped; the pod is
/// admitted (the tutorial's container-scope pod under the Static policy).
#[test]
fn a_container_without_memory_requests_is_skipped() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![
            gu("gu", ContainerRole::App, 1000, GI),
            bare("shared", ContainerRole::App),
        ],
        Some((2000, 2 * GI)),
    );
    let none = TopologyHint {
        affinity: None,
        preferred: false,
    };
    m.allocate(&p, &p.containers[1], &none).unwrap();
    assert_eq!(m.container_blocks("p", "shared"), None);
    assert!(m.container_hints(&p, &p.containers[1]).is_empty());
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    assert_eq!(m.container_blocks("p", "gu").unwrap()[0].size, GI);
}

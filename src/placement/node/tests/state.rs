//! Config errors, CPUs held by others, snapshots and restore, CRI formatting helpers.

use super::*;

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

#[test]
fn static_policy_needs_reserved_cpus() {
    let mut c = static_config(TopologyPolicy::None, TopologyScope::Container);
    c.reserved_cpus = ReservedCpus::Count { milli: 0 };
    assert_eq!(
        Node::new(dual_socket_ht(), c).unwrap_err(),
        NodeError::NoReservedCpus
    );
    let mut c = static_config(TopologyPolicy::None, TopologyScope::Container);
    c.reserved_cpus = ReservedCpus::Count { milli: 1500 };
    assert_eq!(
        node(c).reserved_cpus(),
        cpus("0,6"),
        "ceil(1500m) = 2 CPUs, one whole core"
    );
}

#[test]
fn restore_is_validated_and_atomic() {
    let config = with_memory(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    let mut n = node(config.clone());
    let p = pod(
        "p",
        vec![],
        vec![gu("a", ContainerRole::App, 2000, 2 * GI)],
        None,
    );
    n.admit(&p).unwrap();
    let good = n.snapshot();
    let mut json: serde_json::Value = serde_json::to_value(&good).unwrap();
    // Corrupt the memory part: the CPU part alone would restore fine.
    json["memory"]["machine"]["0"]["memory"]["memory"]["free"] = serde_json::json!(1);
    let bad: NodeSnapshot = serde_json::from_value(json).unwrap();
    let mut other = node(config);
    let before = other.snapshot();
    let err = other.restore(bad).unwrap_err();
    assert!(
        err.to_string().starts_with("memory_manager_state: "),
        "{err}"
    );
    assert_eq!(other.snapshot(), before);
    other.restore(good).unwrap();
    assert_eq!(
        other.container("p", "a").unwrap().cpuset_mems(),
        n.container("p", "a").unwrap().cpuset_mems()
    );
}

#[test]
fn cpuset_mems_is_a_plain_sorted_list() {
    let c = ContainerPlacement {
        name: "c".into(),
        role: ContainerRole::App,
        cpus: CpuSet::new(),
        exclusive: false,
        isolation: Isolation::Host,
        cpu_quota: CpuQuota::Keep,
        memory_nodes: Some(NumaMask::from_ids([3, 0, 1])),
        memory: vec![],
        devices: Default::default(),
        hint: None,
    };
    assert_eq!(c.cpuset_mems().as_deref(), Some("0,1,3"));
    assert_eq!(
        ContainerPlacement {
            memory_nodes: None,
            ..c
        }
        .cpuset_mems(),
        None
    );
    assert_eq!(CpuQuota::Unlimited.apply(50_000), -1);
    assert_eq!(CpuQuota::Keep.apply(50_000), 50_000);
}

/// The kubelet's `none` CPU policy keeps no reserved set and an empty default set (its state is
/// never initialised): containers get no cpuset and run wherever their cgroup lets them.
#[test]
fn policy_none_has_no_reserved_allocatable_or_shared_cpus() {
    let mut c = static_config(TopologyPolicy::None, TopologyScope::Container);
    c.cpu_policy = CpuPolicy::None;
    let mut n = node(c);
    assert_eq!(n.reserved_cpus(), CpuSet::new());
    assert_eq!(n.allocatable_cpus(), CpuSet::new());
    assert_eq!(n.shared_cpus(), CpuSet::new());
    assert_eq!(n.unpinned_cpus(), cpus("0-11"));
    let p = pod(
        "g",
        vec![],
        vec![gu("a", ContainerRole::App, 2000, GI)],
        None,
    );
    let placed = n.admit(&p).unwrap();
    assert_eq!(placed.containers[0].cpus, CpuSet::new());
    assert_eq!(placed.containers[0].isolation, Isolation::Host);
    // Nothing to hold CPUs from: marking them unavailable changes nothing.
    n.mark_unavailable(&cpus("3")).unwrap();
    assert_eq!(n.unavailable_cpus(), CpuSet::new());
    let s = node(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    assert_eq!(s.allocatable_cpus(), cpus("1-11"));
}

#[test]
fn a_pod_admitted_without_containers_can_be_removed_and_admitted_again() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    )));
    n.admit(&pod("p", vec![], vec![], Some((4000, 4 * GI))))
        .unwrap();
    n.remove_pod("p");
    assert!(n.pods().is_empty(), "record left behind");
    let with_app = pod(
        "p",
        vec![],
        vec![gu("main", ContainerRole::App, 2000, 2 * GI)],
        Some((4000, 4 * GI)),
    );
    n.admit(&with_app).unwrap();
    let main = n.container("p", "main").expect("the new spec was admitted");
    assert!(main.exclusive && main.cpus.len() == 2, "{main:?}");
}

/// A rejected admission gives back what the pod got as kubelet v1.37.2 does (its stale-state
/// sweep removes the refused pod's containers through the policy's `RemoveContainer`), also when
/// the pod's memory was charged to a multi-NUMA group another pod already uses: charging takes
/// from the group's nodes lowest first where memory is free, giving back returns it lowest first
/// where memory is reserved — not always the node it came from. The node decides as before.
#[test]
fn rejected_admission_in_a_shared_memory_group_gives_back_as_the_kubelet_does() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    )));
    // 10Gi spans both nodes (7Gi allocatable each): node 0 full, node 1 with 3Gi charged.
    let wide = pod(
        "wide",
        vec![],
        vec![gu("big", ContainerRole::App, 2000, 10 * GI)],
        None,
    );
    n.admit(&wide).unwrap();
    let before = n.snapshot();
    // "a" (1Gi) lands in the same group, on node 1; "b" asks for more CPUs than exist.
    let failing = pod(
        "failing",
        vec![],
        vec![
            gu("a", ContainerRole::App, 1000, GI),
            gu("b", ContainerRole::App, 20_000, GI),
        ],
        None,
    );
    assert!(n.admit(&failing).is_err());
    let free = |n: &Node, id: u32| n.memory_manager().state().machine[&id].memory["memory"].free;
    assert_eq!(
        (free(&n, 0), free(&n, 1)),
        (GI, 3 * GI),
        "node 1's gigabyte went to node 0"
    );
    let mut after = n.snapshot();
    after.memory.machine = before.memory.machine.clone();
    assert_eq!(after, before, "everything else is as it was");
    // And the node still decides as before: the same pod without "b" gets the same place.
    let mut fresh = node(with_memory(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    )));
    fresh.admit(&wide).unwrap();
    let alone = pod(
        "alone",
        vec![],
        vec![gu("a", ContainerRole::App, 1000, GI)],
        None,
    );
    assert_eq!(
        n.admit(&alone).unwrap().containers,
        fresh.admit(&alone).unwrap().containers
    );
}

/// Every free CPU can be held by others (the shared pool then is empty), and giving them back
/// restores the pool.
#[test]
fn all_free_cpus_can_be_marked_unavailable_and_released() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    let free = n.shared_cpus().difference(&n.reserved_cpus());
    n.mark_unavailable(&free).unwrap();
    assert_eq!(n.unavailable_cpus(), free);
    assert!(n.shared_cpus().is_subset(&n.reserved_cpus()));
    n.release_unavailable(&free);
    assert!(n.unavailable_cpus().is_empty());
    assert_eq!(n.shared_cpus().difference(&n.reserved_cpus()), free);
}

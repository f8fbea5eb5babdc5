//! Classic pods (no pod-level resources): exclusive CPUs, policies, rollback.

use super::*;

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

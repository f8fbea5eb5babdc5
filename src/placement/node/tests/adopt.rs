//! `Node::adopt`: a pod put back where it runs is the pod admission gave, and what cannot be
//! where it was found is refused without changing anything.

use super::*;

fn mixed() -> PodSpec {
    pod(
        "mixed",
        vec![],
        vec![
            gu("gu-1", ContainerRole::App, 1000, GI),
            gu("gu-2", ContainerRole::App, 1000, GI),
            bare("ngu"),
        ],
        Some((3000, 3 * GI)),
    )
}

/// What recovery reads from the runtime for an admitted pod: slices, pool CPUs, mems.
fn found_from(n: &Node, uid: &str) -> Found {
    let placement = n.placement(uid).unwrap();
    let mut found = Found::default();
    for c in &placement.containers {
        if c.exclusive {
            found.exclusive.insert(c.name.clone(), c.cpus.clone());
        } else if c.isolation == Isolation::Pod {
            found.budget = found.budget.union(&c.cpus);
        }
        if let Some(mask) = c.memory_nodes {
            found.memory_nodes.insert(c.name.clone(), mask);
        }
    }
    found
}

fn pod_scope() -> Config {
    with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ))
}

#[test]
fn a_pod_found_where_admission_put_it_is_the_same_pod() {
    let mut admitted = node(pod_scope());
    let other = pod(
        "other",
        vec![],
        vec![gu("c", ContainerRole::App, 2000, GI)],
        None,
    );
    admitted.admit(&other).unwrap();
    admitted.admit(&mixed()).unwrap();

    let mut adopted = node(pod_scope());
    adopted
        .adopt(&other, &found_from(&admitted, "other"))
        .unwrap();
    adopted
        .adopt(&mixed(), &found_from(&admitted, "mixed"))
        .unwrap();
    assert_eq!(adopted.placement("mixed"), admitted.placement("mixed"));
    assert_eq!(adopted.placement("other"), admitted.placement("other"));
    assert_eq!(adopted.shared_cpus(), admitted.shared_cpus());
    assert_eq!(
        adopted.memory_manager().state(),
        admitted.memory_manager().state()
    );

    // Released by the kubelet's rules like any pod.
    adopted.remove_pod("mixed");
    admitted.remove_pod("mixed");
    assert_eq!(adopted.shared_cpus(), admitted.shared_cpus());
    assert_eq!(
        adopted.memory_manager().state(),
        admitted.memory_manager().state()
    );
}

/// Only the slices and part of the pool were found (a pool container not created yet): the
/// budget is completed from free CPUs on the same NUMA node; found CPUs never move.
#[test]
fn a_partly_found_budget_is_completed_near_it() {
    let mut n = node(pod_scope());
    let found = Found {
        exclusive: [
            ("gu-1".to_string(), cpus("3")),
            ("gu-2".to_string(), cpus("5")),
        ]
        .into(),
        budget: CpuSet::new(),
        memory_nodes: BTreeMap::new(),
    };
    n.adopt(&mixed(), &found).unwrap();
    let placement = n.placement("mixed").unwrap();
    let bubble = placement.cpus.unwrap();
    assert_eq!(bubble.len(), 3);
    assert!(cpus("3,5").is_subset(&bubble), "{bubble}");
    assert!(
        bubble.iter().all(|id| id % 2 == 1),
        "one NUMA node: {bubble}"
    );
    let ngu = placement
        .containers
        .iter()
        .find(|c| c.name == "ngu")
        .unwrap();
    assert_eq!(ngu.cpus, bubble.difference(&cpus("3,5")));
    assert_eq!(ngu.memory_nodes, Some(NumaMask::from_ids([1])));
}

#[test]
fn what_cannot_be_where_it_was_found_is_refused_and_changes_nothing() {
    let mut n = node(pod_scope());
    let held = pod(
        "held",
        vec![],
        vec![gu("c", ContainerRole::App, 1000, GI)],
        None,
    );
    n.adopt(
        &held,
        &Found {
            exclusive: [("c".to_string(), cpus("3"))].into(),
            ..Found::default()
        },
    )
    .unwrap();
    let before = n.snapshot();
    let cases = [
        // Another pod's slice.
        Found {
            exclusive: [
                ("gu-1".to_string(), cpus("3")),
                ("gu-2".to_string(), cpus("5")),
            ]
            .into(),
            ..Found::default()
        },
        // A slice the spec does not give (ngu shares the pool).
        Found {
            exclusive: [("ngu".to_string(), cpus("7"))].into(),
            ..Found::default()
        },
        // Two CPUs for a one-CPU container.
        Found {
            exclusive: [("gu-1".to_string(), cpus("5,7"))].into(),
            ..Found::default()
        },
        // A container the spec does not have.
        Found {
            exclusive: [("ghost".to_string(), cpus("9"))].into(),
            ..Found::default()
        },
        // More CPUs in the pool than the budget has.
        Found {
            budget: cpus("1,5,7,9"),
            ..Found::default()
        },
        // The reserved CPU.
        Found {
            budget: cpus("0"),
            ..Found::default()
        },
    ];
    for found in cases {
        let err = n.adopt(&mixed(), &found).unwrap_err();
        assert!(matches!(err, AdoptError::Cpu(_)), "{found:?}: {err}");
        assert_eq!(n.snapshot(), before, "{found:?}: {err}");
    }
    assert!(matches!(
        n.adopt(&held, &Found::default()),
        Err(AdoptError::AlreadyAdmitted(_))
    ));
}

/// A snapshot that cannot be restored as a whole is re-adopted pod by pod.
#[test]
fn a_snapshot_readopts_pod_by_pod() {
    let mut admitted = node(pod_scope());
    admitted.admit(&mixed()).unwrap();
    admitted
        .admit(&pod(
            "c",
            vec![],
            vec![gu("c", ContainerRole::App, 2000, GI)],
            None,
        ))
        .unwrap();
    let mut adopted = node(pod_scope());
    for (spec, found) in admitted.snapshot().admitted() {
        adopted.adopt(&spec, &found).unwrap();
    }
    assert_eq!(adopted.snapshot(), admitted.snapshot());
}

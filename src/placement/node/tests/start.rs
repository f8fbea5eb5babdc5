//! Containers starting: the Memory Manager's `AddContainer` gives back the regular init
//! containers' memory, so a later pod fits that would not before.

use super::*;

/// 8Gi nodes with 1Gi reserved: 7Gi allocatable each. A pod whose init container needs 6Gi
/// holds 6Gi of node 1 until its app (1Gi) starts; a second 6Gi pod then fits there.
#[test]
fn a_started_app_frees_its_init_containers_memory_for_the_next_pod() {
    let config = with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    let first = pod(
        "first",
        vec![gu("init", ContainerRole::Init, 1000, 6 * GI)],
        vec![gu("app", ContainerRole::App, 1000, GI)],
        None,
    );
    let second = |uid: &str| {
        pod(
            uid,
            vec![],
            vec![gu("app", ContainerRole::App, 1000, 6 * GI)],
            None,
        )
    };
    // Without starts: node 0 takes one 6Gi pod, node 1 holds the first pod's 6Gi, the third
    // pod has nowhere to go.
    let mut n = node(config.clone());
    n.admit(&first).unwrap();
    n.admit(&second("a")).unwrap();
    assert!(n.admit(&second("b")).is_err());

    let mut n = node(config);
    let placed = n.admit(&first).unwrap();
    let mems = placed.containers[1].memory_nodes;
    assert!(n.start_container("first", "init"));
    assert!(n.start_container("first", "app"));
    assert_eq!(n.container("first", "init").unwrap().memory_nodes, None);
    assert_eq!(n.container("first", "app").unwrap().memory_nodes, mems);
    n.admit(&second("a")).unwrap();
    n.admit(&second("b")).unwrap();
    assert!(!n.start_container("first", "nope"));
    assert!(!n.start_container("nobody", "app"));
}

/// A pod is released in start order, and what it got comes back exactly.
#[test]
fn a_started_pod_is_released_exactly() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Pod,
    )));
    let fresh = n.snapshot();
    let p = pod(
        "p",
        vec![gu("init", ContainerRole::Init, 2000, 3 * GI)],
        vec![
            gu("a", ContainerRole::App, 1000, GI),
            gu("b", ContainerRole::App, 1000, GI),
        ],
        None,
    );
    n.admit(&p).unwrap();
    for c in ["init", "b", "a"] {
        assert!(n.start_container("p", c));
    }
    n.remove_pod("p");
    assert_eq!(n.snapshot(), fresh);
}

//! DRA claims in the decision: a claim's device node moves the pod budget (pod scope) or the
//! container's exclusive CPUs (container scope) and memory there; refusals name the claim under
//! `single-numa-node` and `restricted`; `best-effort` never refuses for a claim, `none` ignores
//! it; devices without a node and facts about another pod change nothing.

use std::collections::BTreeSet;

use super::*;
use crate::placement::device::claims::{Claim, ClaimFacts};
use crate::placement::device::Device;

fn claim(name: &str, containers: &[&str], nodes: &[&[u32]]) -> Claim {
    Claim {
        name: format!("default/{name}"),
        containers: containers.iter().map(|c| c.to_string()).collect(),
        devices: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Device {
                id: format!("gpu.example.com/node-a/gpu{i}"),
                numa_nodes: n.to_vec(),
            })
            .collect(),
    }
}

fn facts(uid: &str, claims: Vec<Claim>) -> ClaimFacts {
    ClaimFacts {
        pod_uid: uid.into(),
        claims,
    }
}

fn numa_of(n: &Node, set: &CpuSet) -> BTreeSet<u32> {
    set.iter()
        .filter_map(|cpu| n.topology().cpus.iter().find(|c| c.id == cpu))
        .map(|c| c.numa)
        .collect()
}

fn app(cpus: u64) -> ContainerSpec {
    gu("app", ContainerRole::App, cpus * 1000, GI)
}

/// 6 CPUs on node 1 (all of it) held by another pod: node 1 has no free CPU.
fn node_1_full(n: &mut Node) {
    let filler = pod("filler", vec![], vec![app(6)], None);
    let placed = n.admit(&filler).unwrap();
    assert_eq!(numa_of(n, &placed.containers[0].cpus), BTreeSet::from([1]));
}

#[test]
fn container_scope_exclusive_cpus_and_memory_follow_the_claim() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    )));
    let p = pod(
        "p",
        vec![],
        vec![app(2), gu("other", ContainerRole::App, 2000, GI)],
        None,
    );
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[1]])]));
    let placed = n.admit(&p).unwrap();
    let app = &placed.containers[0];
    assert_eq!(numa_of(&n, &app.cpus), BTreeSet::from([1]), "{}", app.cpus);
    assert_eq!(app.cpuset_mems().as_deref(), Some("1"));
    // The container that does not use the claim is placed as without it (node 0 first).
    let other = &placed.containers[1];
    assert_eq!(
        numa_of(&n, &other.cpus),
        BTreeSet::from([0]),
        "{}",
        other.cpus
    );
    assert_eq!(other.cpuset_mems().as_deref(), Some("0"));
}

#[test]
fn without_the_claim_the_same_pod_goes_to_node_0() {
    // The tests above and below can fail: node 0 is where this pod goes on its own.
    for scope in [TopologyScope::Container, TopologyScope::Pod] {
        let mut n = node(with_memory(static_config(
            TopologyPolicy::SingleNumaNode,
            scope,
        )));
        let placed = n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap();
        assert_eq!(numa_of(&n, &placed.containers[0].cpus), BTreeSet::from([0]));
    }
}

#[test]
fn pod_scope_containers_follow_the_claim() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    let p = pod(
        "p",
        vec![],
        vec![app(2), gu("other", ContainerRole::App, 1000, GI)],
        None,
    );
    // Pod scope: a claim counts for the whole pod, whichever container uses it.
    n.set_claims(facts("p", vec![claim("gpu", &["other"], &[&[1]])]));
    let placed = n.admit(&p).unwrap();
    for c in &placed.containers {
        assert_eq!(
            numa_of(&n, &c.cpus),
            BTreeSet::from([1]),
            "{}: {}",
            c.name,
            c.cpus
        );
        assert_eq!(c.cpuset_mems().as_deref(), Some("1"), "{}", c.name);
    }
}

#[test]
fn pod_scope_pod_budget_follows_the_claim() {
    let mut config = with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ));
    config.gates.pod_level_resources = true;
    config.gates.pod_level_resource_managers = true;
    let mut n = node(config);
    let p = pod("p", vec![], vec![bare("app")], Some((4000, 2 * GI)));
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[1]])]));
    let placed = n.admit(&p).unwrap();
    let bubble = placed.cpus.clone().expect("a pod budget");
    assert_eq!(numa_of(&n, &bubble), BTreeSet::from([1]), "{bubble}");
    assert!(
        !placed.memory.is_empty() && placed.memory.iter().all(|b| b.numa == vec![1]),
        "{:?}",
        placed.memory
    );
}

#[test]
fn a_claim_whose_node_cannot_hold_the_pod_is_refused_naming_the_claim() {
    for policy in [TopologyPolicy::SingleNumaNode, TopologyPolicy::Restricted] {
        for scope in [TopologyScope::Container, TopologyScope::Pod] {
            let mut n = node(with_memory(static_config(policy, scope)));
            node_1_full(&mut n);
            let before = n.snapshot();
            n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[1]])]));
            let err = n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap_err();
            assert_eq!(
                err.reason(),
                "TopologyAffinityError",
                "{policy:?} {scope:?}"
            );
            assert_eq!(
                err.to_string(),
                "Resources cannot be allocated with Topology locality: ResourceClaim default/gpu (devices on NUMA node 1)",
                "{policy:?} {scope:?}"
            );
            assert_eq!(n.snapshot(), before, "a refusal changes nothing");
            // Without the claim the pod fits on node 0.
            n.set_claims(ClaimFacts::default());
            n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap();
        }
    }
}

#[test]
fn best_effort_follows_the_claim_when_it_can_and_never_refuses_for_it() {
    for scope in [TopologyScope::Container, TopologyScope::Pod] {
        let mut n = node(with_memory(static_config(
            TopologyPolicy::BestEffort,
            scope,
        )));
        n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[1]])]));
        let placed = n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap();
        assert_eq!(numa_of(&n, &placed.containers[0].cpus), BTreeSet::from([1]));
        n.remove_pod("p");
        node_1_full(&mut n);
        n.set_claims(facts("q", vec![claim("gpu", &["app"], &[&[1]])]));
        let placed = n.admit(&pod("q", vec![], vec![app(2)], None)).unwrap();
        assert_eq!(numa_of(&n, &placed.containers[0].cpus), BTreeSet::from([0]));
    }
}

#[test]
fn policy_none_ignores_claims() {
    let mut n = node(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[1]])]));
    let placed = n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap();
    assert_eq!(numa_of(&n, &placed.containers[0].cpus), BTreeSet::from([0]));
}

#[test]
fn devices_without_a_node_and_other_pods_claims_place_nothing() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[]])]));
    let placed = n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap();
    assert_eq!(numa_of(&n, &placed.containers[0].cpus), BTreeSet::from([0]));
    n.set_claims(facts("someone-else", vec![claim("gpu", &["app"], &[&[1]])]));
    let placed = n.admit(&pod("q", vec![], vec![app(2)], None)).unwrap();
    assert_eq!(numa_of(&n, &placed.containers[0].cpus), BTreeSet::from([0]));
}

#[test]
fn devices_on_two_nodes_refuse_single_numa_node_and_span_under_best_effort() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    n.set_claims(facts("p", vec![claim("gpus", &["app"], &[&[0], &[1]])]));
    let err = n.admit(&pod("p", vec![], vec![app(2)], None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Resources cannot be allocated with Topology locality: ResourceClaim default/gpus (devices on NUMA nodes 0,1)"
    );
}

#[test]
fn a_refusal_the_claim_does_not_cause_is_the_kubelets_own() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    // 7 CPUs fit on no single node, with or without the claim.
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[0]])]));
    let err = n.admit(&pod("p", vec![], vec![app(7)], None)).unwrap_err();
    assert_eq!(err, AdmissionError::TopologyAffinity);
}

#[test]
fn a_device_on_a_node_this_machine_lacks_refuses_under_single_numa_node() {
    // numa-shim's end-to-end test runs on a one-node host: a device on node 1 cannot be aligned.
    let one_node = Topology {
        cpus: (0..4)
            .map(|id| CpuInfo {
                id,
                core: id,
                socket: 0,
                die: 0,
                numa: 0,
                uncore: 0,
            })
            .collect(),
        numa: vec![NumaNode {
            id: 0,
            memory: 8 * GI,
            hugepages: BTreeMap::new(),
            distances: vec![10],
        }],
    };
    let config = static_config(TopologyPolicy::SingleNumaNode, TopologyScope::Container);
    let mut n = Node::new(one_node, config).unwrap();
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[1]])]));
    let err = n.admit(&pod("p", vec![], vec![app(1)], None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Resources cannot be allocated with Topology locality: ResourceClaim default/gpu (devices on NUMA node 1)"
    );
    n.set_claims(facts("p", vec![claim("gpu", &["app"], &[&[0]])]));
    let placed = n.admit(&pod("p", vec![], vec![app(1)], None)).unwrap();
    assert_eq!(placed.containers[0].cpus.to_string(), "1");
}

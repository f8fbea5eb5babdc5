//! In-place resize: unit cases on kubelet's dual-socket HT machine (CPU id mod 2 = NUMA node,
//! CPU 0 reserved) and property tests over random admit/start/resize/remove sequences.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::tests::{bare, cpus, gu, list, node, pod, static_config, with_memory, GI};
use super::*;
use crate::placement::config::{CpuPolicy, FeatureGates, ReservedCpus, TopologyScope};
use crate::placement::node::{Isolation, NodeSnapshot};
use crate::placement::{Config, ContainerSpec};
use crate::topology::{CpuInfo, NumaNode, Topology};

fn whole(milli: u64, mem: u64) -> Resources {
    Resources {
        requests: list(milli, mem),
        limits: list(milli, mem),
    }
}

fn numa(set: &CpuSet) -> Vec<u32> {
    let mut v: Vec<u32> = set.iter().map(|c| c % 2).collect();
    v.sort();
    v.dedup();
    v
}

fn container<'a>(
    p: &'a PodPlacement,
    name: &str,
) -> &'a crate::placement::node::ContainerPlacement {
    p.containers.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn grow_keeps_every_cpu_and_stays_on_the_node_of_the_hint() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    let p = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    let before = container(&n.admit(&p).unwrap(), "app").cpus.clone();
    let after = n.resize_container("a", "app", &whole(4000, GI)).unwrap();
    let grown = &container(&after, "app").cpus;
    assert_eq!(grown.len(), 4);
    assert!(before.is_subset(grown), "{before} not kept in {grown}");
    assert_eq!(numa(grown), numa(&before));
    assert!(n.shared_cpus().is_disjoint(grown));
    assert_eq!(n.shared_cpus().union(grown).len(), 12);
}

#[test]
fn shrink_gives_back_only_what_was_gained() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    let p = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    let promised = container(&n.admit(&p).unwrap(), "app").cpus.clone();
    let shared = n.shared_cpus();
    n.resize_container("a", "app", &whole(4000, GI)).unwrap();
    let back = n.resize_container("a", "app", &whole(2000, GI)).unwrap();
    assert_eq!(container(&back, "app").cpus, promised);
    assert_eq!(n.shared_cpus(), shared);

    let snap = n.snapshot();
    let err = n
        .resize_container("a", "app", &whole(1000, GI))
        .unwrap_err();
    assert!(
        matches!(err, ResizeError::BelowPromised { requested: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("it keeps the 2 CPUs it was admitted with"),
        "{err}"
    );
    assert_eq!(n.snapshot(), snap);
}

#[test]
fn infeasible_grow_is_refused_with_the_free_cpus_of_the_node_and_changes_nothing() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    // NUMA node 1 holds 1,3,5,7,9,11: take 4 of them, leave 2 free.
    let a = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    let got = container(&n.admit(&a).unwrap(), "app").cpus.clone();
    let node_of_a = numa(&got)[0];
    let filler = pod(
        "b",
        vec![],
        vec![gu("app", ContainerRole::App, 3000, GI)],
        None,
    );
    let fill = container(&n.admit(&filler).unwrap(), "app").cpus.clone();
    let snap = n.snapshot();
    let free_there = n
        .shared_cpus()
        .iter()
        .filter(|c| c % 2 == node_of_a && *c != 0)
        .count();
    let ask = 2 + free_there + 1;
    let err = n
        .resize_container("a", "app", &whole(ask as u64 * 1000, GI))
        .unwrap_err();
    assert!(err.is_exhausted());
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "not enough cpus available to satisfy request: requested={}, available={free_there}",
            ask - 2
        )),
        "{msg} (filler {fill})"
    );
    assert!(msg.contains(&format!("NUMA node(s) {node_of_a}")), "{msg}");
    assert_eq!(n.snapshot(), snap, "refused resize changed the node");
    assert_eq!(container(&n.placement("a").unwrap(), "app").cpus, got);
}

#[test]
fn best_effort_grow_spills_to_other_nodes_after_its_own() {
    let mut n = node(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    let a = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 4000, GI)],
        None,
    );
    let got = container(&n.admit(&a).unwrap(), "app").cpus.clone();
    let grown = n.resize_container("a", "app", &whole(8000, GI)).unwrap();
    let grown = &container(&grown, "app").cpus;
    assert!(got.is_subset(grown));
    assert_eq!(grown.len(), 8);
    // 5 (or 6 minus reserved) CPUs of its own node first.
    let own = numa(&got)[0];
    let on_own = grown.iter().filter(|c| c % 2 == own).count();
    assert_eq!(on_own, if own == 0 { 5 } else { 6 });
}

#[test]
fn shared_container_moves_to_exclusive_and_back() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    ));
    let p = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 1500, GI)],
        None,
    );
    let placed = n.admit(&p).unwrap();
    assert!(!container(&placed, "app").exclusive);
    let shared = n.shared_cpus();
    let ex = n.resize_container("a", "app", &whole(2000, GI)).unwrap();
    let c = container(&ex, "app");
    assert!(c.exclusive);
    assert_eq!(c.cpus.len(), 2);
    assert_eq!(numa(&c.cpus).len(), 1);
    assert_eq!(n.shared_cpus(), shared.difference(&c.cpus));
    // It started shared: nothing was promised, so it may go back.
    let back = n.resize_container("a", "app", &whole(1500, GI)).unwrap();
    assert!(!container(&back, "app").exclusive);
    assert_eq!(n.shared_cpus(), shared);
}

#[test]
fn exclusive_container_cannot_go_shared() {
    let mut n = node(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    let p = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    n.admit(&p).unwrap();
    let snap = n.snapshot();
    let err = n
        .resize_container("a", "app", &whole(1500, GI))
        .unwrap_err();
    assert!(
        matches!(err, ResizeError::BelowPromised { requested: 0, .. }),
        "{err}"
    );
    assert_eq!(n.snapshot(), snap);
}

#[test]
fn qos_change_unknown_targets_and_init_containers_are_refused() {
    let mut n = node(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    let p = pod(
        "a",
        vec![gu("init", ContainerRole::Init, 1000, GI)],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    n.admit(&p).unwrap();
    let burst = Resources {
        requests: list(1000, GI),
        limits: list(2000, GI),
    };
    assert!(matches!(
        n.resize_container("a", "app", &burst),
        Err(ResizeError::QosChange { .. })
    ));
    assert!(matches!(
        n.resize_container("a", "init", &whole(2000, GI)),
        Err(ResizeError::InitContainer(_))
    ));
    assert!(matches!(
        n.resize_container("a", "nope", &whole(2000, GI)),
        Err(ResizeError::UnknownContainer { .. })
    ));
    assert!(matches!(
        n.resize_container("b", "app", &whole(2000, GI)),
        Err(ResizeError::UnknownPod(_))
    ));
}

fn plrm_pod(budget: u64) -> PodSpec {
    pod(
        "p",
        vec![],
        vec![gu("ex", ContainerRole::App, 1000, GI), bare("shared")],
        Some((budget * 1000, 3 * GI)),
    )
}

/// The bytes of memory (all blocks) a container holds.
fn held(c: &crate::placement::node::ContainerPlacement) -> u64 {
    c.memory.iter().map(|b| b.size).sum()
}

fn assert_pool(p: &PodPlacement) {
    let bubble = p.cpus.clone().unwrap();
    let slices = p
        .containers
        .iter()
        .filter(|c| c.exclusive)
        .fold(CpuSet::new(), |a, c| a.union(&c.cpus));
    for c in p
        .containers
        .iter()
        .filter(|c| c.isolation == Isolation::Pod)
    {
        assert_eq!(c.cpus, bubble.difference(&slices), "pool of {}", c.name);
    }
}

#[test]
fn plrm_container_grows_from_the_pod_pool() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ));
    let placed = n.admit(&plrm_pod(4)).unwrap();
    let shared = n.shared_cpus();
    let slice = container(&placed, "ex").cpus.clone();
    let after = n.resize_container("p", "ex", &whole(2000, GI)).unwrap();
    assert_eq!(after.cpus, placed.cpus, "budget unchanged");
    assert!(slice.is_subset(&container(&after, "ex").cpus));
    assert_eq!(container(&after, "shared").cpus.len(), 2);
    assert_pool(&after);
    assert_eq!(n.shared_cpus(), shared);
    // The pool would be empty with a shared container on it.
    let snap = n.snapshot();
    let err = n.resize_container("p", "ex", &whole(4000, GI)).unwrap_err();
    assert!(
        matches!(
            err,
            ResizeError::Admission(AdmissionError::EmptyPodSharedPool { .. })
        ),
        "{err}"
    );
    assert_eq!(n.snapshot(), snap);
}

#[test]
fn plrm_budget_grows_and_shrinks_by_its_pool_keeping_slices() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ));
    let placed = n.admit(&plrm_pod(3)).unwrap();
    let bubble = placed.cpus.clone().unwrap();
    let slice = container(&placed, "ex").cpus.clone();
    let shared = n.shared_cpus();
    let grown = n.resize_pod("p", &whole(5000, 3 * GI)).unwrap();
    let big = grown.cpus.clone().unwrap();
    assert_eq!(big.len(), 5);
    assert!(bubble.is_subset(&big));
    assert_eq!(numa(&big), numa(&bubble));
    assert_eq!(container(&grown, "ex").cpus, slice);
    assert_eq!(container(&grown, "shared").cpus.len(), 4);
    assert_pool(&grown);
    assert_eq!(n.shared_cpus(), shared.difference(&big));

    let back = n.resize_pod("p", &whole(3000, 3 * GI)).unwrap();
    assert_eq!(back.cpus, Some(bubble));
    assert_eq!(container(&back, "ex").cpus, slice);
    assert_pool(&back);
    assert_eq!(n.shared_cpus(), shared);

    let snap = n.snapshot();
    let err = n.resize_pod("p", &whole(2000, 3 * GI)).unwrap_err();
    assert!(
        matches!(err, ResizeError::BelowPromised { requested: 2, .. }),
        "{err}"
    );
    let err = n.resize_pod("p", &whole(3500, 3 * GI)).unwrap_err();
    assert!(
        matches!(err, ResizeError::FractionalBudget { milli: 3500, .. }),
        "{err}"
    );
    // single-numa-node: a node has 6 CPUs (5 on node 0).
    let err = n.resize_pod("p", &whole(8000, 3 * GI)).unwrap_err();
    assert!(err.is_exhausted(), "{err}");
    assert_eq!(n.snapshot(), snap);
}

/// A pod-level pod with a fractional budget (`milli`, no bubble: the node shared pool).
fn fractional_plrm_pod(milli: u64) -> PodSpec {
    pod(
        "p",
        vec![],
        vec![gu("ex", ContainerRole::App, 1000, GI), bare("shared")],
        Some((milli, 3 * GI)),
    )
}

#[test]
fn a_fractional_budget_grown_whole_gets_a_pod_pool_and_can_go_back() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    let placed = n.admit(&fractional_plrm_pod(1500)).unwrap();
    assert_eq!(placed.cpus, None, "a fractional budget has no bubble");
    assert!(placed.containers.iter().all(|c| !c.exclusive));
    let shared = n.shared_cpus();
    let memory = block_nodes(&placed.memory);

    let grown = n.resize_pod("p", &whole(3000, 3 * GI)).unwrap();
    let bubble = grown.cpus.clone().expect("a pod budget after the grow");
    assert_eq!(bubble.len(), 3);
    assert_eq!(numa(&bubble).len(), 1, "single-numa-node: one node");
    assert_eq!(
        NumaMask::from_ids(numa(&bubble)),
        memory,
        "beside the pod's memory"
    );
    let ex = container(&grown, "ex");
    assert!(ex.exclusive && ex.cpus.len() == 1 && ex.cpus.is_subset(&bubble));
    assert_eq!(container(&grown, "shared").isolation, Isolation::Pod);
    assert_pool(&grown);
    assert_eq!(n.shared_cpus(), shared.difference(&bubble));

    // It was admitted without a bubble: it may go back to the node shared pool.
    let back = n.resize_pod("p", &whole(1500, 3 * GI)).unwrap();
    assert_eq!(back.cpus, None);
    assert!(back
        .containers
        .iter()
        .all(|c| !c.exclusive && c.cpus == shared));
    assert_eq!(n.shared_cpus(), shared);
    assert_eq!(back.memory, placed.memory, "memory untouched");
}

/// The bubble goes where the pod's memory is, even when a fresh hint would point elsewhere.
#[test]
fn a_fractional_budget_grown_whole_lands_beside_the_memory_it_holds() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    // Node 0 (7Gi allocatable) nearly full: the budget's 3Gi go to node 1.
    let filler = pod(
        "filler",
        vec![],
        vec![gu("app", ContainerRole::App, 1000, 5 * GI)],
        None,
    );
    n.admit(&filler).unwrap();
    let placed = n.admit(&fractional_plrm_pod(1500)).unwrap();
    assert_eq!(block_nodes(&placed.memory), NumaMask::from_ids([1]));
    // Node 0 free again: a new pod's hint would prefer it.
    n.remove_pod("filler");
    let grown = n.resize_pod("p", &whole(3000, 3 * GI)).unwrap();
    assert_eq!(numa(&grown.cpus.clone().unwrap()), vec![1]);
    assert_eq!(grown.memory, placed.memory);
    // More than any node holds: refused, naming where the memory is.
    n.resize_pod("p", &whole(1500, 3 * GI)).unwrap();
    let snap = n.snapshot();
    let err = n.resize_pod("p", &whole(7000, 3 * GI)).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("; its memory is on NUMA node(s) 1)"),
        "{err}"
    );
    assert_eq!(n.snapshot(), snap);
}

#[test]
fn a_budget_admitted_whole_stays_whole_one_admitted_fractional_may_go_back() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ));
    n.admit(&plrm_pod(3)).unwrap();
    let snap = n.snapshot();
    let err = n.resize_pod("p", &whole(2500, 3 * GI)).unwrap_err();
    assert!(
        matches!(err, ResizeError::FractionalBudget { milli: 2500, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("admitted with"), "{err}");
    assert_eq!(n.snapshot(), snap);

    // Admitted fractional, its containers on the node shared pool: none of them is promised a
    // slice of the bubble a resize gave the pod, so each may go back to the pool, and the whole
    // pod to the node shared pool.
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ));
    let shared = n.shared_cpus();
    n.admit(&fractional_plrm_pod(1500)).unwrap();
    n.resize_pod("p", &whole(4000, 3 * GI)).unwrap();
    let grown = n.resize_container("p", "ex", &whole(2000, GI)).unwrap();
    assert_eq!(container(&grown, "ex").cpus.len(), 2);
    let pooled = n
        .resize_container("p", "ex", &Resources::default())
        .unwrap();
    assert_eq!(container(&pooled, "ex").isolation, Isolation::Pod);
    n.resize_container("p", "ex", &whole(1000, GI)).unwrap();
    let back = n.resize_pod("p", &whole(1500, 3 * GI)).unwrap();
    assert!(back
        .containers
        .iter()
        .all(|c| !c.exclusive && c.cpus == shared));
}

#[test]
fn a_fractional_budget_that_no_numa_node_can_hold_whole_is_refused_with_the_free_cpus() {
    let mut n = node(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    ));
    n.admit(&fractional_plrm_pod(2500)).unwrap();
    let snap = n.snapshot();
    // 5 free on node 0, 6 on node 1.
    let err = n.resize_pod("p", &whole(7000, 3 * GI)).unwrap_err();
    assert!(err.is_exhausted(), "{err}");
    let text = err.to_string();
    assert!(text.contains("requested=7"), "{text}");
    assert!(
        text.contains("NUMA node 1: free cpus \"1,3,5,7,9,11\""),
        "{text}"
    );
    assert_eq!(n.snapshot(), snap);
    // Fits one node: admitted there, as an admission would place it.
    let grown = n.resize_pod("p", &whole(6000, 3 * GI)).unwrap();
    assert_eq!(grown.cpus, Some(cpus("1,3,5,7,9,11")));
}

#[test]
fn static_memory_grows_only_where_the_node_holds_it() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Container,
    )));
    let p = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    let placed = n.admit(&p).unwrap();
    let nodes = container(&placed, "app").memory_nodes;
    let grown = n
        .resize_container("a", "app", &whole(2000, 4 * GI))
        .unwrap();
    let c = container(&grown, "app");
    assert_eq!(c.memory_nodes, nodes);
    assert_eq!(c.memory.iter().map(|b| b.size).sum::<u64>(), 4 * GI);
    let snap = n.snapshot();
    // 7Gi allocatable per node.
    let err = n
        .resize_container("a", "app", &whole(2000, 8 * GI))
        .unwrap_err();
    assert!(err.is_exhausted(), "{err}");
    assert_eq!(n.snapshot(), snap);
}

/// A pod-level budget's memory under the Static Memory Manager: re-allocated on the NUMA node
/// the pod's memory bubble has (7Gi allocatable per node): grown and shrunk there, each
/// container's blocks with it, and refused (nothing changed) once the node cannot hold it.
#[test]
fn static_memory_of_a_pod_budget_grows_only_where_its_node_holds_it() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    let placed = n.admit(&plrm_pod(3)).unwrap();
    let nodes = |p: &PodPlacement| {
        let mut v: Vec<u32> = p.memory.iter().flat_map(|b| b.numa.clone()).collect();
        v.dedup();
        v
    };
    let total = |p: &PodPlacement| {
        p.memory
            .iter()
            .filter(|b| b.resource == crate::placement::memory::MEMORY)
            .map(|b| b.size)
            .sum::<u64>()
    };
    let before = nodes(&placed);
    assert_eq!(before.len(), 1, "{placed:?}");
    assert_eq!(total(&placed), 3 * GI);

    let grown = n.resize_pod("p", &whole(3000, 5 * GI)).unwrap();
    assert_eq!(nodes(&grown), before);
    assert_eq!(total(&grown), 5 * GI);
    // The exclusive container keeps its own 1Gi; the shared one has the pool, 4Gi now.
    assert_eq!(held(container(&grown, "ex")), GI);
    assert_eq!(held(container(&grown, "shared")), 4 * GI);
    assert_eq!(
        container(&grown, "shared").memory_nodes,
        container(&placed, "shared").memory_nodes
    );

    let snap = n.snapshot();
    let err = n.resize_pod("p", &whole(3000, 8 * GI)).unwrap_err();
    assert!(err.is_exhausted(), "{err}");
    assert!(err.to_string().contains("pod budget"), "{err}");
    assert_eq!(n.snapshot(), snap, "nothing changed");

    let back = n.resize_pod("p", &whole(3000, 2 * GI)).unwrap();
    assert_eq!(nodes(&back), before);
    assert_eq!(total(&back), 2 * GI);
    assert_eq!(held(container(&back, "shared")), GI);
}

/// A container of a pod-level pod under the pod scope: its memory is a share of the pod's
/// bubble, so a resize of its memory re-partitions the bubble (its own blocks, the pool of the
/// shared containers); the bubble stays, and a share that leaves the pool nothing is refused.
#[test]
fn static_memory_of_a_container_in_a_pod_budget_repartitions_the_bubble() {
    let mut n = node(with_memory(static_config(
        TopologyPolicy::SingleNumaNode,
        TopologyScope::Pod,
    )));
    let placed = n.admit(&plrm_pod(3)).unwrap();
    assert_eq!(held(container(&placed, "ex")), GI);
    assert_eq!(held(container(&placed, "shared")), 2 * GI);
    let grown = n.resize_container("p", "ex", &whole(1000, 2 * GI)).unwrap();
    assert_eq!(held(container(&grown, "ex")), 2 * GI);
    assert_eq!(held(container(&grown, "shared")), GI);
    assert_eq!(grown.memory, placed.memory, "the bubble stays");
    assert_eq!(
        container(&grown, "ex").memory_nodes,
        container(&placed, "ex").memory_nodes
    );
    let snap = n.snapshot();
    assert!(n.resize_container("p", "ex", &whole(1000, 3 * GI)).is_err());
    assert_eq!(n.snapshot(), snap, "nothing changed");
}

#[test]
fn promised_cpus_survive_a_checkpoint() {
    let mut n = node(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    let p = pod(
        "a",
        vec![],
        vec![gu("app", ContainerRole::App, 2000, GI)],
        None,
    );
    n.admit(&p).unwrap();
    n.resize_container("a", "app", &whole(3000, GI)).unwrap();
    let json = serde_json::to_string(&n.snapshot()).unwrap();
    let mut m = node(static_config(
        TopologyPolicy::None,
        TopologyScope::Container,
    ));
    m.restore(serde_json::from_str::<NodeSnapshot>(&json).unwrap())
        .unwrap();
    assert!(matches!(
        m.resize_container("a", "app", &whole(1000, GI)),
        Err(ResizeError::BelowPromised { .. })
    ));
    assert_eq!(m.snapshot(), n.snapshot());
    let _ = cpus("1");
}

/// A bubble a resize gave a fractional budget is the pod's after a restart from the
/// checkpoint, and may still be given up (nothing of it was promised).
#[test]
fn a_bubble_made_by_a_resize_survives_a_checkpoint() {
    let config = || {
        with_memory(static_config(
            TopologyPolicy::SingleNumaNode,
            TopologyScope::Pod,
        ))
    };
    let mut n = node(config());
    n.admit(&fractional_plrm_pod(1500)).unwrap();
    let grown = n.resize_pod("p", &whole(3000, 3 * GI)).unwrap();
    let json = serde_json::to_string(&n.snapshot()).unwrap();
    let mut m = node(config());
    m.restore(serde_json::from_str::<NodeSnapshot>(&json).unwrap())
        .unwrap();
    assert_eq!(m.snapshot(), n.snapshot());
    assert_eq!(m.placement("p").unwrap().cpus, grown.cpus);
    let shared = m.shared_cpus().union(grown.cpus.as_ref().unwrap());
    let back = m.resize_pod("p", &whole(1500, 3 * GI)).unwrap();
    assert_eq!(back.cpus, None);
    assert_eq!(m.shared_cpus(), shared);
}

// ---------------------------------------------------------------- properties

fn machine(numa_count: u32, cores_per_numa: u32, threads: u32) -> Topology {
    let cores = numa_count * cores_per_numa;
    let mut all = Vec::new();
    for t in 0..threads {
        for core in 0..cores {
            all.push(CpuInfo {
                id: t * cores + core,
                core,
                socket: core / cores_per_numa,
                die: 0,
                numa: core / cores_per_numa,
                uncore: 0,
            });
        }
    }
    all.sort_by_key(|c| c.id);
    Topology {
        cpus: all,
        numa: (0..numa_count)
            .map(|id| NumaNode {
                id,
                memory: 8 * GI,
                hugepages: BTreeMap::new(),
                distances: (0..numa_count)
                    .map(|j| if j == id { 10 } else { 20 })
                    .collect(),
            })
            .collect(),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Pod-level CPUs (0 = none), container CPU millis (0 = bare; 1500 = shared Guaranteed).
    Admit(u64, Vec<u64>),
    Start(usize),
    /// Pod, container, CPU millis, memory GiB.
    Resize(usize, usize, u64, u64),
    /// Pod, container, change of its exclusive count (grow/shrink chains).
    Step(usize, usize, i8),
    ResizePod(usize, u64),
    Remove(usize),
    RemoveContainer(usize, usize),
}

/// A pod-level CPU budget in millicores (0: none): whole, or fractional (no bubble).
fn budget() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        (1u64..=8).prop_map(|n| n * 1000),
        Just(1500u64),
        Just(2500u64)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let milli = prop_oneof![Just(0u64), Just(1500u64), (1u64..=4).prop_map(|n| n * 1000)];
    prop_oneof![
        3 => (budget(), prop::collection::vec(milli.clone(), 1..=3))
            .prop_map(|(p, c)| Op::Admit(p, c)),
        2 => (0usize..6).prop_map(Op::Start),
        5 => (0usize..6, 0usize..3, milli, prop_oneof![3 => Just(1u64), 1 => 2u64..=8])
            .prop_map(|(p, c, m, g)| Op::Resize(p, c, m, g)),
        4 => (0usize..6, 0usize..3, prop_oneof![-2i8..=-1, 1i8..=2]).prop_map(|(p, c, d)| Op::Step(p, c, d)),
        2 => (0usize..6, budget().prop_filter("a budget", |&m| m > 0)).prop_map(|(p, m)| Op::ResizePod(p, m)),
        1 => (0usize..6).prop_map(Op::Remove),
        1 => (0usize..6, 0usize..3).prop_map(|(p, c)| Op::RemoveContainer(p, c)),
    ]
}

fn resources_for(milli: u64, pod_level: bool, mem: u64) -> Resources {
    match (milli, pod_level) {
        (0, true) => Resources::default(),
        (0, false) => whole(500, mem),
        (m, _) => whole(m, mem),
    }
}

fn build(i: usize, pod_milli: u64, millis: &[u64]) -> PodSpec {
    let apps = millis
        .iter()
        .enumerate()
        .map(|(j, &m)| {
            let name = format!("c{j}");
            match resources_for(m, pod_milli > 0, GI) {
                r if r == Resources::default() => bare(&name),
                r => ContainerSpec {
                    name,
                    role: ContainerRole::App,
                    resources: r,
                },
            }
        })
        .collect();
    let level = (pod_milli > 0).then_some((pod_milli, 4 * GI));
    pod(&format!("pod-{i}"), vec![], apps, level)
}

fn check(
    n: &Node,
    promised: &BTreeMap<(String, String), CpuSet>,
    trimmed: &std::collections::BTreeSet<String>,
) -> Result<(), TestCaseError> {
    let all: CpuSet = n.topology().cpus.iter().map(|c| c.id).collect();
    let mut held = CpuSet::new();
    for uid in n.pods() {
        let p = n.placement(&uid).unwrap();
        let mut pod_held = p.cpus.clone().unwrap_or_default();
        let mut slices = CpuSet::new();
        for c in p.containers.iter().filter(|c| c.exclusive) {
            prop_assert!(
                c.cpus.is_disjoint(&slices),
                "{uid}/{} overlaps a sibling",
                c.name
            );
            prop_assert!(
                c.cpus.is_disjoint(&n.reserved_cpus()),
                "{uid}/{} reserved",
                c.name
            );
            slices = slices.union(&c.cpus);
            if let Some(b) = &p.cpus {
                prop_assert!(c.cpus.is_subset(b), "{uid}/{} outside its budget", c.name);
            }
            pod_held = pod_held.union(&c.cpus);
        }
        if let Some(b) = &p.cpus {
            // A removed container's slice stays out of the pool until the pod goes (kubelet).
            for c in p
                .containers
                .iter()
                .filter(|c| c.isolation == Isolation::Pod)
            {
                if trimmed.contains(&uid) {
                    prop_assert!(
                        c.cpus.is_subset(&b.difference(&slices)),
                        "pool of {}/{}",
                        uid,
                        c.name
                    );
                } else {
                    prop_assert_eq!(
                        &c.cpus,
                        &b.difference(&slices),
                        "pool of {}/{}",
                        uid,
                        c.name
                    );
                }
            }
        }
        prop_assert!(
            pod_held.is_disjoint(&held),
            "{uid} holds CPUs another pod holds"
        );
        held = held.union(&pod_held);
        for c in &p.containers {
            if let Some(kept) = promised.get(&(uid.clone(), c.name.clone())) {
                prop_assert!(
                    kept.is_empty() || c.exclusive && kept.is_subset(&c.cpus),
                    "{uid}/{} lost promised {kept}",
                    c.name
                );
            }
        }
    }
    prop_assert!(
        n.shared_cpus().is_disjoint(&held),
        "shared pool overlaps granted CPUs"
    );
    prop_assert_eq!(n.shared_cpus().union(&held), all);
    for node in n.memory_manager().state().machine.values() {
        for t in node.memory.values() {
            prop_assert_eq!(t.free + t.reserved, t.allocatable);
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Setup {
    numa: u32,
    cores: u32,
    threads: u32,
    policy: TopologyPolicy,
    scope: TopologyScope,
    memory: bool,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1u32..=2,
        2u32..=4,
        1u32..=2,
        prop_oneof![
            Just(TopologyPolicy::None),
            Just(TopologyPolicy::BestEffort),
            Just(TopologyPolicy::Restricted),
            Just(TopologyPolicy::SingleNumaNode)
        ],
        prop_oneof![Just(TopologyScope::Container), Just(TopologyScope::Pod)],
        any::<bool>(),
    )
        .prop_map(|(numa, cores, threads, policy, scope, memory)| Setup {
            numa,
            cores,
            threads,
            policy,
            scope,
            memory,
        })
}

fn run(s: &Setup, ops: &[Op]) -> Result<Vec<String>, TestCaseError> {
    let mut config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::parse("0").unwrap()),
        topology_policy: s.policy,
        topology_scope: s.scope,
        gates: FeatureGates::default(),
        ..Config::default()
    };
    if s.memory {
        config = with_memory(config);
        config.reserved_memory.truncate(s.numa as usize);
    }
    let mut n = Node::new(machine(s.numa, s.cores, s.threads), config)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let fresh = n.snapshot();
    let mut pods: Vec<PodSpec> = Vec::new();
    let mut promised: BTreeMap<(String, String), CpuSet> = BTreeMap::new();
    let mut trimmed = std::collections::BTreeSet::new();
    let mut log = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let pick = |k: usize| (!pods.is_empty()).then(|| pods[k % pods.len()].clone());
        match op {
            Op::Admit(pc, cs) => {
                let p = build(i, *pc, cs);
                if let Ok(placed) = n.admit(&p) {
                    // Promised: the exclusive CPUs each container was admitted with.
                    for c in &placed.containers {
                        let held = if c.exclusive {
                            c.cpus.clone()
                        } else {
                            CpuSet::new()
                        };
                        promised.insert((p.uid.clone(), c.name.clone()), held);
                    }
                    pods.push(p);
                }
            }
            Op::Start(k) => {
                if let Some(p) = pick(*k) {
                    for c in &p.containers {
                        n.start_container(&p.uid, &c.name);
                    }
                }
            }
            Op::Resize(k, c, milli, gib) => {
                let Some(p) = pick(*k) else { continue };
                let name = p.containers[c % p.containers.len()].name.clone();
                let before = n.snapshot();
                match n.resize_container(
                    &p.uid,
                    &name,
                    &resources_for(*milli, p.resources.is_some(), gib * GI),
                ) {
                    Ok(placed) => {
                        let c = placed.containers.iter().find(|c| c.name == name).unwrap();
                        // A pod-level pod without a bubble (fractional budget) under the pod
                        // scope runs every container on the node shared pool, as admitted.
                        let unbubbled = p.resources.is_some()
                            && placed.cpus.is_none()
                            && s.scope == TopologyScope::Pod
                            && s.policy != TopologyPolicy::None;
                        if *milli > 0 && milli % 1000 == 0 && !unbubbled {
                            prop_assert!(c.exclusive, "{}/{} not exclusive", p.uid, name);
                            prop_assert_eq!(c.cpus.len() as u64, milli / 1000);
                        } else {
                            prop_assert!(!c.exclusive, "{}/{} still exclusive", p.uid, name);
                        }
                        log.push(format!("{placed:?}"))
                    }
                    Err(e) => {
                        prop_assert_eq!(
                            &n.snapshot(),
                            &before,
                            "refused resize changed the node: {}",
                            e
                        );
                        log.push(e.to_string());
                    }
                }
            }
            Op::Step(k, c, delta) => {
                let Some(p) = pick(*k) else { continue };
                let name = p.containers[c % p.containers.len()].name.clone();
                let Some(cp) = n.container(&p.uid, &name).filter(|c| c.exclusive) else {
                    continue;
                };
                let want = cp.cpus.len() as i64 + i64::from(*delta);
                if want <= 0 {
                    continue;
                }
                let before = n.snapshot();
                match n.resize_container(&p.uid, &name, &whole(want as u64 * 1000, GI)) {
                    Ok(placed) => {
                        let now = placed.containers.iter().find(|c| c.name == name).unwrap();
                        prop_assert_eq!(now.cpus.len() as i64, want);
                        if *delta > 0 {
                            prop_assert!(cp.cpus.is_subset(&now.cpus), "grow lost CPUs");
                        }
                        log.push(format!("{placed:?}"));
                    }
                    Err(e) => {
                        prop_assert_eq!(
                            &n.snapshot(),
                            &before,
                            "refused resize changed the node: {}",
                            e
                        );
                        log.push(e.to_string());
                    }
                }
            }
            Op::ResizePod(k, milli) => {
                let Some(p) = pick(*k) else { continue };
                if p.resources.is_none() {
                    continue;
                }
                let before = n.snapshot();
                match n.resize_pod(&p.uid, &whole(*milli, 4 * GI)) {
                    Ok(placed) => {
                        let bubbles =
                            s.scope == TopologyScope::Pod && s.policy != TopologyPolicy::None;
                        match &placed.cpus {
                            Some(b) => prop_assert_eq!(b.len() as u64 * 1000, *milli),
                            None => prop_assert!(
                                milli % 1000 != 0 || !bubbles,
                                "{}: whole budget {}m without a bubble",
                                p.uid,
                                milli
                            ),
                        }
                        log.push(format!("{placed:?}"))
                    }
                    Err(e) => {
                        prop_assert_eq!(
                            &n.snapshot(),
                            &before,
                            "refused resize changed the node: {}",
                            e
                        );
                        log.push(e.to_string());
                    }
                }
            }
            Op::Remove(k) => {
                if let Some(p) = pick(*k) {
                    n.remove_pod(&p.uid);
                    pods.retain(|q| q.uid != p.uid);
                    promised.retain(|(u, _), _| *u != p.uid);
                }
            }
            Op::RemoveContainer(k, c) => {
                if let Some(p) = pick(*k) {
                    let name = p.containers[c % p.containers.len()].name.clone();
                    n.remove_container(&p.uid, &name);
                    trimmed.insert(p.uid.clone());
                    promised.remove(&(p.uid.clone(), name));
                    if n.placement(&p.uid).is_none() {
                        pods.retain(|q| q.uid != p.uid);
                    }
                }
            }
        }
        check(&n, &promised, &trimmed)?;
    }
    for uid in n.pods() {
        n.remove_pod(&uid);
    }
    prop_assert_eq!(
        n.snapshot(),
        fresh,
        "removing every pod did not restore the node"
    );
    Ok(log)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn resize_sequences_keep_the_node_consistent(s in setup(), ops in prop::collection::vec(op(), 1..16)) {
        let a = run(&s, &ops)?;
        let b = run(&s, &ops)?;
        prop_assert_eq!(a, b, "same input, different decisions");
    }
}

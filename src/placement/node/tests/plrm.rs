//! Pods with pod-level resources: pod scope bubble (vectors P1–P4, P7), container scope, gates, memory.

use super::*;
use crate::placement::error::RefusingScope;

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
    // restricted: the empty CPU hint list makes the merged hint non-preferred → the pod-level
    // TopologyAffinityError.
    let mut r = node(static_config(
        TopologyPolicy::Restricted,
        TopologyScope::Pod,
    ));
    assert_eq!(
        r.admit(&p).unwrap_err(),
        AdmissionError::PodLevelTopologyAffinity {
            scope: RefusingScope::Pod
        }
    );
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
        AdmissionError::PodLevelTopologyAffinity {
            scope: RefusingScope::Pod
        }
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

/// Vectors P1, P2, P4 (TestStaticPolicyAllocatePod rows, shared/fixtures/vectors).
#[test]
fn plrm_vectors_p1_p2_p4() {
    let g = |n: &str, role| gu(n, role, 1000, GI);
    let cases = [
        (
            "p1",
            vec![],
            vec![g("container1", ContainerRole::App)],
            (2000, 2 * GI),
            vec![("container1", "2", true)],
        ),
        (
            "p2",
            vec![],
            vec![bare("ngu-container")],
            (1000, GI),
            vec![("ngu-container", "6", false)],
        ),
        (
            "p4",
            vec![
                g("gu-init-container-1", ContainerRole::Init),
                g("gu-init-container-2", ContainerRole::Init),
            ],
            vec![
                g("gu-container-1", ContainerRole::App),
                g("gu-container-2", ContainerRole::App),
            ],
            (2000, 2 * GI),
            vec![
                ("gu-init-container-1", "2", true),
                ("gu-init-container-2", "2", true),
                ("gu-container-1", "2", true),
                ("gu-container-2", "8", true),
            ],
        ),
    ];
    for (uid, init, apps, level, want) in cases {
        let mut n = node(static_config(
            TopologyPolicy::BestEffort,
            TopologyScope::Pod,
        ));
        let placed = n.admit(&pod(uid, init, apps, Some(level))).unwrap();
        let got: Vec<(&str, String, bool)> = placed
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.cpus.to_string(), c.exclusive))
            .collect();
        let want: Vec<(&str, String, bool)> = want
            .into_iter()
            .map(|(a, b, c)| (a, b.to_string(), c))
            .collect();
        assert_eq!(got, want, "{uid}");
    }
}

/// kubelet v1.37.2 `memorymanager/policy_static.go` `Allocate`: in container scope a non-eligible
/// container of a pod-level-resources pod requests no memory and is skipped; the pod is admitted
/// (the PLRM-era code this core was first written from rejected it).
#[test]
fn container_scope_skips_memory_for_non_eligible_containers() {
    let config = with_memory(static_config(
        TopologyPolicy::BestEffort,
        TopologyScope::Container,
    ));
    let mut n = node(config);
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 1000, GI), bare("ngu")],
        Some((2000, 2 * GI)),
    );
    let placed = n.admit(&p).unwrap();
    let (gu, ngu) = (&placed.containers[0], &placed.containers[1]);
    assert!(gu.exclusive && gu.memory_nodes.is_some(), "{gu:?}");
    assert_eq!((ngu.memory_nodes, ngu.memory.len()), (None, 0), "{ngu:?}");
    assert_eq!(ngu.isolation, Isolation::Host);
}

/// kubelet `PodLevelTopologyAffinityError`: a pod with pod-level resources refused by the
/// Topology Manager gets "Pod Scope " and the scope's own text, with the reason
/// TopologyAffinityError; a classic pod keeps the plain message.
#[test]
fn pod_level_pods_refused_by_the_topology_manager_get_the_kubelets_texts() {
    let too_big = |uid: &str| {
        pod(
            uid,
            vec![],
            vec![gu("a", ContainerRole::App, 7000, GI)],
            Some((7000, GI)),
        )
    };
    for (scope, text) in [
        (
            TopologyScope::Pod,
            "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager",
        ),
        (
            TopologyScope::Container,
            "Pod Scope pod with pod-level resources failed admission with a container-level topology manager",
        ),
    ] {
        let mut n = node(static_config(TopologyPolicy::SingleNumaNode, scope));
        let err = n.admit(&too_big("p")).unwrap_err();
        assert_eq!((err.reason(), err.to_string().as_str()), ("TopologyAffinityError", text));
        let classic = pod(
            "c",
            vec![],
            vec![gu("a", ContainerRole::App, 7000, GI)],
            None,
        );
        let err = n.admit(&classic).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Resources cannot be allocated with Topology locality"
        );
    }
}

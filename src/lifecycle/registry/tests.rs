use super::*;
use crate::placement::config::{Config, CpuPolicy, ReservedCpus, TopologyPolicy, TopologyScope};
use crate::placement::test_pods::{app, guaranteed, pod_of, GI};
use crate::placement::Resources;
use crate::topology::SyntheticSpec;

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

/// An 8-CPU, 2-NUMA machine (4 cores with 2 threads on each node would be 16; keep it small:
/// 2 sockets × 1 NUMA × 4 cores × 1 thread), static policy, no reservation, pod scope.
fn registry() -> Registry {
    registry_in(TopologyScope::Pod)
}

/// The same machine and policy in `scope`.
fn registry_in(scope: TopologyScope) -> Registry {
    let topo = SyntheticSpec::new(2, 1, 4, 1, 1).build().unwrap();
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::new()),
        accept_no_reserved_cpus: true,
        topology_policy: TopologyPolicy::SingleNumaNode,
        topology_scope: scope,
        ..Config::default()
    };
    Registry::new(Node::new(topo, config).unwrap())
}

fn infer_none(_: &PodSpec) -> ContainerSpec {
    panic!("spec pods never infer")
}

#[test]
fn mixed_pod_gets_slice_and_pool_then_releases_everything() {
    let mut r = registry();
    let spec = pod_of(
        "p1",
        Some(guaranteed(3_000, 3 * GI)),
        vec![
            app("main", guaranteed(1_000, GI)),
            app("side", Resources::default()),
        ],
    );
    r.admit(spec, Source::Spec).unwrap();
    r.commit_sandbox("p1", "sb1");
    let main = r
        .decide_container("sb1", "main", infer_none)
        .unwrap()
        .unwrap();
    let side = r
        .decide_container("sb1", "side", infer_none)
        .unwrap()
        .unwrap();
    assert!(main.exclusive && main.cpus.len() == 1 && main.cpu_quota == Some(-1));
    assert!(!side.exclusive && side.cpus.len() == 2 && side.cpu_quota.is_none());
    assert!(main.cpus.is_disjoint(&side.cpus));
    let bubble = main.cpus.union(&side.cpus);
    assert!(bubble.is_disjoint(&r.node().shared_cpus()));
    r.commit_container("c-main", "sb1", "main", &main);
    r.commit_container("c-side", "sb1", "side", &side);
    assert!(r.pending_updates().is_empty());

    r.stop_sandbox("sb1");
    assert_eq!(
        r.node().shared_cpus(),
        cpus("0-7"),
        "stop releases the whole budget"
    );
    r.remove_sandbox("sb1");
    assert!(r.pods().is_empty() && r.containers().is_empty());
}

#[test]
fn rejection_leaves_nothing_behind_and_abort_releases() {
    let mut r = registry();
    let before = r.snapshot();
    let empty_pool = pod_of(
        "p2",
        Some(guaranteed(2_000, 2 * GI)),
        vec![
            app("a", guaranteed(2_000, 2 * GI)),
            app("b", Resources::default()),
        ],
    );
    let err = r.admit(empty_pool, Source::Spec).unwrap_err();
    assert!(
        matches!(
            err.reason(),
            "EmptyPodSharedPoolError" | "TopologyAffinityError"
        ),
        "{err}"
    );
    assert_eq!(r.snapshot(), before);

    r.admit(
        pod_of(
            "p3",
            Some(guaranteed(2_000, 2 * GI)),
            vec![app("a", guaranteed(2_000, 2 * GI))],
        ),
        Source::Spec,
    )
    .unwrap();
    assert_eq!(r.node().shared_cpus().len(), 6);
    r.abort_sandbox("p3");
    assert_eq!(
        r.snapshot(),
        before,
        "a refused sandbox returns its reservation"
    );
}

#[test]
fn node_pool_containers_follow_pool_changes() {
    let mut r = registry();
    r.admit(
        pod_of("be", None, vec![app("c", Resources::default())]),
        Source::Spec,
    )
    .unwrap();
    r.commit_sandbox("be", "sb-be");
    let d = r
        .decide_container("sb-be", "c", infer_none)
        .unwrap()
        .unwrap();
    assert_eq!(d.cpus, cpus("0-7"));
    r.commit_container("c-be", "sb-be", "c", &d);

    r.admit(
        pod_of(
            "g",
            Some(guaranteed(2_000, GI)),
            vec![app("x", guaranteed(2_000, GI))],
        ),
        Source::Spec,
    )
    .unwrap();
    r.commit_sandbox("g", "sb-g");
    let updates = r.pending_updates();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].container_id, "c-be");
    assert_eq!(
        updates[0].cpus.len(),
        6,
        "the shared pool shrank by the exclusive pod"
    );
    r.mark_applied("c-be", &updates[0].cpus);
    assert!(r.pending_updates().is_empty());

    r.stop_sandbox("sb-g");
    let grow = r.pending_updates();
    assert_eq!(grow.len(), 1);
    assert_eq!(
        grow[0].cpus,
        cpus("0-7"),
        "and grows back when the pod goes"
    );
}

#[test]
fn readmitting_a_running_pod_keeps_its_cpus() {
    let mut r = registry();
    let spec = pod_of(
        "p",
        Some(guaranteed(2_000, 2 * GI)),
        vec![
            app("a", guaranteed(1_000, GI)),
            app("b", Resources::default()),
        ],
    );
    r.admit(spec.clone(), Source::Spec).unwrap();
    r.commit_sandbox("p", "sb1");
    let a = r.decide_container("sb1", "a", infer_none).unwrap().unwrap();
    r.admit(spec, Source::Spec).unwrap();
    r.commit_sandbox("p", "sb2");
    assert_eq!(
        r.decide_container("sb2", "a", infer_none).unwrap().unwrap(),
        a
    );
}

#[test]
fn removing_an_old_instance_keeps_the_new_one_placed() {
    let mut r = registry();
    r.admit(
        pod_of(
            "p",
            Some(guaranteed(2_000, 2 * GI)),
            vec![
                app("a", guaranteed(1_000, GI)),
                app("b", Resources::default()),
            ],
        ),
        Source::Spec,
    )
    .unwrap();
    r.commit_sandbox("p", "sb");
    let a = r.decide_container("sb", "a", infer_none).unwrap().unwrap();
    r.commit_container("a-0", "sb", "a", &a);
    r.commit_container("a-1", "sb", "a", &a);
    r.remove_container("a-0");
    assert_eq!(
        r.decide_container("sb", "a", infer_none).unwrap().unwrap(),
        a
    );
}

/// kubelet v1.37.2: a container that stopped and was removed keeps its CPUs while its pod is
/// active (PostStopContainer reaches only the Topology Manager; the CPU and Memory Managers
/// release a pod's resources once it is no longer active); they go back with the sandbox.
#[test]
fn a_removed_container_keeps_its_cpus_until_the_pod_goes() {
    let mut r = registry();
    r.admit(
        pod_of("p", None, vec![app("a", guaranteed(2_000, GI))]),
        Source::Spec,
    )
    .unwrap();
    r.commit_sandbox("p", "sb");
    let a = r.decide_container("sb", "a", infer_none).unwrap().unwrap();
    r.commit_container("a-0", "sb", "a", &a);
    let shared = r.node().shared_cpus();
    r.remove_container("a-0");
    assert_eq!(r.node().shared_cpus(), shared, "nothing goes back yet");
    // A new instance of the container runs on the same CPUs.
    assert_eq!(
        r.decide_container("sb", "a", infer_none).unwrap().unwrap(),
        a
    );
    r.stop_sandbox("sb");
    assert_eq!(r.node().shared_cpus(), shared.union(&a.cpus));
}

/// The kubelet calls its managers' `AddContainer` in `PreStartContainer`, after CreateContainer
/// succeeded: when the runtime has created the pod's app container, the Memory Manager gives
/// back what the regular init container held.
#[test]
fn a_created_app_container_frees_the_init_containers_memory() {
    use crate::placement::config::{MemoryPolicy, ReservedMemory};
    let topo = SyntheticSpec::new(2, 1, 4, 1, 1).build().unwrap();
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::new()),
        accept_no_reserved_cpus: true,
        memory_policy: MemoryPolicy::Static,
        reserved_memory: vec![ReservedMemory {
            numa_node: 0,
            memory: 1 << 30,
            hugepages: Default::default(),
        }],
        topology_policy: TopologyPolicy::SingleNumaNode,
        topology_scope: TopologyScope::Container,
        ..Config::default()
    };
    let mut r = Registry::new(Node::new(topo, config).unwrap());
    let mut spec = pod_of("p", None, vec![app("app", guaranteed(1_000, GI))]);
    spec.init_containers = vec![ContainerSpec {
        name: "init".into(),
        role: ContainerRole::Init,
        resources: guaranteed(1_000, 8 * GI),
    }];
    r.admit(spec, Source::Spec).unwrap();
    r.commit_sandbox("p", "sb");
    let free = |r: &Registry| -> u64 {
        r.node()
            .memory_manager()
            .state()
            .machine
            .values()
            .map(|n| n.memory["memory"].free)
            .sum()
    };
    let held = free(&r);
    let init = r
        .decide_container("sb", "init", infer_none)
        .unwrap()
        .unwrap();
    r.commit_container("c-init", "sb", "init", &init);
    assert_eq!(
        free(&r),
        held,
        "the init container's own start frees nothing"
    );
    let app_decision = r
        .decide_container("sb", "app", infer_none)
        .unwrap()
        .unwrap();
    r.commit_container("c-app", "sb", "app", &app_decision);
    assert_eq!(
        free(&r),
        held + (7 << 30),
        "8Gi held for the init container, 1Gi for the app"
    );
}

#[test]
fn inferred_pod_is_extended_container_by_container() {
    let mut r = registry();
    let spec = inferred_sandbox_spec(pod_of("i", Some(guaranteed(3_000, 3 * GI)), vec![]));
    r.admit(spec, Source::Inferred).unwrap();
    r.commit_sandbox("i", "sb");
    assert_eq!(r.node().shared_cpus().len(), 5);
    let main = r
        .decide_container("sb", "main", |_| app("main", guaranteed(1_000, GI)))
        .unwrap()
        .unwrap();
    assert!(main.exclusive && main.cpus.len() == 1, "{main:?}");
    r.commit_container("c1", "sb", "main", &main);
    let side = r
        .decide_container("sb", "side", |_| app("side", Resources::default()))
        .unwrap()
        .unwrap();
    assert!(!side.exclusive && side.cpus.len() == 2, "{side:?}");
    assert_eq!(
        r.decide_container("sb", "main", |_| unreachable!())
            .unwrap()
            .unwrap(),
        main,
        "main kept its slice"
    );
    r.stop_sandbox("sb");
    assert_eq!(r.node().shared_cpus(), cpus("0-7"));
}

#[test]
fn inferred_sidecars_first_then_main_gets_a_slice_and_the_pool_follows() {
    let mut r = registry();
    r.admit(
        inferred_sandbox_spec(pod_of("i", Some(guaranteed(2_000, 2 * GI)), vec![])),
        Source::Inferred,
    )
    .unwrap();
    r.commit_sandbox("i", "sb");
    let s1 = r
        .decide_container("sb", "s1", |_| app("s1", Resources::default()))
        .unwrap()
        .unwrap();
    r.commit_container("c1", "sb", "s1", &s1);
    assert_eq!(s1.cpus.len(), 2, "alone, the sidecar has the whole budget");
    let main = r
        .decide_container("sb", "main", |_| app("main", guaranteed(1_000, GI)))
        .unwrap()
        .unwrap();
    assert!(main.exclusive && main.cpus.len() == 1, "{main:?}");
    let updates = r.pending_updates();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0].container_id, "c1");
    assert_eq!(
        updates[0].cpus,
        s1.cpus.difference(&main.cpus),
        "the sidecar shrinks to the pool"
    );
}

#[test]
fn inferred_container_that_empties_the_pool_is_rejected() {
    let mut r = registry();
    r.admit(
        inferred_sandbox_spec(pod_of("i", Some(guaranteed(2_000, 2 * GI)), vec![])),
        Source::Inferred,
    )
    .unwrap();
    r.commit_sandbox("i", "sb");
    let whole = r
        .decide_container("sb", "a", |_| app("a", guaranteed(2_000, 2 * GI)))
        .unwrap()
        .unwrap();
    assert!(whole.exclusive && whole.cpus.len() == 2);
    r.commit_container("ca", "sb", "a", &whole);
    let before = r.snapshot();
    let err = r
        .decide_container("sb", "b", |_| app("b", Resources::default()))
        .unwrap_err();
    // single-numa-node sees the empty pool as an unsatisfiable hint first, as the kubelet does.
    assert!(
        matches!(
            err.reason(),
            "EmptyPodSharedPoolError" | "TopologyAffinityError"
        ),
        "{err}"
    );
    assert_eq!(r.snapshot(), before, "a refused container changes nothing");
}

#[test]
fn snapshot_round_trips_through_json() {
    let mut r = registry();
    r.admit(
        pod_of(
            "p",
            Some(guaranteed(2_000, 2 * GI)),
            vec![
                app("a", guaranteed(1_000, GI)),
                app("b", Resources::default()),
            ],
        ),
        Source::Spec,
    )
    .unwrap();
    r.commit_sandbox("p", "sb");
    let a = r.decide_container("sb", "a", infer_none).unwrap().unwrap();
    r.commit_container("ca", "sb", "a", &a);
    let json = serde_json::to_string(&r.snapshot()).unwrap();
    let mut fresh = registry();
    fresh.restore(serde_json::from_str(&json).unwrap()).unwrap();
    assert_eq!(fresh.snapshot(), r.snapshot());
    assert_eq!(
        fresh
            .decide_container("sb", "a", infer_none)
            .unwrap()
            .unwrap(),
        a
    );
}

#[test]
fn recovery_drops_what_the_runtime_no_longer_has() {
    let mut r = registry();
    r.admit(
        pod_of(
            "p",
            Some(guaranteed(2_000, 2 * GI)),
            vec![app("a", guaranteed(2_000, 2 * GI))],
        ),
        Source::Spec,
    )
    .unwrap();
    r.commit_sandbox("p", "sb");
    let a = r.decide_container("sb", "a", infer_none).unwrap().unwrap();
    r.commit_container("ca", "sb", "a", &a);
    assert_eq!(r.retain_known(&["sb".into()], &["ca".into()]), 0);
    assert_eq!(r.retain_known(&[], &[]), 2);
    assert_eq!(r.node().shared_cpus(), cpus("0-7"));
    r.hold_foreign(&cpus("6-7")).unwrap();
    assert_eq!(r.node().shared_cpus(), cpus("0-5"));
}

/// CPUs held for containers adopted without their pod's spec go back when those containers go,
/// however their removal is learned (a RemoveContainer, or recovery finding them gone together
/// with their sandbox): a held CPU is never leaked.
#[test]
fn held_cpus_go_back_with_their_containers() {
    let held = |r: &mut Registry, id: &str, cpu: &str| {
        r.adopt_container(Adoption {
            container_id: id.into(),
            sandbox_id: "sb".into(),
            pod: pod_of("old", None, vec![]),
            name: id.into(),
            cpus: cpus(cpu),
            mems: None,
            exclusive: true,
            pinned: true,
        })
        .unwrap();
    };
    let mut r = registry();
    held(&mut r, "a", "1");
    held(&mut r, "b", "2");
    assert_eq!(r.node().shared_cpus(), cpus("0,3-7"));
    r.remove_container("a");
    assert_eq!(r.node().shared_cpus(), cpus("0-1,3-7"), "a's cpu is back");
    // The sandbox and its last container gone at once, as recovery finds them.
    assert_eq!(r.retain_known(&[], &[]), 2);
    assert_eq!(r.node().shared_cpus(), cpus("0-7"), "nothing stays held");
    assert!(r.node().unavailable_cpus().is_empty());
}

/// A checkpoint from an older numa-shim may hold CPUs for containers it no longer records:
/// recovery gives them back.
#[test]
fn cpus_held_for_nobody_are_released() {
    let mut r = registry();
    r.hold_foreign(&cpus("3-4")).unwrap();
    assert_eq!(r.node().shared_cpus(), cpus("0-2,5-7"));
    assert_eq!(r.release_unheld(), cpus("3-4"));
    assert_eq!(r.node().shared_cpus(), cpus("0-7"));
}

/// The sandbox index answers as a scan of the pod records would, through admit, commit, a
/// re-created sandbox, stop, removal and a restore from the checkpoint.
#[test]
fn the_sandbox_index_follows_every_pod_record() {
    fn scan<'a>(r: &'a Registry, id: &str) -> Option<&'a str> {
        r.pods()
            .iter()
            .find(|(_, p)| p.sandbox_id.as_deref() == Some(id))
            .map(|(uid, _)| uid.as_str())
    }
    let mut r = registry();
    let check = |r: &Registry| {
        for id in ["sb-a", "sb-a2", "sb-b", "sb-none"] {
            assert_eq!(
                r.pod_of_sandbox(id).map(|p| p.spec.uid.as_str()),
                scan(r, id),
                "{id}"
            );
        }
    };
    r.admit(
        pod_of("a", None, vec![app("c", guaranteed(1_000, GI))]),
        Source::Spec,
    )
    .unwrap();
    r.admit(
        pod_of("b", None, vec![app("c", guaranteed(1_000, GI))]),
        Source::Spec,
    )
    .unwrap();
    check(&r);
    r.commit_sandbox("a", "sb-a");
    r.commit_sandbox("b", "sb-b");
    check(&r);
    assert_eq!(r.pod_of_sandbox("sb-a").unwrap().spec.uid, "a");
    // The kubelet re-creates a's sandbox: the old id no longer names it.
    r.commit_sandbox("a", "sb-a2");
    check(&r);
    assert!(r.pod_of_sandbox("sb-a").is_none());
    let snapshot = r.snapshot();
    r.remove_sandbox("sb-b");
    check(&r);
    assert!(r.pod_of_sandbox("sb-b").is_none());
    let mut restored = registry();
    restored.restore(snapshot).unwrap();
    check(&restored);
    assert_eq!(restored.pod_of_sandbox("sb-b").unwrap().spec.uid, "b");
}

mod resize_props {
    use super::*;
    use crate::knowledge::infer::CriResources;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Admit(usize, u64),
        Resize {
            pod: usize,
            cpus: u64,
            runtime_ok: bool,
        },
        Stop(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize, 1..3u64).prop_map(|(p, n)| Op::Admit(p, n)),
            (0..3usize, 1..5u64, any::<bool>()).prop_map(|(pod, cpus, runtime_ok)| Op::Resize {
                pod,
                cpus,
                runtime_ok
            }),
            (0..3usize).prop_map(Op::Stop),
        ]
    }

    fn container_scope() -> Registry {
        registry_in(TopologyScope::Container)
    }

    fn cri(n: u64) -> CriResources {
        CriResources {
            cpu_period: 100_000,
            cpu_quota: (n * 100_000) as i64,
            cpu_shares: (n * 1024) as i64,
            memory_limit_in_bytes: 1 << 30,
        }
    }

    /// No CPU in two exclusive containers, none of them in the node shared pool, every record
    /// what the core says, every live container still holding the CPUs it was admitted with.
    fn check(r: &Registry, admitted: &BTreeMap<String, CpuSet>) -> Result<(), TestCaseError> {
        let mut seen = CpuSet::new();
        for (id, c) in r.containers() {
            if !c.exclusive {
                continue;
            }
            prop_assert!(
                seen.intersection(&c.cpus).is_empty(),
                "{id}: {} granted twice",
                c.cpus
            );
            seen = seen.union(&c.cpus);
            prop_assert_eq!(r.desired(c), Some(c.cpus.clone()), "{} stale", id);
            if let Some(first) = admitted.get(id) {
                prop_assert!(
                    first.is_subset(&c.cpus),
                    "{id}: promised {first} lost: {}",
                    c.cpus
                );
            }
        }
        prop_assert!(r.node().shared_cpus().intersection(&seen).is_empty());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Sequences of admissions, resizes (the runtime taking or refusing the call) and stops:
        /// no CPU granted twice, promised CPUs never lost, a refused or undone resize leaves the
        /// registry exactly as before.
        #[test]
        fn resize_sequences_never_grant_twice_or_lose_promised_cpus(ops in prop::collection::vec(op(), 1..24)) {
            let mut r = container_scope();
            let mut admitted: BTreeMap<String, CpuSet> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Admit(i, n) => {
                        let uid = format!("p{i}");
                        if r.pods().contains_key(&uid) {
                            continue;
                        }
                        if r.admit(pod_of(&uid, None, vec![app("c", guaranteed(n * 1000, GI))]), Source::Spec).is_err() {
                            continue;
                        }
                        let sandbox = format!("sb-{uid}");
                        r.commit_sandbox(&uid, &sandbox);
                        let d = r.decide_container(&sandbox, "c", infer_none).unwrap().unwrap();
                        let id = format!("c-{uid}");
                        r.commit_container(&id, &sandbox, "c", &d);
                        admitted.insert(id, d.cpus);
                    }
                    Op::Resize { pod: i, cpus, runtime_ok } => {
                        let id = format!("c-p{i}");
                        let before = r.snapshot();
                        match r.resize_container(&id, &cri(cpus)) {
                            Ok(Some(resized)) => {
                                if let (false, Some(undo)) = (runtime_ok, &resized.undo) {
                                    let how = r.undo_resize(&resized, undo);
                                    prop_assert_eq!(how, Undone::Exact);
                                    prop_assert_eq!(r.snapshot(), before);
                                }
                            }
                            Ok(None) => prop_assert!(!r.containers().contains_key(&id)),
                            Err(_) => prop_assert_eq!(r.snapshot(), before),
                        }
                    }
                    Op::Stop(i) => {
                        let sandbox = format!("sb-p{i}");
                        r.stop_sandbox(&sandbox);
                        r.remove_sandbox(&sandbox);
                        admitted.remove(&format!("c-p{i}"));
                    }
                }
                check(&r, &admitted)?;
            }
        }
    }
}

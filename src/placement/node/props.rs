//! Property tests over random machines and random admit/remove sequences: no CPU granted twice,
//! reserved never granted, slices inside the pod budget, single-numa-node never spans nodes,
//! memory accounting balanced, rejection and full release restore the node, determinism.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::{bare, gu, pod, GI};
use super::*;
use crate::placement::config::{
    CpuPolicy, FeatureGates, MemoryPolicy, ReservedCpus, ReservedMemory,
};
use crate::placement::ContainerRole;
use crate::topology::{CpuInfo, NumaNode};

/// sockets × NUMA per socket × cores per NUMA × threads; ids thread-major (kubelet fixture style).
fn machine(sockets: u32, numa_per_socket: u32, cores_per_numa: u32, threads: u32) -> Topology {
    let cores = sockets * numa_per_socket * cores_per_numa;
    let numa_count = sockets * numa_per_socket;
    let mut cpus = Vec::new();
    for t in 0..threads {
        for core in 0..cores {
            let numa = core / cores_per_numa;
            cpus.push(CpuInfo {
                id: t * cores + core,
                core,
                socket: numa / numa_per_socket,
                die: 0,
                numa,
                uncore: 0,
            });
        }
    }
    cpus.sort_by_key(|c| c.id);
    let numa = (0..numa_count)
        .map(|id| NumaNode {
            id,
            memory: 8 * GI,
            hugepages: BTreeMap::new(),
            distances: (0..numa_count)
                .map(|j| if j == id { 10 } else { 20 })
                .collect(),
        })
        .collect();
    Topology { cpus, numa }
}

#[derive(Debug, Clone)]
struct Setup {
    shape: (u32, u32, u32, u32),
    policy: TopologyPolicy,
    scope: TopologyScope,
    explicit_reserved: bool,
    memory: bool,
    plrm: bool,
    /// Mark the highest CPU as held by others before any pod.
    unavailable: bool,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (1u32..=2, 1u32..=2, 1u32..=4, 1u32..=2),
        prop_oneof![
            Just(TopologyPolicy::None),
            Just(TopologyPolicy::BestEffort),
            Just(TopologyPolicy::Restricted),
            Just(TopologyPolicy::SingleNumaNode)
        ],
        prop_oneof![Just(TopologyScope::Container), Just(TopologyScope::Pod)],
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.8),
        any::<bool>(),
    )
        .prop_map(
            |(shape, policy, scope, explicit_reserved, memory, plrm, unavailable)| Setup {
                shape,
                policy,
                scope,
                explicit_reserved,
                memory,
                plrm,
                unavailable,
            },
        )
}

fn config(s: &Setup, numa_count: u32) -> Config {
    Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: if s.explicit_reserved {
            ReservedCpus::Explicit(CpuSet::parse("0").unwrap())
        } else {
            ReservedCpus::Count { milli: 1000 }
        },
        memory_policy: if s.memory {
            MemoryPolicy::Static
        } else {
            MemoryPolicy::None
        },
        reserved_memory: if s.memory {
            (0..numa_count)
                .map(|n| ReservedMemory {
                    numa_node: n,
                    memory: GI,
                    hugepages: BTreeMap::new(),
                })
                .collect()
        } else {
            vec![]
        },
        topology_policy: s.policy,
        topology_scope: s.scope,
        gates: FeatureGates {
            pod_level_resources: true,
            pod_level_resource_managers: s.plrm,
        },
        ..Config::default()
    }
}

/// One container: (kind, cpus) where kind 0 = bare, 1 = Guaranteed whole, 2 = Guaranteed 500m.
type CSpec = (u8, u64, u8);

#[derive(Debug, Clone)]
enum Op {
    /// (pod-level cpus, 0 = classic), containers (role: 0 app, 1 init, 2 sidecar), and maybe a
    /// DRA claim: its device's NUMA node (possibly one the machine lacks) and the index of the
    /// container using it.
    Admit(u64, Vec<CSpec>, Option<(u32, usize)>),
    RemovePod(usize),
    RemoveContainer(usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let container = (0u8..3, 1u64..=4, 0u8..3);
    prop_oneof![
        3 => (
            prop_oneof![Just(0u64), 1u64..=6],
            prop::collection::vec(container, 1..=3),
            prop::option::weighted(0.4, (0u32..5, 0usize..3)),
        )
            .prop_map(|(p, c, claim)| Op::Admit(p, c, claim)),
        1 => (0usize..8).prop_map(Op::RemovePod),
        1 => (0usize..8, 0usize..3).prop_map(|(p, c)| Op::RemoveContainer(p, c)),
    ]
}

fn build_pod(i: usize, pod_cpus: u64, cs: &[CSpec]) -> PodSpec {
    let mut init = Vec::new();
    let mut apps = Vec::new();
    for (j, &(kind, n, role)) in cs.iter().enumerate() {
        let name = format!("c{j}");
        let role = match role {
            1 => ContainerRole::Init,
            2 => ContainerRole::Sidecar,
            _ => ContainerRole::App,
        };
        let mut c = match kind {
            0 if pod_cpus > 0 => bare(&name),
            2 => gu(&name, role, 500, GI),
            _ => gu(&name, role, n * 1000, GI),
        };
        c.role = role;
        if role == ContainerRole::App {
            apps.push(c);
        } else {
            init.push(c);
        }
    }
    if apps.is_empty() {
        apps.push(if pod_cpus > 0 {
            bare("app")
        } else {
            gu("app", ContainerRole::App, 1000, GI)
        });
    }
    let level = (pod_cpus > 0).then_some((pod_cpus * 1000, 3 * GI));
    pod(&format!("pod-{i}"), init, apps, level)
}

fn check_invariants(n: &Node, setup: &Setup) -> Result<(), TestCaseError> {
    let all: CpuSet = n.topology().cpus.iter().map(|c| c.id).collect();
    let reserved = n.reserved_cpus();
    let numa_of = |cpu: u32| {
        n.topology()
            .cpus
            .iter()
            .find(|c| c.id == cpu)
            .map(|c| c.numa)
    };
    let spans_one_node = |set: &CpuSet| {
        set.iter()
            .filter_map(numa_of)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            <= 1
    };
    let mut held = n.unavailable_cpus();
    for uid in n.pods() {
        let p = n.placement(&uid).unwrap();
        let mut pod_held = CpuSet::new();
        if let Some(bubble) = &p.cpus {
            pod_held = bubble.clone();
            for c in &p.containers {
                if c.isolation != Isolation::Host {
                    prop_assert!(c.cpus.is_subset(bubble), "{uid}/{} outside bubble", c.name);
                }
            }
        }
        let mut long_running = CpuSet::new();
        for c in p.containers.iter().filter(|c| c.exclusive) {
            prop_assert!(
                c.cpus.is_disjoint(&reserved),
                "{uid}/{} got reserved CPUs",
                c.name
            );
            if c.role != ContainerRole::Init {
                prop_assert!(
                    c.cpus.is_disjoint(&long_running),
                    "{uid}/{} overlaps a sibling",
                    c.name
                );
                long_running = long_running.union(&c.cpus);
            }
            pod_held = pod_held.union(&c.cpus);
            if setup.policy == TopologyPolicy::SingleNumaNode {
                prop_assert!(
                    spans_one_node(&c.cpus),
                    "{uid}/{} spans NUMA nodes: {}",
                    c.name,
                    c.cpus
                );
            }
        }
        if setup.policy == TopologyPolicy::SingleNumaNode {
            for c in &p.containers {
                prop_assert!(
                    c.memory_nodes.is_none_or(|m| m.count() == 1),
                    "{uid}/{} memory spans nodes",
                    c.name
                );
            }
            if let Some(b) = &p.cpus {
                prop_assert!(spans_one_node(b));
            }
        }
        prop_assert!(pod_held.is_disjoint(&reserved));
        prop_assert!(
            pod_held.is_disjoint(&held),
            "{uid} holds CPUs another pod holds"
        );
        held = held.union(&pod_held);
    }
    prop_assert!(
        n.shared_cpus().is_disjoint(&held),
        "shared pool overlaps granted CPUs"
    );
    prop_assert_eq!(n.shared_cpus().union(&held), all);
    for (id, node) in &n.memory_manager().state().machine {
        for (name, t) in &node.memory {
            prop_assert_eq!(t.free + t.reserved, t.allocatable, "node {} {}", id, name);
        }
    }
    Ok(())
}

/// A rejected admission leaves the node's decisions as they were, and its memory tables as the
/// kubelet's rules leave them, which is not always as they were:
/// - what a refused pod got goes back into a multi-NUMA group by the kubelet's release rule (the
///   group's first node with reservations first), which need not be where it was taken from
///   (the group's first node with free memory first);
/// - a single-node block charged on a node inside a group makes that node's group itself
///   (kubelet `updateMachineState` sets `Cells` to the block's mask) and `releaseMemory` puts
///   the group back only when the node has no assignment left. A hint from a device or a claim
///   can ask for such a block (the memory manager's own hints never do).
///
/// So: every node's table adds up, keeps its assignment count and its group, or has become a
/// group of its own; each resource reserves the same over the machine.
fn unchanged_but_spread(after: &NodeSnapshot, before: &NodeSnapshot) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        &after.cpu,
        &before.cpu,
        "rejected admission changed the CPUs"
    );
    prop_assert_eq!(
        &after.pods,
        &before.pods,
        "rejected admission changed the pods"
    );
    prop_assert_eq!(&after.memory.containers, &before.memory.containers);
    prop_assert_eq!(&after.memory.pods, &before.memory.pods);
    let reserved = |s: &NodeSnapshot| {
        let mut sums: BTreeMap<String, u64> = BTreeMap::new();
        for node in s.memory.machine.values() {
            for (name, t) in &node.memory {
                *sums.entry(name.clone()).or_default() += t.reserved;
            }
        }
        sums
    };
    prop_assert_eq!(reserved(after), reserved(before));
    for (id, node) in &after.memory.machine {
        let was = &before.memory.machine[id];
        prop_assert_eq!(node.assignments, was.assignments);
        prop_assert!(
            node.cells == was.cells || node.cells == [*id],
            "node {}: group {:?} was {:?}",
            id,
            node.cells,
            was.cells
        );
        for (name, t) in &node.memory {
            let w = &was.memory[name];
            prop_assert_eq!((t.total, t.allocatable), (w.total, w.allocatable));
            prop_assert_eq!(t.free + t.reserved, t.allocatable);
        }
    }
    Ok(())
}

fn claim_facts(
    p: &PodSpec,
    claim: Option<&(u32, String)>,
) -> crate::placement::device::claims::ClaimFacts {
    use crate::placement::device::claims::{Claim, ClaimFacts};
    ClaimFacts {
        pod_uid: p.uid.clone(),
        claims: claim
            .map(|(numa, container)| Claim {
                name: format!("default/{}-claim", p.uid),
                containers: std::iter::once(container.clone()).collect(),
                devices: vec![crate::placement::device::Device {
                    id: "gpu.example.com/pool/gpu".into(),
                    numa_nodes: vec![*numa],
                }],
            })
            .into_iter()
            .collect(),
    }
}

/// A pod admitted with a claim under `single-numa-node` or `restricted`: the hint of every
/// container the claim counts for (the one using it, container scope; all, pod scope) is the
/// claim's node, a node the machine has.
fn check_claim(
    n: &Node,
    setup: &Setup,
    placed: &PodPlacement,
    claim: Option<&(u32, String)>,
) -> Result<(), TestCaseError> {
    let Some((numa, container)) = claim else {
        return Ok(());
    };
    if !matches!(
        setup.policy,
        TopologyPolicy::SingleNumaNode | TopologyPolicy::Restricted
    ) {
        return Ok(());
    }
    prop_assert!(
        n.topology().numa.iter().any(|m| m.id == *numa),
        "admitted with a claim on NUMA node {numa}, which the machine lacks"
    );
    for c in &placed.containers {
        if setup.scope == TopologyScope::Container && c.name != *container {
            continue;
        }
        let Some(hint) = c.hint else { continue };
        // single-numa-node stores the machine's only node as "any" (the default mask).
        let affinity = hint
            .affinity
            .unwrap_or_else(|| NumaMask::from_ids(n.topology().numa.iter().map(|m| m.id)));
        prop_assert!(
            affinity.is_set(*numa),
            "{}: hint {:?} without the claim's node {}",
            c.name,
            affinity,
            numa
        );
        if setup.policy == TopologyPolicy::SingleNumaNode {
            prop_assert_eq!(affinity.count(), 1);
        }
    }
    Ok(())
}

/// Right after admission of a PLRM pod: the pod pool is the bubble minus live exclusive slices.
fn check_pool(p: &PodPlacement) -> Result<(), TestCaseError> {
    let Some(bubble) = &p.cpus else { return Ok(()) };
    let slices = p
        .containers
        .iter()
        .filter(|c| c.exclusive && c.role != ContainerRole::Init)
        .fold(CpuSet::new(), |acc, c| acc.union(&c.cpus));
    for c in p
        .containers
        .iter()
        .filter(|c| c.isolation == Isolation::Pod && c.role != ContainerRole::Init)
    {
        prop_assert_eq!(&c.cpus, &bubble.difference(&slices), "pool of {}", c.name);
    }
    Ok(())
}

fn run(setup: &Setup, ops: &[Op]) -> Result<(Node, Vec<String>), TestCaseError> {
    let (s, nps, cpn, t) = setup.shape;
    let mut n = match Node::new(machine(s, nps, cpn, t), config(setup, s * nps)) {
        Ok(n) => n,
        Err(e) => {
            return Ok((
                Node::new(machine(1, 1, 2, 1), Config::default()).unwrap(),
                vec![format!("config: {e}")],
            ))
        }
    };
    if setup.unavailable {
        let last = n.topology().cpus.iter().map(|c| c.id).max().unwrap_or(0);
        if !n.reserved_cpus().contains(last) {
            n.mark_unavailable(&std::iter::once(last).collect())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
    let fresh = n.snapshot();
    let mut admitted: Vec<String> = Vec::new();
    let mut log = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Admit(pc, cs, claim) => {
                let p = build_pod(i, *pc, cs);
                let claim = claim.map(|(numa, k)| {
                    let all: Vec<&ContainerSpec> =
                        p.init_containers.iter().chain(&p.containers).collect();
                    (numa, all[k % all.len()].name.clone())
                });
                n.set_claims(claim_facts(&p, claim.as_ref()));
                let before = n.snapshot();
                match n.admit(&p) {
                    Ok(placed) => {
                        check_pool(&placed)?;
                        check_claim(&n, setup, &placed, claim.as_ref())?;
                        log.push(format!("{placed:?}"));
                        admitted.push(p.uid.clone());
                    }
                    Err(e) => {
                        unchanged_but_spread(&n.snapshot(), &before)?;
                        log.push(format!("{}: {e}", e.reason()));
                    }
                }
            }
            Op::RemovePod(k) if !admitted.is_empty() => {
                let uid = admitted.remove(k % admitted.len());
                n.remove_pod(&uid);
            }
            Op::RemoveContainer(k, c) if !admitted.is_empty() => {
                let uid = admitted[k % admitted.len()].clone();
                if let Some(p) = n.placement(&uid) {
                    let name = p.containers[c % p.containers.len()].name.clone();
                    n.remove_container(&uid, &name);
                    if n.placement(&uid).is_none() {
                        admitted.retain(|u| *u != uid);
                    }
                }
            }
            _ => {}
        }
        check_invariants(&n, setup)?;
    }
    for uid in n.pods() {
        n.remove_pod(&uid);
    }
    prop_assert_eq!(
        n.snapshot(),
        fresh,
        "removing every pod did not restore the node"
    );
    Ok((n, log))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn admission_keeps_the_node_consistent(setup in setup(), ops in prop::collection::vec(op(), 1..12)) {
        let (a, log_a) = run(&setup, &ops)?;
        let (b, log_b) = run(&setup, &ops)?;
        prop_assert_eq!(log_a, log_b, "same input, different decisions");
        prop_assert_eq!(a.snapshot(), b.snapshot());
    }
}

/// Found by the property above: pod 0's budget holds node 0 and 1 as one memory group; pod 1's
/// claim asks for node 0 alone (best-effort admits it), its init container's block is charged on
/// node 0 alone, then its app container finds no free CPU there and the pod is refused. As in the
/// kubelet (`updateMachineState`, `releaseMemory`), node 0 stays a group of its own after the
/// refusal while pod 0's block still spans both nodes, and the memory is all back.
#[test]
fn a_refused_single_node_block_leaves_its_node_a_group_of_its_own() {
    let setup = Setup {
        shape: (2, 1, 2, 1),
        policy: TopologyPolicy::BestEffort,
        scope: TopologyScope::Pod,
        explicit_reserved: false,
        memory: true,
        plrm: true,
        unavailable: false,
    };
    let ops = [
        Op::Admit(3, vec![(0, 1, 0)], None),
        Op::Admit(0, vec![(2, 1, 1)], Some((0, 0))),
    ];
    if let Err(e) = run(&setup, &ops) {
        panic!("{e}");
    }
    let mut n = Node::new(machine(2, 1, 2, 1), config(&setup, 2)).unwrap();
    let budget = build_pod(0, 3, &[(0, 1, 0)]);
    n.admit(&budget).unwrap();
    let before = n.snapshot();
    assert_eq!(before.memory.machine[&0].cells, [0, 1]);
    let refused = build_pod(1, 0, &[(2, 1, 1)]);
    n.set_claims(claim_facts(&refused, Some(&(0, "c0".to_string()))));
    let e = n.admit(&refused).unwrap_err();
    assert!(e.to_string().contains("cpu"), "{e}");
    let after = n.snapshot();
    assert_eq!(after.memory.machine[&0].cells, [0]);
    assert_eq!(after.memory.machine[&1].cells, [0, 1]);
    assert_eq!(after.memory.pods, before.memory.pods);
    for id in [0, 1] {
        let (a, b) = (&after.memory.machine[&id], &before.memory.machine[&id]);
        assert_eq!(a.assignments, b.assignments);
        assert_eq!(a.memory, b.memory);
    }
}

//! Snapshot → response mapping on a real registry: exclusive vs pool containers, pod scope vs
//! container scope, memory blocks with NUMA topology, sidecars, init containers, extra records.

use std::collections::BTreeMap;

use super::*;
use crate::lifecycle::registry::{ContainerDecision, Registry, Source};
use crate::placement::config::{
    Config, CpuPolicy, MemoryPolicy, ReservedCpus, ReservedMemory, TopologyPolicy, TopologyScope,
};
use crate::placement::node::{Isolation, Node};
use crate::placement::test_pods::{container, guaranteed, plrm_pod, pod_of, GI};
use crate::placement::{ContainerRole, PodSpec, ResourceList, Resources};
use crate::podresources::Snapshot;
use crate::topology::SyntheticSpec;

/// 2 NUMA nodes × 4 CPUs, static CPU and memory policies, 1Gi reserved per node.
fn registry(scope: TopologyScope) -> Registry {
    let topo = SyntheticSpec::new(2, 1, 4, 1, 1).build().unwrap();
    let reserved = |numa_node| ReservedMemory {
        numa_node,
        memory: GI,
        hugepages: BTreeMap::new(),
    };
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::new()),
        accept_no_reserved_cpus: true,
        memory_policy: MemoryPolicy::Static,
        reserved_memory: vec![reserved(0), reserved(1)],
        topology_policy: TopologyPolicy::SingleNumaNode,
        topology_scope: scope,
        ..Config::default()
    };
    Registry::new(Node::new(topo, config).unwrap())
}

/// Admits, commits the sandbox and creates every container the spec lists (ids `<uid>-<name>`).
fn run(registry: &mut Registry, spec: PodSpec) {
    let uid = spec.uid.clone();
    let names: Vec<String> = spec
        .init_containers
        .iter()
        .chain(&spec.containers)
        .map(|c| c.name.clone())
        .collect();
    registry.admit(spec, Source::Spec).unwrap();
    let sandbox = format!("sb-{uid}");
    registry.commit_sandbox(&uid, &sandbox);
    for name in names {
        let d = registry
            .decide_container(&sandbox, &name, |_| unreachable!())
            .unwrap()
            .unwrap();
        registry.commit_container(&format!("{uid}-{name}"), &sandbox, &name, &d);
    }
}

fn only(snapshot: &Snapshot) -> pr::PodResources {
    assert_eq!(snapshot.pods.len(), 1);
    pod_resources(&snapshot.pods[0])
}

fn ids(v: &[i64]) -> CpuSet {
    let mut s = CpuSet::new();
    for &i in v {
        s.insert(u32::try_from(i).unwrap());
    }
    s
}

#[test]
fn pod_scope_bubble_and_exclusive_slice() {
    let mut r = registry(TopologyScope::Pod);
    run(&mut r, plrm_pod("a", 3));
    let res = only(&Snapshot::capture(&r));
    assert_eq!(
        (res.namespace.as_str(), res.name.as_str()),
        ("ns", "name-a")
    );
    let bubble = ids(&res.cpu_ids);
    assert_eq!(bubble.len(), 3, "pod cpu_ids are the whole budget");
    let names: Vec<&str> = res.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["excl", "pool"]);
    let excl = ids(&res.containers[0].cpu_ids);
    assert_eq!(excl.len(), 2, "exclusive container reports its slice");
    assert!(excl.is_subset(&bubble));
    assert!(
        res.containers[1].cpu_ids.is_empty(),
        "pool container: no cpu_ids"
    );
    // The slice is what numa-shim applied to the container.
    let applied = &r.applied("a-excl").unwrap().cpus;
    assert_eq!(&excl, applied);
    // Pod memory bubble: 3Gi of `memory` on one NUMA node, the node of the CPUs.
    assert_eq!(res.memory.len(), 1, "{:?}", res.memory);
    let m = &res.memory[0];
    assert_eq!((m.memory_type.as_str(), m.size), ("memory", 3 * GI));
    let nodes: Vec<i64> = m
        .topology
        .as_ref()
        .unwrap()
        .nodes
        .iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(nodes.len(), 1);
    let numa_cpus = r.node().topology().cpus_in_numa(nodes[0] as u32);
    assert!(
        bubble.is_subset(&numa_cpus),
        "bubble {bubble} on node {nodes:?}"
    );
}

#[test]
fn container_scope_has_no_pod_level_fields() {
    let mut r = registry(TopologyScope::Container);
    let spec = pod_of(
        "c",
        None,
        vec![
            container("excl", ContainerRole::App, guaranteed(2000, 2 * GI)),
            container("side", ContainerRole::App, guaranteed(2000, GI)),
        ],
    );
    run(&mut r, spec);
    let res = only(&Snapshot::capture(&r));
    assert!(res.cpu_ids.is_empty() && res.memory.is_empty(), "{res:?}");
    let a = ids(&res.containers[0].cpu_ids);
    let b = ids(&res.containers[1].cpu_ids);
    assert_eq!((a.len(), b.len()), (2, 2));
    assert!(a.is_disjoint(&b));
    // Container memory blocks with their NUMA node.
    let mem = &res.containers[0].memory;
    assert_eq!(mem.len(), 1);
    assert_eq!(
        (mem[0].memory_type.as_str(), mem[0].size),
        ("memory", 2 * GI)
    );
    assert_eq!(mem[0].topology.as_ref().unwrap().nodes.len(), 1);
}

#[test]
fn burstable_pods_report_no_cpus_and_stopped_pods_vanish() {
    let mut r = registry(TopologyScope::Pod);
    let burst = Resources {
        requests: ResourceList {
            cpu_milli: Some(500),
            ..Default::default()
        },
        ..Default::default()
    };
    run(
        &mut r,
        pod_of("b", None, vec![container("app", ContainerRole::App, burst)]),
    );
    run(&mut r, plrm_pod("a", 3));
    let snapshot = Snapshot::capture(&r);
    let list = list_response(&snapshot);
    assert_eq!(list.pod_resources.len(), 2);
    let b = list
        .pod_resources
        .iter()
        .find(|p| p.name == "name-b")
        .unwrap();
    assert!(b.cpu_ids.is_empty() && b.containers[0].cpu_ids.is_empty());
    assert!(b.containers[0].memory.is_empty());
    r.stop_sandbox("sb-a");
    let names: Vec<String> = Snapshot::capture(&r)
        .pods
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["name-b"]);
}

#[test]
fn sidecars_listed_regular_init_not_extra_records_appended() {
    let mut r = registry(TopologyScope::Pod);
    let spec = pod_of(
        "s",
        Some(guaranteed(4000, 2 * GI)),
        vec![
            container("init", ContainerRole::Init, guaranteed(1000, GI)),
            container("side", ContainerRole::Sidecar, guaranteed(1000, GI)),
            container("app", ContainerRole::App, Resources::default()),
        ],
    );
    run(&mut r, spec);
    // A container the spec does not know (e.g. ephemeral), recorded on the node pool.
    let d = ContainerDecision {
        cpus: r.node().shared_cpus(),
        mems: None,
        cpu_quota: None,
        exclusive: false,
        isolation: Isolation::Host,
    };
    r.commit_container("s-debug", "sb-s", "debugger", &d);
    let res = only(&Snapshot::capture(&r));
    let names: Vec<&str> = res.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["side", "app", "debugger"]);
    assert!(res.containers[2].cpu_ids.is_empty());
    assert_eq!(ids(&res.cpu_ids).len(), 4);
}

#[test]
fn memory_and_cpu_mapping_helpers() {
    let blocks = vec![
        Block {
            numa: vec![0, 1],
            resource: "hugepages-2Mi".into(),
            size: 4 << 20,
        },
        Block {
            numa: vec![1],
            resource: "memory".into(),
            size: 7,
        },
    ];
    let m = memory(&blocks);
    assert_eq!(m[0].memory_type, "hugepages-2Mi");
    assert_eq!(m[0].size, 4 << 20);
    let nodes: Vec<i64> = m[0]
        .topology
        .as_ref()
        .unwrap()
        .nodes
        .iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(nodes, [0, 1]);
    assert_eq!(m[1].size, 7);
    assert_eq!(cpu_ids(&CpuSet::parse("5,1-2").unwrap()), [1, 2, 5]);
    let alloc = allocatable_response(&CpuSet::parse("0-3").unwrap(), &blocks);
    assert_eq!(alloc.cpu_ids, [0, 1, 2, 3]);
    assert_eq!(alloc.memory.len(), 2);
    assert!(alloc.devices.is_empty());
}

#[test]
fn allocatable_is_per_numa_from_the_node() {
    let r = registry(TopologyScope::Pod);
    let snapshot = Snapshot::capture(&r);
    let alloc = allocatable_response(&snapshot.allocatable_cpus, &snapshot.allocatable_memory);
    assert_eq!(alloc.cpu_ids, (0..8).collect::<Vec<i64>>());
    let per_node: Vec<(i64, &str, u64)> = alloc
        .memory
        .iter()
        .map(|m| {
            let nodes = &m.topology.as_ref().unwrap().nodes;
            assert_eq!(nodes.len(), 1);
            (nodes[0].id, m.memory_type.as_str(), m.size)
        })
        .collect();
    // 64Gi per node minus the 1Gi reserved.
    assert_eq!(per_node, [(0, "memory", 63 * GI), (1, "memory", 63 * GI)]);
}

/// The kubelet lists container memory only for containers with memory of their own
/// (`GetResourceIsolationLevel` = container, cm/container_manager_linux.go `GetMemory`): a
/// pod-pool container's memory is the pod's, reported once at pod level. Listing the pod block
/// under each pool container too made a client that adds containers up count it three times.
#[test]
fn pod_pool_containers_list_no_memory_of_their_own() {
    let mut r = registry(TopologyScope::Pod);
    run(&mut r, plrm_pod("a", 3));
    let res = only(&Snapshot::capture(&r));
    assert_eq!(res.containers[1].name, "pool");
    assert_eq!(
        res.containers[1].memory,
        [],
        "pool container: memory is the pod's"
    );
    let excl: u64 = res.containers[0].memory.iter().map(|m| m.size).sum();
    assert!(excl > 0, "the exclusive container keeps its own block");
    let budget: u64 = res.memory.iter().map(|m| m.size).sum();
    let containers: u64 = res
        .containers
        .iter()
        .flat_map(|c| &c.memory)
        .map(|m| m.size)
        .sum();
    assert!(
        containers <= budget,
        "containers {containers} within the pod's {budget}"
    );

    // A budget with no container resources at all (pod-level-resource-demo): no container memory.
    let mut r = registry(TopologyScope::Pod);
    let spec = pod_of(
        "d",
        Some(guaranteed(2000, 2 * GI)),
        vec![
            container("worker", ContainerRole::App, Resources::default()),
            container("telemetry", ContainerRole::App, Resources::default()),
        ],
    );
    run(&mut r, spec);
    let res = only(&Snapshot::capture(&r));
    assert_eq!(res.memory.iter().map(|m| m.size).sum::<u64>(), 2 * GI);
    assert!(
        res.containers.iter().all(|c| c.memory.is_empty()),
        "{res:?}"
    );
}

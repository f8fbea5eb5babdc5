//! `Node` admissions with devices: the device hint moves the CPUs and memory, refusals, the
//! pod-level pods whose devices come at container start.

use std::collections::BTreeMap;

use super::*;
use crate::placement::config::{Config, CpuPolicy, ReservedCpus, TopologyPolicy, TopologyScope};
use crate::placement::node::Node;
use crate::placement::AdmissionError;
use crate::topology::{CpuInfo, NumaNode, Topology};

/// 8 CPUs, 2 NUMA nodes (CPUs 0-3 on node 0, 4-7 on node 1), one core per CPU.
fn machine() -> Topology {
    Topology {
        cpus: (0..8)
            .map(|id| CpuInfo {
                id,
                core: id,
                socket: id / 4,
                die: 0,
                numa: id / 4,
                uncore: id / 4,
            })
            .collect(),
        numa: (0..2)
            .map(|id| NumaNode {
                id,
                memory: 8 << 30,
                hugepages: BTreeMap::new(),
                distances: if id == 0 { vec![10, 20] } else { vec![20, 10] },
            })
            .collect(),
    }
}

fn node(policy: TopologyPolicy, scope: TopologyScope) -> Node {
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(crate::cpuset::CpuSet::parse("0").unwrap()),
        topology_policy: policy,
        topology_scope: scope,
        ..Config::default()
    };
    Node::new(machine(), config).unwrap()
}

fn guaranteed(name: &str, cpus: u64, gpus: u64) -> ContainerSpec {
    let l = ResourceList {
        cpu_milli: Some(cpus * 1000),
        memory: Some(1 << 30),
        extended: if gpus > 0 {
            BTreeMap::from([(GPU.to_string(), gpus)])
        } else {
            BTreeMap::new()
        },
        ..ResourceList::default()
    };
    ContainerSpec {
        name: name.into(),
        role: ContainerRole::App,
        resources: Resources {
            requests: l.clone(),
            limits: l,
        },
    }
}

fn gpu_facts() -> DeviceFacts {
    facts(vec![dev("g0", &[0]), dev("g1", &[1])])
}

#[test]
fn the_device_node_decides_where_the_cpus_go() {
    for scope in [TopologyScope::Container, TopologyScope::Pod] {
        let mut n = node(TopologyPolicy::SingleNumaNode, scope);
        n.set_devices(gpu_facts());
        // g0 is taken by another pod: the pod's GPU and CPUs go to node 1.
        let mut f = gpu_facts();
        f.in_use = BTreeMap::from([(GPU.to_string(), BTreeSet::from(["g0".to_string()]))]);
        let p = test_pods::pod("p", vec![], vec![guaranteed("app", 2, 1)], None);
        let placed = n.admit_with_devices(&p, f).unwrap();
        let c = &placed.containers[0];
        assert_eq!(c.devices[GPU], vec!["g1".to_string()], "{scope:?}");
        assert_eq!(c.cpus.to_string(), "4-5", "{scope:?}");
    }
}

#[test]
fn without_devices_the_cpus_go_to_node_0_first() {
    // The same pod without the device request: the test above can fail.
    let mut n = node(TopologyPolicy::SingleNumaNode, TopologyScope::Container);
    let p = test_pods::pod("p", vec![], vec![guaranteed("app", 2, 0)], None);
    let placed = n.admit(&p).unwrap();
    assert_eq!(placed.containers[0].cpus.to_string(), "1-2");
}

#[test]
fn a_device_node_without_room_for_the_cpus_is_refused() {
    let mut n = node(TopologyPolicy::SingleNumaNode, TopologyScope::Container);
    n.set_devices(gpu_facts());
    let filler = test_pods::pod("f", vec![], vec![guaranteed("app", 3, 0)], None);
    n.admit(&filler).unwrap(); // node 0 has no free CPU left (0 is reserved)
    let mut f = gpu_facts();
    f.in_use = BTreeMap::from([(GPU.to_string(), BTreeSet::from(["g1".to_string()]))]);
    let p = test_pods::pod("p", vec![], vec![guaranteed("app", 2, 1)], None);
    let err = n.admit_with_devices(&p, f).unwrap_err();
    assert_eq!(err, AdmissionError::TopologyAffinity);
    // The refused pod holds nothing: the next one gets g0.
    assert!(n.device_manager().ledger().get("p").is_none());
}

#[test]
fn devices_go_back_with_the_pod_and_the_next_pod_gets_them() {
    let mut n = node(TopologyPolicy::BestEffort, TopologyScope::Container);
    n.set_devices(gpu_facts());
    let a = test_pods::pod("a", vec![], vec![guaranteed("app", 1, 1)], None);
    let b = test_pods::pod("b", vec![], vec![guaranteed("app", 1, 1)], None);
    assert_eq!(n.admit(&a).unwrap().containers[0].devices[GPU], vec!["g0"]);
    assert_eq!(n.admit(&b).unwrap().containers[0].devices[GPU], vec!["g1"]);
    n.remove_pod("a");
    let c = test_pods::pod("c", vec![], vec![guaranteed("app", 1, 1)], None);
    assert_eq!(n.admit(&c).unwrap().containers[0].devices[GPU], vec!["g0"]);
    let snap = n.snapshot();
    let mut m = node(TopologyPolicy::BestEffort, TopologyScope::Container);
    m.restore(snap).unwrap();
    assert_eq!(m.container("c", "app").unwrap().devices[GPU], vec!["g0"]);
}

#[test]
fn pod_level_pods_under_pod_scope_get_devices_at_container_start() {
    let mut n = node(TopologyPolicy::SingleNumaNode, TopologyScope::Pod);
    n.set_devices(gpu_facts());
    let mut p = test_pods::pod("p", vec![], vec![guaranteed("app", 0, 1)], None);
    p.containers[0].resources.requests.cpu_milli = None;
    p.containers[0].resources.limits.cpu_milli = None;
    p.containers[0].resources.requests.memory = None;
    p.containers[0].resources.limits.memory = None;
    p.resources = Some(Resources {
        requests: ResourceList {
            cpu_milli: Some(2000),
            memory: Some(1 << 30),
            ..ResourceList::default()
        },
        limits: ResourceList {
            cpu_milli: Some(2000),
            memory: Some(1 << 30),
            ..ResourceList::default()
        },
    });
    let placed = n.admit(&p).unwrap();
    assert!(placed.containers[0].devices.is_empty());
    assert!(n.start_container("p", "app"));
    assert_eq!(n.container("p", "app").unwrap().devices[GPU], vec!["g0"]);
}

/// The kubelet's device hints enumerate every subset of the nodes a resource's devices sit on.
/// A resource on more than `MAX_DEVICE_NODES` nodes gets a clear refusal for the pods that ask
/// for it, at once, instead of 2^N work; pods without it are placed as before.
#[test]
fn devices_on_too_many_nodes_are_refused_not_enumerated() {
    use crate::placement::config::TopologyOptions;
    use crate::placement::device::manager::MAX_DEVICE_NODES;
    let nodes = MAX_DEVICE_NODES as u32 + 4;
    let topology = crate::topology::SyntheticSpec::new(2, nodes / 2, 2, 1, 1)
        .build()
        .unwrap();
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(crate::cpuset::CpuSet::parse("0").unwrap()),
        topology_policy: TopologyPolicy::BestEffort,
        topology_scope: TopologyScope::Pod,
        topology_options: TopologyOptions {
            max_allowable_numa_nodes: nodes,
            ..TopologyOptions::default()
        },
        ..Config::default()
    };
    let mut n = Node::new(topology, config).unwrap();
    let devices = (0..nodes).map(|i| dev(&format!("g{i}"), &[i])).collect();
    n.set_devices(facts(devices));
    let started = std::time::Instant::now();
    let err = n
        .admit(&test_pods::pod(
            "p",
            vec![],
            vec![guaranteed("app", 1, 1)],
            None,
        ))
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the budget"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    n.admit(&test_pods::pod(
        "q",
        vec![],
        vec![guaranteed("app", 1, 0)],
        None,
    ))
    .expect("a pod without devices is placed");
}

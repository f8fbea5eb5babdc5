use std::collections::BTreeMap;

use super::*;
use crate::cpuset::CpuSet;
use crate::topology::{CpuInfo, NumaNode, Topology};

fn machine() -> Topology {
    let cpus = (0..8)
        .map(|id| CpuInfo {
            id,
            core: id / 2,
            socket: id / 4,
            die: id / 4,
            numa: id / 4,
            uncore: id / 4,
        })
        .collect();
    let numa = (0..2)
        .map(|id| NumaNode {
            id,
            memory: 4 << 30,
            ..Default::default()
        })
        .collect();
    Topology { cpus, numa }
}

fn view() -> PlacementView {
    let reserved = CpuSet::parse("0").unwrap();
    let shared = CpuSet::parse("1,6-7").unwrap();
    let mut exclusive = BTreeMap::new();
    for cpu in [2, 3] {
        exclusive.insert(
            cpu,
            vec![ContainerRef {
                pod: "default/a&b".into(),
                container: "main".into(),
            }],
        );
    }
    let mut pod_pool = BTreeMap::new();
    for cpu in [2, 3, 4, 5] {
        pod_pool.insert(cpu, "default/a&b".to_string());
    }
    PlacementView {
        reserved_cpus: reserved.to_list(),
        shared_cpus: shared.to_list(),
        numa_nodes: numa_nodes(&machine(), &reserved, &shared, &exclusive, &pod_pool),
        pods: Vec::new(),
        refused: Vec::new(),
        pod_knowledge: Vec::new(),
        devices_without_numa: Vec::new(),
    }
}

#[test]
fn owners_follow_precedence() {
    let v = view();
    let owners: Vec<&Owner> = v
        .numa_nodes
        .iter()
        .flat_map(|n| &n.cpus)
        .map(|c| &c.owner)
        .collect();
    assert_eq!(owners[0], &Owner::Reserved);
    assert_eq!(owners[1], &Owner::Shared);
    assert!(matches!(
        owners[2],
        Owner::Exclusive {
            in_pod_budget: true,
            ..
        }
    ));
    assert_eq!(
        owners[4],
        &Owner::PodPool {
            pod: "default/a&b".into()
        }
    );
    assert_eq!(owners[6], &Owner::Shared);
    assert_eq!(v.numa_nodes.len(), 2);
    assert_eq!(v.numa_nodes[1].memory_total, 4 << 30);
}

#[test]
fn json_round_trips() {
    let v = view();
    let back: PlacementView = serde_json::from_str(&v.to_json()).unwrap();
    assert_eq!(back, v);
    assert!(v.to_json().contains("\"kind\": \"pod-pool\""));
}

#[test]
fn table_marks_every_cpu() {
    let text = render_table(&view());
    assert!(text.contains("NUMA node 1"), "{text}");
    assert!(
        text.contains("cpu    2  core    1  socket  0  exclusive    default/a&b main"),
        "{text}"
    );
    assert!(
        text.contains("cpu    5  core    2  socket  1  pod pool     default/a&b"),
        "{text}"
    );
    assert_eq!(text.matches("  cpu ").count(), 8);
}

#[test]
fn pools_are_published_per_numa_node() {
    let metrics = crate::telemetry::Metrics::new();
    crate::lifecycle::gauges::publish_pool_counts(&view_pool_counts(&view()), &metrics);
    let text = metrics.render();
    assert!(
        text.contains(r#"numa_shim_pool_cpus{numa_node="0",pool="pod"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"numa_shim_pool_cpus{numa_node="0",pool="reserved"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"numa_shim_pool_cpus{numa_node="1",pool="shared"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"numa_shim_pool_cpus{numa_node="1",pool="pod"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"numa_shim_pool_cpus{numa_node="1",pool="exclusive"} 0"#),
        "{text}"
    );
}

#[test]
fn svg_escapes_names_and_draws_every_cpu() {
    let svg = render_svg(&view());
    assert!(svg.contains("default/a&amp;b"));
    assert!(!svg.contains("a&b"));
    for cpu in 0..8 {
        assert!(svg.contains(&format!(r#"id="cpu-{cpu}""#)), "cpu {cpu}");
    }
}

#[test]
fn bytes_use_binary_units() {
    assert_eq!(table::bytes(0), "0");
    assert_eq!(table::bytes(1 << 30), "1Gi");
    assert_eq!(table::bytes(1124 << 20), "1124Mi");
    assert_eq!(table::bytes(1000), "1000");
}

#[test]
#[ignore = "writes the sample SVG to $NUMA_SHIM_SVG_OUT for a look"]
fn write_sample_svg() {
    if let Ok(path) = std::env::var("NUMA_SHIM_SVG_OUT") {
        std::fs::write(path, render_svg(&view())).unwrap();
    }
}

#[test]
fn refused_pods_and_pod_spec_sources_are_listed() {
    let mut v = view();
    v.refused = vec![crate::lifecycle::refusals::RefusalView {
        uid: "u".into(),
        namespace: "default".into(),
        name: "empty-shared-pool".into(),
        reason: "TopologyAffinityError".into(),
        message: "Resources cannot be allocated with Topology locality".into(),
        count: 7,
        first_refused: 1,
        last_refused: 2,
    }];
    v.pod_knowledge = vec![super::KnowledgeView {
        source: "pods-api".into(),
        link: "live".into(),
    }];
    let table = render_table(&v);
    let line = table
        .lines()
        .find(|l| l.starts_with("default/empty-shared-pool"))
        .unwrap();
    assert!(line.contains("TopologyAffinityError"), "{line}");
    assert!(line.contains(" 7  Resources cannot be allocated"), "{line}");
    assert!(table.contains("pod specs from: pods-api live"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&v.to_json()).unwrap();
    assert_eq!(json["refused"][0]["count"], 7);
    assert_eq!(json["podKnowledge"][0]["link"], "live");
}

/// The kubelet's devices: gpu0 on node 0 held by `default/a&b main`, gpu1 on node 1 free, a
/// NIC without topology.
fn with_devices() -> PlacementView {
    use crate::proto::podresources::v1 as pr;
    let devs = |ids: &[&str], resource: &str, nodes: &[i64]| pr::ContainerDevices {
        resource_name: resource.into(),
        device_ids: ids.iter().map(|s| s.to_string()).collect(),
        topology: (!nodes.is_empty()).then(|| pr::TopologyInfo {
            nodes: nodes.iter().map(|&id| pr::NumaNode { id }).collect(),
        }),
    };
    let allocatable = pr::AllocatableResourcesResponse {
        devices: vec![
            devs(&["gpu1"], "example.com/gpu", &[1]),
            devs(&["gpu0"], "example.com/gpu", &[0]),
            devs(&["nic0"], "example.com/nic", &[]),
        ],
        ..Default::default()
    };
    let list = pr::ListPodResourcesResponse {
        pod_resources: vec![pr::PodResources {
            name: "a&b".into(),
            namespace: "default".into(),
            containers: vec![pr::ContainerResources {
                name: "main".into(),
                devices: vec![devs(&["gpu0"], "example.com/gpu", &[0])],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut v = view();
    v.pods.push(PodView {
        uid: "u".into(),
        namespace: "default".into(),
        name: "a&b".into(),
        source: "pods-api".into(),
        sandbox_id: None,
        cpus: Some("2-5".into()),
        memory_nodes: None,
        containers: vec![ContainerView {
            name: "main".into(),
            id: None,
            cpus: "2-3".into(),
            pool: "exclusive".into(),
            memory_nodes: None,
            devices: Vec::new(),
        }],
    });
    add_devices(&mut v, &allocatable, &list);
    v
}

#[test]
fn devices_per_numa_node_with_their_holders() {
    let v = with_devices();
    let main = ContainerRef {
        pod: "default/a&b".into(),
        container: "main".into(),
    };
    let gpu = |id: &str, holder: Option<ContainerRef>| DeviceView {
        resource: "example.com/gpu".into(),
        id: id.into(),
        holder,
    };
    assert_eq!(v.numa_nodes[0].devices, [gpu("gpu0", Some(main))]);
    assert_eq!(v.numa_nodes[1].devices, [gpu("gpu1", None)]);
    assert_eq!(v.devices_without_numa.len(), 1);
    assert_eq!(v.devices_without_numa[0].id, "nic0");
    assert_eq!(v.pods[0].containers[0].devices, ["example.com/gpu=gpu0"]);
    // JSON: the view round-trips; a view without devices has no device fields.
    let back: PlacementView = serde_json::from_str(&v.to_json()).unwrap();
    assert_eq!(back, v);
    let json: serde_json::Value = serde_json::from_str(&v.to_json()).unwrap();
    assert_eq!(
        json["numaNodes"][0]["devices"][0]["holder"]["container"],
        "main"
    );
    assert_eq!(
        json["pods"][0]["containers"][0]["devices"][0],
        "example.com/gpu=gpu0"
    );
    assert!(!view().to_json().contains("devices"));
}

#[test]
fn devices_in_the_table_and_the_svg() {
    let v = with_devices();
    let table = render_table(&v);
    let node0 = table.split("NUMA node 1").next().unwrap();
    assert!(
        node0.contains("device example.com/gpu          gpu0         default/a&b main"),
        "{table}"
    );
    let node1 = table.split("NUMA node 1").nth(1).unwrap();
    assert!(node1.contains("gpu1         free"), "{table}");
    assert!(
        table.contains("devices without a NUMA node\n  device example.com/nic"),
        "{table}"
    );
    assert!(table.contains("devices example.com/gpu=gpu0"), "{table}");
    let svg = render_svg(&v);
    let numa0 = svg.split(r#"id="numa-1""#).next().unwrap();
    assert!(
        numa0.contains("device example.com/gpu gpu0: default/a&amp;b main"),
        "{svg}"
    );
    assert!(svg.contains("device example.com/gpu gpu1: free"), "{svg}");
}

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

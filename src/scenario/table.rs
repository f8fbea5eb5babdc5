//! The human view of a report: a pod/container table, then the NUMA map — for each NUMA node,
//! every CPU marked reserved, exclusive (with its pod and container), pod shared pool (with its
//! pod), node shared, or unavailable (held by something the scenario declared beforehand).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::{PodReport, Report};
use crate::cpuset::CpuSet;
use crate::inspect::{self, ContainerRef};
use crate::topology::Topology;

/// Renders the report for a terminal.
pub fn render(report: &Report, topology: &Topology) -> String {
    let mut out = String::new();
    pods_table(&mut out, &report.pods);
    out.push('\n');
    numa_map(&mut out, report, topology);
    out
}

fn parse(list: &str) -> CpuSet {
    CpuSet::parse(list).unwrap_or_default()
}

fn pods_table(out: &mut String, pods: &[PodReport]) {
    let _ = writeln!(
        out,
        "{:<40} {:<9} {:<12} {:<6} REASON",
        "POD", "ADMITTED", "POD CPUS", "MEMS"
    );
    for p in pods {
        let line = format!(
            "{:<40} {:<9} {:<12} {:<6} {}",
            format!("{}/{}", p.namespace, p.name),
            if p.admitted { "yes" } else { "no" },
            p.cpus.as_deref().unwrap_or("-"),
            p.memory_nodes.as_deref().unwrap_or("-"),
            p.reason.as_deref().unwrap_or(""),
        );
        let _ = writeln!(out, "{}", line.trim_end());
        if let Some(m) = &p.message {
            let _ = writeln!(out, "    {m}");
        }
        let bubble = p.cpus.as_deref().map(parse);
        for c in &p.containers {
            let pool = match (&bubble, c.exclusive) {
                (_, true) => "exclusive",
                (Some(b), false) if parse(&c.cpus).is_subset(b) => "pod pool",
                _ => "node pool",
            };
            let quota = match c.cpu_quota {
                -1 => "unlimited".to_string(),
                0 => "none".to_string(),
                q => q.to_string(),
            };
            let role = serde_json::to_value(c.role)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    {:<28} {:<8} cpus {:<12} {:<10} quota {:<10} mems {}",
                c.name,
                role,
                c.cpus,
                pool,
                quota,
                c.memory_nodes.as_deref().unwrap_or("-"),
            );
        }
    }
}

fn numa_map(out: &mut String, report: &Report, topology: &Topology) {
    let reserved = parse(&report.node.reserved_cpus);
    let mut shared = parse(&report.node.shared_cpus);
    // Nothing pinned at all (CPU policy none): every CPU runs anything.
    let pinned = report
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .any(|c| !c.cpus.is_empty());
    if shared.is_empty() && reserved.is_empty() && !pinned {
        shared = topology.cpus.iter().map(|c| c.id).collect();
    }
    let mut exclusive: BTreeMap<u32, Vec<ContainerRef>> = BTreeMap::new();
    let mut pod_pool: BTreeMap<u32, String> = BTreeMap::new();
    for p in report.pods.iter().filter(|p| p.admitted) {
        let key = format!("{}/{}", p.namespace, p.name);
        for c in p.containers.iter().filter(|c| c.exclusive) {
            for cpu in parse(&c.cpus).iter() {
                exclusive.entry(cpu).or_default().push(ContainerRef {
                    pod: key.clone(),
                    container: c.name.clone(),
                });
            }
        }
        if let Some(bubble) = &p.cpus {
            for cpu in parse(bubble).iter() {
                pod_pool.insert(cpu, key.clone());
            }
        }
    }
    let nodes = inspect::numa_nodes(topology, &reserved, &shared, &exclusive, &pod_pool);
    inspect::numa_map(out, &nodes);
}

//! The terminal view: pods and containers, then the NUMA map (one line per CPU with its owner,
//! then the memory of the node).

use std::fmt::Write as _;

use super::{NumaView, Owner, PlacementView};

/// The whole live view for a terminal.
pub fn render_table(view: &PlacementView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<40} {:<9} {:<12} {:<6} SANDBOX",
        "POD", "SOURCE", "POD CPUS", "MEMS"
    );
    for p in &view.pods {
        let line = format!(
            "{:<40} {:<9} {:<12} {:<6} {}",
            format!("{}/{}", p.namespace, p.name),
            p.source,
            p.cpus.as_deref().unwrap_or("-"),
            p.memory_nodes.as_deref().unwrap_or("-"),
            p.sandbox_id.as_deref().unwrap_or("-"),
        );
        let _ = writeln!(out, "{}", line.trim_end());
        for c in &p.containers {
            let _ = writeln!(
                out,
                "    {:<28} cpus {:<12} {:<11} mems {:<6} {}",
                c.name,
                c.cpus,
                c.pool,
                c.memory_nodes.as_deref().unwrap_or("-"),
                c.id.as_deref().unwrap_or("-"),
            );
            if !c.devices.is_empty() {
                let _ = writeln!(out, "    {:<28} devices {}", "", c.devices.join(", "));
            }
        }
    }
    if !view.refused.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<40} {:<24} {:>8}  MESSAGE",
            "REFUSED POD (kubelet retrying)", "REASON", "REFUSALS"
        );
        for r in &view.refused {
            let _ = writeln!(
                out,
                "{:<40} {:<24} {:>8}  {}",
                format!("{}/{}", r.namespace, r.name),
                r.reason,
                r.count,
                r.message
            );
        }
    }
    if !view.pod_knowledge.is_empty() {
        let links: Vec<String> = view
            .pod_knowledge
            .iter()
            .map(|k| format!("{} {}", k.source, k.link))
            .collect();
        let _ = writeln!(
            out,
            "\npod specs from: {} (else inferred from CRI)",
            links.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nreserved CPUs {}  shared CPUs {}\n",
        empty_dash(&view.reserved_cpus),
        empty_dash(&view.shared_cpus)
    );
    numa_map(&mut out, &view.numa_nodes);
    if !view.devices_without_numa.is_empty() {
        let _ = writeln!(out, "devices without a NUMA node");
        for d in &view.devices_without_numa {
            let _ = writeln!(out, "{}", device_line(d));
        }
    }
    out
}

/// `  device <resource> <id>  <holder or free>`.
fn device_line(d: &super::DeviceView) -> String {
    let holder = d.holder.as_ref().map_or_else(
        || "free".to_string(),
        |h| format!("{} {}", h.pod, h.container),
    );
    format!("  device {:<24} {:<12} {holder}", d.resource, d.id)
}

/// One block per NUMA node: every CPU with its owner, then memory when accounted.
pub fn numa_map(out: &mut String, nodes: &[NumaView]) {
    for n in nodes {
        let _ = writeln!(out, "NUMA node {}", n.id);
        for c in &n.cpus {
            let _ = writeln!(
                out,
                "  cpu {:>4}  core {:>4}  socket {:>2}  {}",
                c.id,
                c.core,
                c.socket,
                mark(&c.owner)
            );
        }
        for m in &n.memory {
            let _ = writeln!(
                out,
                "  {:<16} total {}  reserved {}  pod {}  exclusive {}  free {}",
                m.resource,
                bytes(m.total),
                bytes(m.system_reserved),
                bytes(m.pod),
                bytes(m.exclusive),
                bytes(m.free)
            );
        }
        for d in &n.devices {
            let _ = writeln!(out, "{}", device_line(d));
        }
    }
}

fn mark(owner: &Owner) -> String {
    match owner {
        Owner::Exclusive { containers, .. } => {
            let names: Vec<String> = containers
                .iter()
                .map(|c| format!("{} {}", c.pod, c.container))
                .collect();
            format!("exclusive    {}", names.join(", "))
        }
        Owner::PodPool { pod } => format!("pod pool     {pod}"),
        Owner::Reserved => "reserved".to_string(),
        Owner::Shared => "shared".to_string(),
        Owner::Unavailable => "unavailable".to_string(),
    }
}

fn empty_dash(list: &str) -> &str {
    if list.is_empty() {
        "-"
    } else {
        list
    }
}

/// Bytes in the largest binary unit that divides them, like Kubernetes quantities (`1Gi`).
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if n == 0 {
        return "0".to_string();
    }
    for (unit, size) in UNITS {
        if n.is_multiple_of(size) {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

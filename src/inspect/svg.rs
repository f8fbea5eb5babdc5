//! A self-contained SVG of the NUMA map for reports: one box per NUMA node, one cell per CPU
//! coloured by owner (each pod has its own hue: darker for exclusive slices, lighter for its
//! pod pool), memory under each box, and a legend. No scripts, fonts or external references.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::table::bytes;
use super::{NumaView, Owner, PlacementView};

const COLUMNS: usize = 8;
const CELL_W: usize = 64;
const CELL_H: usize = 40;
const GAP: usize = 4;
const PAD: usize = 12;
const HEADER: usize = 24;
const LEGEND_ROW: usize = 18;

const RESERVED: &str = "#9e9e9e";
const SHARED: &str = "#dcedc8";
const UNAVAILABLE: &str = "#424242";

/// The view as an SVG document.
pub fn render_svg(view: &PlacementView) -> String {
    let hues = pod_hues(&view.numa_nodes);
    let box_w = PAD * 2 + COLUMNS * (CELL_W + GAP) - GAP;
    let mut out = String::new();
    let mut y = PAD;
    let mut body = String::new();
    for n in &view.numa_nodes {
        y = numa_box(&mut body, n, &hues, y, box_w) + PAD;
    }
    let legend = legend(&hues);
    let width = box_w + PAD * 2;
    let height = y + PAD + legend.len() * LEGEND_ROW;
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, "<title>numa-shim placement</title>");
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    out.push_str(&body);
    for (i, (label, colour)) in legend.iter().enumerate() {
        let ly = y + i * LEGEND_ROW;
        let _ = writeln!(
            out,
            r##"<rect x="{PAD}" y="{ly}" width="14" height="14" fill="{colour}" stroke="#333333"/><text x="{}" y="{}">{}</text>"##,
            PAD + 20,
            ly + 11,
            escape(label)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Draws one NUMA node's box at `y`; returns where it ends.
fn numa_box(
    out: &mut String,
    n: &NumaView,
    hues: &BTreeMap<String, u32>,
    y: usize,
    w: usize,
) -> usize {
    let rows = n.cpus.len().div_ceil(COLUMNS).max(1);
    let memory_lines = n.memory.len().max(1) + n.devices.len();
    let h = HEADER + rows * (CELL_H + GAP) + memory_lines * 14 + PAD;
    let _ = writeln!(
        out,
        r##"<g class="numa" id="numa-{}"><rect x="{PAD}" y="{y}" width="{w}" height="{h}" fill="#f5f5f5" stroke="#333333" rx="6"/><text x="{}" y="{}" font-weight="bold" font-size="13">NUMA node {}</text>"##,
        n.id,
        PAD * 2,
        y + 17,
        n.id
    );
    for (i, c) in n.cpus.iter().enumerate() {
        let cx = PAD * 2 + (i % COLUMNS) * (CELL_W + GAP);
        let cy = y + HEADER + (i / COLUMNS) * (CELL_H + GAP);
        let (fill, text_fill, detail) = style(&c.owner, hues);
        let _ = writeln!(
            out,
            r##"<g class="cpu" id="cpu-{id}"><title>cpu {id} (core {core}, socket {socket}): {detail}</title><rect x="{cx}" y="{cy}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" stroke="#333333"/><text x="{tx}" y="{ty}" text-anchor="middle" fill="{text_fill}">{id}</text></g>"##,
            id = c.id,
            core = c.core,
            socket = c.socket,
            detail = escape(&detail),
            tx = cx + CELL_W / 2,
            ty = cy + CELL_H / 2 + 4,
        );
    }
    let mut ly = y + HEADER + rows * (CELL_H + GAP) + 12;
    if n.memory.is_empty() {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{ly}">memory {} (not managed)</text>"#,
            PAD * 2,
            bytes(n.memory_total)
        );
    }
    for m in &n.memory {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{ly}">{} total {} reserved {} pod {} exclusive {} free {}</text>"#,
            PAD * 2,
            escape(&m.resource),
            bytes(m.total),
            bytes(m.system_reserved),
            bytes(m.pod),
            bytes(m.exclusive),
            bytes(m.free)
        );
        ly += 14;
    }
    if n.memory.is_empty() {
        ly += 14;
    }
    for d in &n.devices {
        let holder = d.holder.as_ref().map_or_else(
            || "free".to_string(),
            |h| format!("{} {}", h.pod, h.container),
        );
        let _ = writeln!(
            out,
            r#"<text class="device" x="{}" y="{ly}">device {} {}: {}</text>"#,
            PAD * 2,
            escape(&d.resource),
            escape(&d.id),
            escape(&holder)
        );
        ly += 14;
    }
    out.push_str("</g>\n");
    y + h
}

/// Fill, text colour and tooltip of a CPU cell.
fn style(owner: &Owner, hues: &BTreeMap<String, u32>) -> (String, &'static str, String) {
    match owner {
        Owner::Exclusive { containers, .. } => {
            let hue = containers
                .first()
                .and_then(|c| hues.get(&c.pod))
                .copied()
                .unwrap_or(0);
            let names: Vec<String> = containers
                .iter()
                .map(|c| format!("{} {}", c.pod, c.container))
                .collect();
            (
                hsl(hue, 45),
                "#ffffff",
                format!("exclusive {}", names.join(", ")),
            )
        }
        Owner::PodPool { pod } => {
            let hue = hues.get(pod).copied().unwrap_or(0);
            (hsl(hue, 80), "#000000", format!("pod pool {pod}"))
        }
        Owner::Reserved => (RESERVED.to_string(), "#000000", "reserved".to_string()),
        Owner::Shared => (
            SHARED.to_string(),
            "#000000",
            "node shared pool".to_string(),
        ),
        Owner::Unavailable => (
            UNAVAILABLE.to_string(),
            "#ffffff",
            "unavailable".to_string(),
        ),
    }
}

/// A hue per pod seen on any CPU, spread around the colour wheel in order of appearance.
fn pod_hues(nodes: &[NumaView]) -> BTreeMap<String, u32> {
    let mut pods: Vec<String> = Vec::new();
    for c in nodes.iter().flat_map(|n| &n.cpus) {
        let names: Vec<&str> = match &c.owner {
            Owner::Exclusive { containers, .. } => {
                containers.iter().map(|c| c.pod.as_str()).collect()
            }
            Owner::PodPool { pod } => vec![pod.as_str()],
            _ => Vec::new(),
        };
        for name in names {
            if !pods.iter().any(|p| p == name) {
                pods.push(name.to_string());
            }
        }
    }
    pods.into_iter()
        .enumerate()
        .map(|(i, p)| (p, (i as u32 * 137 + 210) % 360))
        .collect()
}

fn legend(hues: &BTreeMap<String, u32>) -> Vec<(String, String)> {
    let mut rows = vec![
        ("reserved".to_string(), RESERVED.to_string()),
        ("node shared pool".to_string(), SHARED.to_string()),
        ("unavailable".to_string(), UNAVAILABLE.to_string()),
    ];
    for (pod, &hue) in hues {
        rows.push((format!("{pod}: exclusive"), hsl(hue, 45)));
        rows.push((format!("{pod}: pod pool"), hsl(hue, 80)));
    }
    rows
}

fn hsl(hue: u32, lightness: u32) -> String {
    format!("hsl({hue},60%,{lightness}%)")
}

/// Escapes text for XML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

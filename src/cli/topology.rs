//! `numa-shim topology`: discovers the machine (or reads a topology JSON file) and prints it as
//! the topology JSON or as a table per NUMA node. Read-only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cpuset::CpuSet;
use crate::quantity::format_binary;
use crate::topology::Topology;

/// Arguments of `numa-shim topology`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// sysfs root to discover from; a topology JSON file is read instead.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Json)]
    pub output: Output,
}

/// Output format of `numa-shim topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// The topology JSON (input of `simulate`).
    Json,
    /// Per NUMA node: memory, hugepages, distances and CPUs by socket, uncore cache and core.
    Table,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), super::CliError> {
    let topology = Topology::load(&args.sysfs)?;
    match args.output {
        Output::Json => print!("{}", topology.to_json()?),
        Output::Table => print!("{}", render_table(&topology)),
    }
    Ok(())
}

/// The table: one block per NUMA node, then one line per (socket, uncore) listing its cores
/// as `core[cpus]`, e.g.
///
/// ```text
/// numa 0  cpus 0-1  memory 6252756Ki  hugepages 2Mi=0 1Gi=0  distances 10
///   socket 0  uncore 0  cpus 0-1  cores 0[0] 1[1]
/// ```
pub fn render_table(topology: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} cpus, {} cores, {} sockets, {} numa nodes, {} uncore caches",
        topology.cpus.len(),
        topology.num_cores(),
        topology.num_sockets(),
        topology.numa.len(),
        topology.num_uncore_caches()
    );
    for node in &topology.numa {
        let cpus = topology.cpus_in_numa(node.id);
        let cpu_text = if cpus.is_empty() {
            "none".to_string()
        } else {
            cpus.to_list()
        };
        let hugepages: Vec<String> = node
            .hugepages
            .iter()
            .map(|(size, total)| format!("{}={}", format_binary(*size), format_binary(*total)))
            .collect();
        let distances: Vec<String> = node.distances.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "numa {}  cpus {cpu_text}  memory {}  hugepages {}  distances {}",
            node.id,
            format_binary(node.memory),
            or_none(&hugepages.join(" ")),
            or_none(&distances.join(" ")),
        );
        // (socket, uncore) → core id → threads
        let mut groups: BTreeMap<(u32, u32), BTreeMap<u32, CpuSet>> = BTreeMap::new();
        for cpu in topology.cpus.iter().filter(|c| c.numa == node.id) {
            groups
                .entry((cpu.socket, cpu.uncore))
                .or_default()
                .entry(cpu.core)
                .or_default()
                .insert(cpu.id);
        }
        for ((socket, uncore), cores) in &groups {
            let all = cores.values().fold(CpuSet::new(), |acc, c| acc.union(c));
            let list: Vec<String> = cores
                .iter()
                .map(|(core, threads)| format!("{core}[{threads}]"))
                .collect();
            let _ = writeln!(
                out,
                "  socket {socket}  uncore {uncore}  cpus {all}  cores {}",
                list.join(" ")
            );
        }
    }
    out
}

fn or_none(text: &str) -> &str {
    if text.is_empty() {
        "none"
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_groups_cpus_by_socket_uncore_and_core() {
        let json = r#"{"cpus": [
            {"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 1, "core": 1, "socket": 0, "numa": 0, "uncore": 1},
            {"id": 2, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 3, "core": 1, "socket": 0, "numa": 0, "uncore": 1}],
          "numa": [{"id": 0, "memory": "64Gi", "hugepages": {"1Gi": "2Gi", "2Mi": "0"}, "distances": [10, 21]},
                   {"id": 1, "memory": "1Ti", "distances": [21, 10]}]}"#;
        let table = render_table(&Topology::from_json_str(json).unwrap());
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "4 cpus, 2 cores, 1 sockets, 2 numa nodes, 2 uncore caches",
                "numa 0  cpus 0-3  memory 64Gi  hugepages 2Mi=0 1Gi=2Gi  distances 10 21",
                "  socket 0  uncore 0  cpus 0,2  cores 0[0,2]",
                "  socket 0  uncore 1  cpus 1,3  cores 1[1,3]",
                "numa 1  cpus none  memory 1Ti  hugepages none  distances 21 10",
            ]
        );
    }
}

//! Test support: writes a fake sysfs tree for a [`Topology`] into a directory (a temp dir), in
//! the shape a Linux x86 kernel gives, so discovery can be tested without the machine.
//!
//! Per CPU: `cpuN/online`; for online CPUs `topology/{physical_package_id, die_id, core_id,
//! core_cpus_list, thread_siblings_list}` (core_id is the core's rank inside its socket, as the
//! kernel numbers it) and `cache/index0..3` (L1d, L1i, L2 per core; L3 `id` = the CPU's
//! `uncore`, shared by all online CPUs with that uncore id). Offline CPUs get `online` = 0 and no
//! topology or cache directory, as the kernel removes them; sibling and node lists still name
//! them (the worst case for discovery). Per NUMA node: `cpulist`, `meminfo`, `distance`,
//! `hugepages/hugepages-<kB>kB/nr_hugepages`.
//!
//! Only ever writes under the directory it is given.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

use super::{CpuInfo, Topology};
use crate::cpuset::CpuSet;

/// A fake sysfs tree to write; built from a topology, then adjusted.
#[derive(Debug, Clone)]
pub struct FakeSysfs {
    topology: Topology,
    offline: CpuSet,
    node_dir: bool,
    sibling_lists: bool,
    caches: bool,
}

impl FakeSysfs {
    /// The tree for this machine, every CPU online.
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            offline: CpuSet::new(),
            node_dir: true,
            sibling_lists: true,
            caches: true,
        }
    }

    /// Marks these CPUs offline.
    pub fn offline(mut self, cpus: CpuSet) -> Self {
        self.offline = cpus;
        self
    }

    /// No `devices/system/node/` (a kernel without NUMA); memory goes to `<root>/../proc/meminfo`
    /// and hugepages to `kernel/mm/hugepages/`, summed over the nodes.
    pub fn without_node_dir(mut self) -> Self {
        self.node_dir = false;
        self
    }

    /// No `core_cpus_list` / `thread_siblings_list` (old kernels).
    pub fn without_sibling_lists(mut self) -> Self {
        self.sibling_lists = false;
        self
    }

    /// No `cache/` directories (some VMs and arm64 guests).
    pub fn without_caches(mut self) -> Self {
        self.caches = false;
        self
    }

    /// Writes the tree with `sysfs_root` playing "/sys".
    pub fn write(&self, sysfs_root: &Path) -> io::Result<()> {
        let all = self.topology.cpu_set();
        let online = all.difference(&self.offline);
        let cpu = "devices/system/cpu";
        write_file(sysfs_root, &format!("{cpu}/online"), &online.to_list())?;
        write_file(sysfs_root, &format!("{cpu}/possible"), &all.to_list())?;
        write_file(sysfs_root, &format!("{cpu}/present"), &all.to_list())?;
        let ranks = core_ranks(&self.topology.cpus);
        for info in &self.topology.cpus {
            let dir = format!("{cpu}/cpu{}", info.id);
            let is_online = online.contains(info.id);
            write_file(
                sysfs_root,
                &format!("{dir}/online"),
                if is_online { "1" } else { "0" },
            )?;
            if !is_online {
                continue;
            }
            let rank = ranks.get(&info.core).copied().unwrap_or(0);
            self.write_cpu_topology(sysfs_root, &dir, info, rank)?;
            if self.caches {
                self.write_caches(sysfs_root, &dir, info, rank, &online)?;
            }
        }
        if self.node_dir {
            self.write_nodes(sysfs_root)
        } else {
            self.write_flat_memory(sysfs_root)
        }
    }

    fn write_cpu_topology(
        &self,
        root: &Path,
        dir: &str,
        info: &CpuInfo,
        rank: u32,
    ) -> io::Result<()> {
        let t = format!("{dir}/topology");
        write_file(
            root,
            &format!("{t}/physical_package_id"),
            &info.socket.to_string(),
        )?;
        write_file(root, &format!("{t}/die_id"), &info.die.to_string())?;
        write_file(root, &format!("{t}/core_id"), &rank.to_string())?;
        if self.sibling_lists {
            let siblings = self.cpus_where(|c| c.core == info.core).to_list();
            write_file(root, &format!("{t}/core_cpus_list"), &siblings)?;
            write_file(root, &format!("{t}/thread_siblings_list"), &siblings)?;
        }
        Ok(())
    }

    fn write_caches(
        &self,
        root: &Path,
        dir: &str,
        info: &CpuInfo,
        rank: u32,
        online: &CpuSet,
    ) -> io::Result<()> {
        let core = self
            .cpus_where(|c| c.core == info.core)
            .intersection(online);
        let l3 = self
            .cpus_where(|c| c.uncore == info.uncore)
            .intersection(online);
        let l1_id = info.socket * 1000 + rank;
        let caches = [
            (1, "Data", l1_id, &core),
            (1, "Instruction", l1_id, &core),
            (2, "Unified", l1_id, &core),
            (3, "Unified", info.uncore, &l3),
        ];
        for (index, (level, kind, id, shared)) in caches.into_iter().enumerate() {
            let c = format!("{dir}/cache/index{index}");
            write_file(root, &format!("{c}/level"), &level.to_string())?;
            write_file(root, &format!("{c}/type"), kind)?;
            write_file(root, &format!("{c}/id"), &id.to_string())?;
            write_file(root, &format!("{c}/shared_cpu_list"), &shared.to_list())?;
        }
        Ok(())
    }

    fn write_nodes(&self, root: &Path) -> io::Result<()> {
        for node in &self.topology.numa {
            let dir = format!("devices/system/node/node{}", node.id);
            let cpus = self.cpus_where(|c| c.numa == node.id);
            write_file(root, &format!("{dir}/cpulist"), &cpus.to_list())?;
            let kb = node.memory / 1024;
            let meminfo = format!(
                "Node {id} MemTotal:       {kb} kB\nNode {id} MemFree:        {kb} kB\n",
                id = node.id
            );
            write_file(root, &format!("{dir}/meminfo"), &meminfo)?;
            if !node.distances.is_empty() {
                let line: Vec<String> = node.distances.iter().map(u32::to_string).collect();
                write_file(root, &format!("{dir}/distance"), &line.join(" "))?;
            }
            write_hugepages(root, &format!("{dir}/hugepages"), &node.hugepages)?;
        }
        Ok(())
    }

    fn write_flat_memory(&self, root: &Path) -> io::Result<()> {
        let memory: u64 = self.topology.numa.iter().map(|n| n.memory).sum();
        if memory > 0 {
            let meminfo = format!(
                "MemTotal:       {} kB\nMemFree:        0 kB\n",
                memory / 1024
            );
            fs::create_dir_all(root.join("../proc"))?;
            fs::write(root.join("../proc/meminfo"), meminfo)?;
        }
        let mut hugepages = BTreeMap::new();
        for node in &self.topology.numa {
            for (size, total) in &node.hugepages {
                *hugepages.entry(*size).or_insert(0) += total;
            }
        }
        write_hugepages(root, "kernel/mm/hugepages", &hugepages)
    }

    fn cpus_where(&self, keep: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        self.topology
            .cpus
            .iter()
            .filter(|c| keep(c))
            .map(|c| c.id)
            .collect()
    }
}

/// Writes `contents` (plus a newline, as sysfs does) to `root/rel`, creating directories.
pub fn write_file(root: &Path, rel: &str, contents: &str) -> io::Result<()> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let mut text = contents.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    fs::write(path, text)
}

/// Removes the file or directory `root/rel`.
pub fn remove(root: &Path, rel: &str) -> io::Result<()> {
    let path = root.join(rel);
    if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

fn write_hugepages(root: &Path, dir: &str, hugepages: &BTreeMap<u64, u64>) -> io::Result<()> {
    for (size, total) in hugepages {
        let pages = if *size == 0 { 0 } else { total / size };
        let mut rel = String::new();
        let _ = write!(rel, "{dir}/hugepages-{}kB/nr_hugepages", size / 1024);
        write_file(root, &rel, &pages.to_string())?;
    }
    Ok(())
}

/// Core id → its rank among the cores of its socket (the kernel's socket-local `core_id`).
fn core_ranks(cpus: &[CpuInfo]) -> BTreeMap<u32, u32> {
    let mut per_socket: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for c in cpus {
        per_socket.entry(c.socket).or_default().insert(c.core);
    }
    let mut ranks = BTreeMap::new();
    for cores in per_socket.values() {
        for (rank, core) in cores.iter().enumerate() {
            ranks.insert(*core, rank as u32);
        }
    }
    ranks
}

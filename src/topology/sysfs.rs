//! Discovers the machine from a sysfs root (normally "/sys", always a parameter), reading what
//! cadvisor reads for the kubelet and deriving ids the way the kubelet does. Never writes.
//!
//! Files read (paths relative to the root):
//! - `devices/system/cpu/online`: the CPUs kept; offline CPUs are left out everywhere, even
//!   where a sibling, node or cache list still names them.
//! - `devices/system/cpu/cpuN/topology/{physical_package_id, core_id}` (required), `die_id`
//!   (0 when absent), `core_cpus_list` or else `thread_siblings_list`.
//! - `devices/system/cpu/cpuN/cache/index*/{level, id, shared_cpu_list | shared_cpu_map}`.
//! - `devices/system/node/nodeN/{cpulist, meminfo, distance}` and
//!   `nodeN/hugepages/hugepages-<size>kB/nr_hugepages`.
//!
//! Ids (kubelet `topology.Discover` over cadvisor `GetNodesInfo`):
//! - core: the CPUs of a core are its online siblings on the same NUMA node; the core id is
//!   the lowest of them, unique machine-wide. Without sibling lists (old kernels) CPUs are
//!   grouped by (`physical_package_id`, `core_id`) as cadvisor does.
//! - socket: `physical_package_id`; die: `die_id`; a value of -1 (some VMs) reads as 0.
//! - uncore: the first cache of level > 2 of the core's lowest thread whose sharing count
//!   differs from (cores on the node × threads of this core) — cadvisor's "uncore cache" test
//!   — gives its `id`; otherwise (monolithic L3 per node, or no cache info) the socket id.
//!   An index directory without `level`, `id` or a sharing list is skipped (cadvisor drops the
//!   node's remaining cache info instead; both end at the socket fallback in practice).
//! - numa: the node whose `cpulist` holds the CPU. A CPU on no node, or on two, is an error.
//!
//! Missing files: the online list, the package and core ids and each node's `cpulist` are
//! required; caches, `die_id`, `meminfo`, `distance` and `hugepages/` are optional (memory 0,
//! no distances, no hugepages), as cadvisor tolerates them. Malformed content is always an
//! error naming the file.
//!
//! No `devices/system/node/` (a kernel built without NUMA): one NUMA node 0 holding every CPU,
//! distances `[10]`, hugepages from `kernel/mm/hugepages/`, and memory from the `MemTotal` of
//! `<root>/../proc/meminfo` if that file exists (so "/sys" reads "/proc/meminfo" and a fake tree
//! `T/sys` reads `T/proc/meminfo`), else 0. cadvisor instead makes one pseudo-node per package
//! with no memory; a single node 0 is chosen because such a kernel only accepts
//! `cpuset.mems = 0`, so any other node id would be unusable for memory placement.

use std::collections::BTreeMap;
use std::path::Path;

use tracing::{debug, warn};

use super::{CpuInfo, NumaNode, Topology, TopologyError};
use crate::cpuset::CpuSet;
use read::{
    dir_entries, malformed, numbered_entries, parse_cpulist, parse_id, read_cpulist, read_id,
    read_optional, read_text,
};

mod read;

const CPU_DIR: &str = "devices/system/cpu";
const NODE_DIR: &str = "devices/system/node";

/// One online CPU as read from `cpuN/topology/`.
struct RawCpu {
    socket: u32,
    die: u32,
    core_id: u32,
    siblings: Option<CpuSet>,
}

/// Discovers the machine under `sysfs_root` (normally "/sys").
pub fn discover(sysfs_root: &Path) -> Result<Topology, TopologyError> {
    let cpu_dir = sysfs_root.join(CPU_DIR);
    let online_path = cpu_dir.join("online");
    let online = read_cpulist(&online_path)?;
    if online.is_empty() {
        return Err(TopologyError::NoOnlineCpu { path: online_path });
    }
    let mut raw = BTreeMap::new();
    for cpu in online.iter() {
        raw.insert(cpu, read_cpu(&cpu_dir, cpu)?);
    }
    let (nodes, node_cpus) = read_nodes(sysfs_root, &online)?;
    let mut cpus = Vec::with_capacity(raw.len());
    for (node, members) in nodes.iter().zip(&node_cpus) {
        cpus.extend(node_cpu_infos(&cpu_dir, node.id, members, &raw)?);
    }
    cpus.sort_by_key(|c| c.id);
    let topology = Topology { cpus, numa: nodes };
    topology.validate()?;
    debug!(
        root = %sysfs_root.display(),
        cpus = topology.cpus.len(),
        numa = topology.numa.len(),
        "discovered topology"
    );
    Ok(topology)
}

fn read_cpu(cpu_dir: &Path, cpu: u32) -> Result<RawCpu, TopologyError> {
    let dir = cpu_dir.join(format!("cpu{cpu}/topology"));
    let socket = read_id(&dir.join("physical_package_id"))?;
    let core_id = read_id(&dir.join("core_id"))?;
    let die = match read_optional(&dir.join("die_id"))? {
        Some(text) => parse_id(&dir.join("die_id"), &text)?,
        None => 0,
    };
    let mut siblings = None;
    for name in ["core_cpus_list", "thread_siblings_list"] {
        let path = dir.join(name);
        if let Some(text) = read_optional(&path)? {
            siblings = Some(parse_cpulist(&path, &text)?);
            break;
        }
    }
    Ok(RawCpu {
        socket,
        die,
        core_id,
        siblings,
    })
}

/// The NUMA nodes, and for each its online CPUs (every online CPU on exactly one node).
fn read_nodes(root: &Path, online: &CpuSet) -> Result<(Vec<NumaNode>, Vec<CpuSet>), TopologyError> {
    let node_dir = root.join(NODE_DIR);
    let ids = numbered_entries(&node_dir, "node")?;
    if ids.is_empty() {
        debug!(dir = %node_dir.display(), "no numa nodes: one node 0 for the whole machine");
        let memory = read_meminfo(&root.join("..").join("proc/meminfo"))?.unwrap_or(0);
        let node = NumaNode {
            id: 0,
            memory,
            hugepages: read_hugepages(&root.join("kernel/mm/hugepages"))?,
            distances: vec![10],
        };
        return Ok((vec![node], vec![online.clone()]));
    }
    let mut nodes: Vec<NumaNode> = Vec::with_capacity(ids.len());
    let mut members: Vec<CpuSet> = Vec::with_capacity(ids.len());
    let mut seen = CpuSet::new();
    for id in ids {
        let dir = node_dir.join(format!("node{id}"));
        let cpus = read_cpulist(&dir.join("cpulist"))?.intersection(online);
        if let Some(cpu) = cpus.intersection(&seen).first() {
            let first = nodes
                .iter()
                .zip(&members)
                .find(|(_, m)| m.contains(cpu))
                .map_or(id, |(n, _)| n.id);
            return Err(TopologyError::CpuInTwoNodes {
                cpu,
                first,
                second: id,
            });
        }
        seen = seen.union(&cpus);
        let memory = read_meminfo(&dir.join("meminfo"))?.unwrap_or_else(|| {
            warn!(node = id, dir = %dir.display(), "numa node without meminfo: memory 0");
            0
        });
        let distances = read_distances(&dir.join("distance"))?;
        let hugepages = read_hugepages(&dir.join("hugepages"))?;
        nodes.push(NumaNode {
            id,
            memory,
            hugepages,
            distances,
        });
        members.push(cpus);
    }
    if let Some(cpu) = online.difference(&seen).first() {
        return Err(TopologyError::CpuWithoutNode {
            cpu,
            path: node_dir,
        });
    }
    Ok((nodes, members))
}

/// The CPUs of one node with core and uncore ids.
fn node_cpu_infos(
    cpu_dir: &Path,
    numa: u32,
    members: &CpuSet,
    raw: &BTreeMap<u32, RawCpu>,
) -> Result<Vec<CpuInfo>, TopologyError> {
    let cores = core_groups(members, raw);
    let mut out = Vec::with_capacity(members.len());
    for threads in &cores {
        let Some(core) = threads.first() else {
            continue;
        };
        let Some(first) = raw.get(&core) else {
            continue;
        };
        let node_threads = cores.len() * threads.len();
        let uncore = uncore_cache_id(cpu_dir, core, node_threads)?.unwrap_or(first.socket);
        for id in threads.iter() {
            if let Some(r) = raw.get(&id) {
                out.push(CpuInfo {
                    id,
                    core,
                    socket: r.socket,
                    die: r.die,
                    numa,
                    uncore,
                });
            }
        }
    }
    Ok(out)
}

/// Splits a node's online CPUs into cores, each a non-empty set; ascending by lowest CPU.
fn core_groups(members: &CpuSet, raw: &BTreeMap<u32, RawCpu>) -> Vec<CpuSet> {
    let mut by_ids: BTreeMap<(u32, u32), CpuSet> = BTreeMap::new();
    for cpu in members.iter() {
        if let Some(r) = raw.get(&cpu).filter(|r| r.siblings.is_none()) {
            by_ids.entry((r.socket, r.core_id)).or_default().insert(cpu);
        }
    }
    let mut assigned = CpuSet::new();
    let mut cores = Vec::new();
    for cpu in members.iter() {
        if assigned.contains(cpu) {
            continue;
        }
        let Some(r) = raw.get(&cpu) else {
            continue;
        };
        let mut group = match &r.siblings {
            Some(siblings) => siblings.intersection(members).difference(&assigned),
            None => by_ids
                .get(&(r.socket, r.core_id))
                .map_or_else(CpuSet::new, |g| g.difference(&assigned)),
        };
        group.insert(cpu);
        assigned = assigned.union(&group);
        cores.push(group);
    }
    cores
}

/// cadvisor's uncore rule on `cpu`'s caches: the id of the first cache of level > 2 not shared
/// by exactly `node_threads` CPUs.
fn uncore_cache_id(
    cpu_dir: &Path,
    cpu: u32,
    node_threads: usize,
) -> Result<Option<u32>, TopologyError> {
    let cache_dir = cpu_dir.join(format!("cpu{cpu}/cache"));
    for index in numbered_entries(&cache_dir, "index")? {
        let dir = cache_dir.join(format!("index{index}"));
        let Some(level) = read_optional(&dir.join("level"))? else {
            continue;
        };
        if parse_id(&dir.join("level"), &level)? <= 2 {
            continue;
        }
        let Some(id) = read_optional(&dir.join("id"))? else {
            debug!(dir = %dir.display(), "cache without id: skipped");
            continue;
        };
        let id = parse_id(&dir.join("id"), &id)?;
        let Some(sharing) = shared_count(&dir)? else {
            continue;
        };
        if sharing != node_threads {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// How many CPUs share the cache in `dir` (`shared_cpu_list`, else `shared_cpu_map`).
fn shared_count(dir: &Path) -> Result<Option<usize>, TopologyError> {
    let list = dir.join("shared_cpu_list");
    if let Some(text) = read_optional(&list)? {
        return Ok(Some(parse_cpulist(&list, &text)?.len()));
    }
    let map = dir.join("shared_cpu_map");
    let Some(text) = read_optional(&map)? else {
        return Ok(None);
    };
    let mut count = 0;
    for word in text.trim().split(',') {
        let bits = u64::from_str_radix(word.trim(), 16)
            .map_err(|_| malformed(&map, "a hex cpu mask", &text))?;
        count += bits.count_ones() as usize;
    }
    Ok(Some(count))
}

/// `MemTotal` in bytes from a node `meminfo` ("Node 0 MemTotal:  6252756 kB") or
/// `/proc/meminfo` ("MemTotal:  6252756 kB"); `None` when the file does not exist.
fn read_meminfo(path: &Path) -> Result<Option<u64>, TopologyError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let expected = "a \"MemTotal: <n> kB\" line";
    let line = text
        .lines()
        .find_map(|l| l.split_once("MemTotal:").map(|(_, rest)| rest))
        .ok_or_else(|| malformed(path, expected, &text))?;
    let mut words = line.split_whitespace();
    match (words.next().map(str::parse::<u64>), words.next()) {
        (Some(Ok(kb)), Some("kB")) => kb
            .checked_mul(1024)
            .map(Some)
            .ok_or_else(|| malformed(path, expected, line)),
        _ => Err(malformed(path, expected, line)),
    }
}

/// Page size in bytes → total bytes, from `hugepages-<size>kB/nr_hugepages` under `dir`.
fn read_hugepages(dir: &Path) -> Result<BTreeMap<u64, u64>, TopologyError> {
    let mut out = BTreeMap::new();
    for (name, path) in dir_entries(dir)? {
        let Some(size) = name.strip_prefix("hugepages-") else {
            continue;
        };
        let expected = "a directory named hugepages-<size>kB";
        let kb: u64 = size
            .strip_suffix("kB")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| malformed(&path, expected, &name))?;
        let nr_path = path.join("nr_hugepages");
        let nr_text = read_text(&nr_path)?;
        let pages: u64 = nr_text
            .trim()
            .parse()
            .map_err(|_| malformed(&nr_path, "a page count", &nr_text))?;
        let size = kb * 1024;
        let total = pages.checked_mul(size).ok_or_else(|| {
            malformed(&nr_path, "a page count that fits in 64-bit bytes", &nr_text)
        })?;
        out.insert(size, total);
    }
    Ok(out)
}

/// One line of space-separated distances; empty when the file does not exist.
fn read_distances(path: &Path) -> Result<Vec<u32>, TopologyError> {
    let Some(text) = read_optional(path)? else {
        warn!(path = %path.display(), "numa node without distances");
        return Ok(Vec::new());
    };
    text.split_whitespace()
        .map(|d| {
            d.parse()
                .map_err(|_| malformed(path, "space-separated distances", &text))
        })
        .collect()
}

#[cfg(test)]
mod tests;

//! Machines for the cases: the kubelet's fixture CPU maps (shared/fixtures/topologies) with memory
//! added, and synthetic machines (1–8 NUMA nodes, 1–4 sockets, SMT 1/2/4, uncore caches, mixed
//! core sizes), written as numa-shim's topology JSON.
//!
//! Core ids are the lowest CPU id of each (NUMA node, socket, core) group, which is what the
//! kubelet's `topology.Discover` makes of cAdvisor's cores whatever ids the input used. That also
//! mends the fixture README's anomaly in `topoDualSocketMultiNumaPerSocketUncore.json` (CPUs c and
//! c+96 on different sockets sharing a core id): there every CPU becomes its own core, the
//! no-SMT machine the fixture means. `topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore.json`
//! (header counters disagreeing with the CPU map) is used as its CPU map says: cAdvisor has no
//! header to disagree with.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use super::prng::Prng;

pub const MI: u64 = 1 << 20;
pub const GI: u64 = 1 << 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpu {
    pub id: u32,
    pub core: u32,
    pub socket: u32,
    pub numa: u32,
    pub uncore: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numa {
    pub id: u32,
    pub memory: u64,
    /// Page size → total bytes.
    pub hugepages: BTreeMap<u64, u64>,
    /// In node id order.
    pub distances: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The fixture file name, or a description of the synthetic shape.
    pub name: String,
    pub fixture: bool,
    pub cpus: Vec<Cpu>,
    pub numa: Vec<Numa>,
}

/// The fixture CPU maps, sorted by file name: (file name, CPUs).
pub fn fixtures(dir: &Path) -> Vec<(String, Vec<Cpu>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let doc: Value = serde_json::from_str(&text).expect("fixture JSON");
            let cpus = doc["cpus"]
                .as_array()
                .expect("cpus")
                .iter()
                .map(|c| Cpu {
                    id: num(&c["id"]),
                    core: num(&c["core"]),
                    socket: num(&c["socket"]),
                    numa: num(&c["numa"]),
                    uncore: num(&c["uncore"]),
                })
                .collect();
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            (name, cpus)
        })
        .collect()
}

fn num(v: &Value) -> u32 {
    v.as_u64().unwrap_or(0) as u32
}

impl Machine {
    /// A fixture CPU map with memory, hugepages and distances chosen by `rng`.
    pub fn from_fixture(name: &str, cpus: &[Cpu], rng: &mut Prng) -> Self {
        let mut ids: Vec<u32> = cpus.iter().map(|c| c.numa).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut m = Self {
            name: name.to_string(),
            fixture: true,
            cpus: normalize_cores(cpus.to_vec()),
            numa: Vec::new(),
        };
        m.numa = memory(&ids, &m.cpus, rng);
        m
    }

    /// A synthetic machine.
    pub fn synthetic(rng: &mut Prng) -> Self {
        let sockets = *rng.pick(&[1u32, 1, 2, 2, 2, 3, 4]);
        // NUMA nodes per socket, or (rarely) two sockets per NUMA node.
        let shared_numa = sockets.is_multiple_of(2) && rng.chance(15);
        let per_socket = if shared_numa {
            0
        } else {
            rng.range(1, u64::from((8 / sockets).clamp(1, 4))) as u32
        };
        let nodes = if shared_numa {
            sockets / 2
        } else {
            sockets * per_socket
        };
        let smt = *rng.pick(&[1u32, 2, 2, 2, 4]);
        let mixed = smt > 1 && rng.chance(25);
        let max_cores = (48 / (nodes * smt)).clamp(1, 6);
        let cores_per_node = rng.range(1, u64::from(max_cores)) as u32;
        let uncore_group = *rng.pick(&[0u32, 0, 2, 3]); // 0: one uncore per socket
        let interleave = !mixed && smt > 1 && rng.chance(50);
        // Per core: (node, socket, threads).
        let mut cores = Vec::new();
        for n in 0..nodes {
            for k in 0..cores_per_node {
                let socket = if shared_numa {
                    n * 2 + u32::from(k >= cores_per_node.div_ceil(2))
                } else {
                    n / per_socket
                };
                let threads = if mixed && rng.chance(50) { 1 } else { smt };
                cores.push((n, socket, threads, k));
            }
        }
        if mixed && cores.iter().all(|c| c.2 == smt) {
            cores[0].2 = 1;
        }
        let total_cores = cores.len() as u32;
        let mut cpus = Vec::new();
        let mut next = 0u32;
        let mut uncore_of = BTreeMap::new();
        for (i, &(n, socket, threads, k)) in cores.iter().enumerate() {
            let uncore_key = match k.checked_div(uncore_group) {
                None => (socket, 0),
                Some(chunk) => (socket, n * 100 + chunk),
            };
            let count = uncore_of.len() as u32;
            let uncore = *uncore_of.entry(uncore_key).or_insert(count);
            for t in 0..threads {
                let id = if interleave {
                    i as u32 + t * total_cores
                } else {
                    let id = next;
                    next += 1;
                    id
                };
                cpus.push(Cpu {
                    id,
                    core: i as u32,
                    socket,
                    numa: n,
                    uncore,
                });
            }
        }
        // `core` holds the core's index until normalized to its lowest CPU id.
        let cpus = normalize_cores(cpus);
        let ids: Vec<u32> = (0..nodes).collect();
        let numa = memory(&ids, &cpus, rng);
        let name = format!(
            "synthetic {sockets}s/{nodes}n/{cores_per_node}c/smt{smt}{}{}{}",
            if mixed { "/mixed" } else { "" },
            if interleave { "/interleaved" } else { "" },
            match uncore_group {
                0 => String::new(),
                g => format!("/uncore{g}"),
            }
        );
        Self {
            name,
            fixture: false,
            cpus,
            numa,
        }
    }

    /// A wide synthetic machine for the kubelet's `max-allowable-numa-nodes` above 8: one of
    /// `counts` NUMA nodes (9 or 10 by default: the kubelet's own enumeration of 2^N masks per
    /// provider and their cross product still finishes in about a second), on one or two
    /// sockets, one or two cores per node, SMT 1 or 2.
    pub fn wide(rng: &mut Prng, counts: &[u32]) -> Self {
        let nodes = *rng.pick(counts);
        let sockets = *rng.pick(&[1u32, 2]);
        let sockets = if nodes.is_multiple_of(sockets) {
            sockets
        } else {
            1
        };
        let per_socket = nodes / sockets;
        let smt = *rng.pick(&[1u32, 2]);
        let cores_per_node = rng.range(1, 2) as u32;
        let mut cpus = Vec::new();
        let mut next = 0u32;
        let mut core = 0u32;
        for n in 0..nodes {
            for _ in 0..cores_per_node {
                for _ in 0..smt {
                    cpus.push(Cpu {
                        id: next,
                        core,
                        socket: n / per_socket,
                        numa: n,
                        uncore: n,
                    });
                    next += 1;
                }
                core += 1;
            }
        }
        let cpus = normalize_cores(cpus);
        let ids: Vec<u32> = (0..nodes).collect();
        let numa = memory(&ids, &cpus, rng);
        Self {
            name: format!("wide {sockets}s/{nodes}n/{cores_per_node}c/smt{smt}"),
            fixture: false,
            cpus,
            numa,
        }
    }

    /// NUMA nodes of the machine.
    pub fn numa_count(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| c.numa)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }

    /// Whether cores have different thread counts (the kubelet's average-threads rule differs).
    pub fn mixed_cores(&self) -> bool {
        let mut per: BTreeMap<u32, u32> = BTreeMap::new();
        for c in &self.cpus {
            *per.entry(c.core).or_default() += 1;
        }
        let mut sizes: Vec<u32> = per.values().copied().collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes.len() > 1
    }

    pub fn cpu_ids(&self) -> Vec<u32> {
        self.cpus.iter().map(|c| c.id).collect()
    }

    pub fn to_json(&self) -> Value {
        let cpus: Vec<Value> = self
            .cpus
            .iter()
            .map(|c| {
                json!({"id": c.id, "core": c.core, "socket": c.socket, "numa": c.numa, "uncore": c.uncore})
            })
            .collect();
        let numa: Vec<Value> = self
            .numa
            .iter()
            .map(|n| {
                let pages: serde_json::Map<String, Value> = n
                    .hugepages
                    .iter()
                    .map(|(&size, &total)| (bytes(size), Value::String(bytes(total))))
                    .collect();
                let mut node =
                    json!({"id": n.id, "memory": bytes(n.memory), "distances": n.distances});
                if !pages.is_empty() {
                    node["hugepages"] = Value::Object(pages);
                }
                node
            })
            .collect();
        json!({"cpus": cpus, "numa": numa})
    }

    /// The machine without NUMA node `id` (and its CPUs); `None` if that leaves nothing.
    pub fn without_numa(&self, id: u32) -> Option<Self> {
        let pos = self.numa.iter().position(|n| n.id == id)?;
        if self.numa.len() < 2 {
            return None;
        }
        let mut m = self.clone();
        m.numa.remove(pos);
        for n in &mut m.numa {
            n.distances.remove(pos);
        }
        m.cpus.retain(|c| c.numa != id);
        (!m.cpus.is_empty()).then_some(m)
    }

    /// The machine without core `core` (its CPUs); `None` if that leaves a NUMA node empty.
    pub fn without_core(&self, core: u32) -> Option<Self> {
        let mut m = self.clone();
        m.cpus.retain(|c| c.core != core);
        let left = |id: u32| m.cpus.iter().any(|c| c.numa == id);
        (m.cpus.len() < self.cpus.len() && m.numa.iter().all(|n| left(n.id))).then_some(m)
    }
}

/// Memory, hugepages and distances for the nodes `ids`.
fn memory(ids: &[u32], cpus: &[Cpu], rng: &mut Prng) -> Vec<Numa> {
    let base = *rng.pick(&[GI, 2 * GI, 4 * GI, 4 * GI, 8 * GI, 16 * GI]);
    let uneven = rng.chance(20);
    // Hugepages well inside the memory (the kubelet's tables would underflow otherwise).
    let small_pages = (*rng.pick(&[0, 0, 256 * MI, GI])).min(base / 4);
    let big_pages = if rng.chance(15) && base >= 4 * GI {
        GI
    } else {
        0
    };
    let socket_of = |n: u32| cpus.iter().find(|c| c.numa == n).map_or(0, |c| c.socket);
    let remote = *rng.pick(&[20u32, 21, 32]);
    let near = *rng.pick(&[11u32, 12]);
    let varied = rng.chance(30);
    // Symmetric distances; with `varied`, remote pairs differ (prefer-closest-numa-nodes).
    let mut dist = vec![vec![10u32; ids.len()]; ids.len()];
    for i in 0..ids.len() {
        for j in (i + 1)..ids.len() {
            let d = if socket_of(ids[i]) == socket_of(ids[j]) {
                near
            } else if varied {
                remote + rng.below(3) as u32 * 10
            } else {
                remote
            };
            dist[i][j] = d;
            dist[j][i] = d;
        }
    }
    ids.iter()
        .enumerate()
        .map(|(i, &id)| {
            let memory = if uneven && i % 2 == 1 { base * 2 } else { base };
            let mut hugepages = BTreeMap::new();
            if small_pages > 0 {
                hugepages.insert(2 * MI, small_pages);
            }
            if big_pages > 0 {
                hugepages.insert(GI, big_pages);
            }
            Numa {
                id,
                memory,
                hugepages,
                distances: dist[i].clone(),
            }
        })
        .collect()
}

/// Core id = the lowest CPU id of its (NUMA node, socket, core) group.
fn normalize_cores(mut cpus: Vec<Cpu>) -> Vec<Cpu> {
    let mut lowest: BTreeMap<(u32, u32, u32), u32> = BTreeMap::new();
    for c in &cpus {
        let e = lowest.entry((c.numa, c.socket, c.core)).or_insert(c.id);
        *e = (*e).min(c.id);
    }
    let cores: Vec<u32> = cpus
        .iter()
        .map(|c| lowest[&(c.numa, c.socket, c.core)])
        .collect();
    for (c, core) in cpus.iter_mut().zip(cores) {
        c.core = core;
    }
    cpus.sort_by_key(|c| c.id);
    cpus
}

/// A byte count as a binary quantity ("512Mi", "1Gi"; bytes when not a whole Ki).
pub fn bytes(b: u64) -> String {
    for (unit, size) in [("Gi", GI), ("Mi", MI), ("Ki", 1024)] {
        if b >= size && b.is_multiple_of(size) {
            return format!("{}{unit}", b / size);
        }
    }
    b.to_string()
}

pub fn parse_bytes(s: &str) -> u64 {
    for (unit, size) in [("Gi", GI), ("Mi", MI), ("Ki", 1024)] {
        if let Some(n) = s.strip_suffix(unit) {
            return n.parse::<u64>().unwrap_or(0) * size;
        }
    }
    s.parse().unwrap_or(0)
}

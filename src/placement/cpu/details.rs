//! kubelet's `CPUTopology` / `CPUDetails` over [`Topology`]: which CPUs, cores, sockets, NUMA nodes
//! and uncore caches contain which, plus the header counters the allocator reads.
//!
//! Owns only queries; never allocates and never changes the machine model.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cpuset::CpuSet;
use crate::topology::{CpuInfo, Topology};

/// A level of the CPU hierarchy, named by the [`CpuInfo`] field that holds a CPU's element id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Core,
    Socket,
    Numa,
    Uncore,
}

impl Level {
    /// The id of `cpu`'s element at this level.
    pub fn of(self, cpu: &CpuInfo) -> u32 {
        match self {
            Self::Core => cpu.core,
            Self::Socket => cpu.socket,
            Self::Numa => cpu.numa,
            Self::Uncore => cpu.uncore,
        }
    }
}

/// The kubelet header counters (`NumCPUs`, `NumCores`, ...). Normally derived from the CPU map;
/// kubelet's own test fixtures sometimes set them by hand to values the map disagrees with
/// (see `shared/fixtures/topologies/README.md`), so they can be overridden.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeaderCounts {
    pub num_cpus: usize,
    pub num_cores: usize,
    pub num_sockets: usize,
    pub num_numa_nodes: usize,
    pub num_uncore_caches: usize,
}

/// A (possibly restricted) CPU map: kubelet's `CPUDetails`. Sorted by CPU id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuDetails {
    cpus: Vec<CpuInfo>,
}

/// The machine as the CPU manager sees it: the full CPU map and the header counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    /// Never changes after construction: shared between clones (a node clones its CPU manager
    /// to roll back a failed admission).
    details: Arc<CpuDetails>,
    counts: HeaderCounts,
    /// Derived from `details` once; shared between clones.
    index: Arc<TopologyIndex>,
    /// Run the kubelet's free core/socket test as it is (average sizes only), which can grant a
    /// CPU twice: only for the differential suite's classification of that one divergence.
    kubelet_free_test: bool,
}

/// The CPUs of every core, socket, NUMA node and uncore cache of a CPU map, and the sockets of
/// every NUMA node, each found by one scan of the map when the topology is built, so that the
/// allocator's per-element questions ("how many CPUs does core 7 have?") do not rescan the map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct TopologyIndex {
    core: BTreeMap<u32, CpuSet>,
    socket: BTreeMap<u32, CpuSet>,
    numa: BTreeMap<u32, CpuSet>,
    uncore: BTreeMap<u32, CpuSet>,
    sockets_of_numa: BTreeMap<u32, CpuSet>,
}

impl TopologyIndex {
    fn build(details: &CpuDetails) -> Self {
        let mut index = Self::default();
        for c in &details.cpus {
            index.core.entry(c.core).or_default().insert(c.id);
            index.socket.entry(c.socket).or_default().insert(c.id);
            index.numa.entry(c.numa).or_default().insert(c.id);
            index.uncore.entry(c.uncore).or_default().insert(c.id);
            index
                .sockets_of_numa
                .entry(c.numa)
                .or_default()
                .insert(c.socket);
        }
        index
    }

    fn level(&self, level: Level) -> &BTreeMap<u32, CpuSet> {
        match level {
            Level::Core => &self.core,
            Level::Socket => &self.socket,
            Level::Numa => &self.numa,
            Level::Uncore => &self.uncore,
        }
    }
}

impl CpuTopology {
    /// The CPU map of `topology` with counters derived from it, as kubelet's `Discover` does:
    /// CPUs, distinct core ids, distinct sockets, distinct NUMA ids, distinct uncore ids.
    pub fn new(topology: &Topology) -> Self {
        let details = CpuDetails::new(topology.cpus.clone());
        let counts = HeaderCounts {
            num_cpus: details.cpus().len(),
            num_cores: details.cores().len(),
            num_sockets: details.sockets().len(),
            num_numa_nodes: details.numa_nodes().len(),
            num_uncore_caches: details.uncore_caches().len(),
        };
        let index = Arc::new(TopologyIndex::build(&details));
        Self {
            details: Arc::new(details),
            counts,
            index,
            kubelet_free_test: false,
        }
    }

    /// With `on`, the accumulator calls a core or socket free exactly when the kubelet does
    /// (its free CPUs number the machine's average), even if some of its CPUs are granted: it
    /// then grants them again, as kubelet 1.37.2 does. Never for placement: the differential
    /// suite uses it to show that a disagreement is that divergence and nothing else.
    pub fn with_kubelet_free_test(mut self, on: bool) -> Self {
        self.kubelet_free_test = on;
        self
    }

    pub fn kubelet_free_test(&self) -> bool {
        self.kubelet_free_test
    }

    /// Replaces the derived counters (only kubelet test fixtures need this).
    pub fn with_counts(mut self, counts: HeaderCounts) -> Self {
        self.counts = counts;
        self
    }

    pub fn details(&self) -> &CpuDetails {
        &self.details
    }

    pub fn counts(&self) -> HeaderCounts {
        self.counts
    }

    /// The CPUs of element `id` at `level` (`cpus_in_cores(&[id])` and friends on the whole
    /// map, from the index); `None` when the machine has no such element.
    pub fn cpus_in(&self, level: Level, id: u32) -> Option<&CpuSet> {
        self.index.level(level).get(&id)
    }

    /// How many CPUs element `id` at `level` has (0 when there is no such element).
    pub fn count_in(&self, level: Level, id: u32) -> usize {
        self.cpus_in(level, id).map_or(0, CpuSet::len)
    }

    /// The sockets NUMA node `numa` spans (`sockets_in_numa_nodes(&[numa])`, from the index).
    pub fn sockets_of_numa(&self, numa: u32) -> Option<&CpuSet> {
        self.index.sockets_of_numa.get(&numa)
    }

    /// `NumCPUs / NumCores`, 0 without cores.
    pub fn cpus_per_core(&self) -> usize {
        self.counts
            .num_cpus
            .checked_div(self.counts.num_cores)
            .unwrap_or(0)
    }

    /// `NumCPUs / NumSockets`, 0 without sockets.
    pub fn cpus_per_socket(&self) -> usize {
        self.counts
            .num_cpus
            .checked_div(self.counts.num_sockets)
            .unwrap_or(0)
    }

    /// `NumCPUs / NumUncoreCache`, 0 without uncore caches.
    pub fn cpus_per_uncore(&self) -> usize {
        self.counts
            .num_cpus
            .checked_div(self.counts.num_uncore_caches)
            .unwrap_or(0)
    }

    /// NUMA-first when `NumSockets >= NumNUMANodes`, sockets-first otherwise.
    pub fn numa_first(&self) -> bool {
        self.counts.num_sockets >= self.counts.num_numa_nodes
    }
}

impl CpuDetails {
    /// A map of these CPUs (sorted by id).
    pub fn new(mut cpus: Vec<CpuInfo>) -> Self {
        cpus.sort_by_key(|c| c.id);
        cpus.dedup_by_key(|c| c.id);
        Self { cpus }
    }

    /// Only the CPUs in `set`.
    pub fn keep_only(&self, set: &CpuSet) -> Self {
        Self {
            cpus: self
                .cpus
                .iter()
                .filter(|c| set.contains(c.id))
                .copied()
                .collect(),
        }
    }

    pub fn info(&self, cpu: u32) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&cpu, |c| c.id)
            .ok()
            .map(|i| &self.cpus[i])
    }

    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// Number of CPUs in the map.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// Drops the CPUs in `set` from the map.
    pub fn remove(&mut self, set: &CpuSet) {
        self.cpus.retain(|c| !set.contains(c.id));
    }

    /// CPUs per element at `level`, in one scan (elements without CPUs are absent).
    pub fn count_by(&self, level: Level) -> BTreeMap<u32, usize> {
        let mut counts = BTreeMap::new();
        for c in &self.cpus {
            *counts.entry(level.of(c)).or_insert(0) += 1;
        }
        counts
    }

    /// CPU ids (ascending) per element at `level`, in one scan.
    pub fn group_by(&self, level: Level) -> BTreeMap<u32, Vec<u32>> {
        let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for c in &self.cpus {
            groups.entry(level.of(c)).or_default().push(c.id);
        }
        groups
    }

    /// For every element at `parent`, the ids of its elements at `child` (e.g. the cores of
    /// every socket), in one scan.
    pub fn children(&self, parent: Level, child: Level) -> BTreeMap<u32, CpuSet> {
        let mut out: BTreeMap<u32, CpuSet> = BTreeMap::new();
        for c in &self.cpus {
            out.entry(parent.of(c)).or_default().insert(child.of(c));
        }
        out
    }

    fn collect(&self, field: fn(&CpuInfo) -> u32) -> CpuSet {
        self.cpus.iter().map(field).collect()
    }

    /// `field` of the CPUs whose element at `level` is one of `ids`.
    fn collect_in(&self, level: Level, ids: &[u32], field: fn(&CpuInfo) -> u32) -> CpuSet {
        if ids.len() <= 8 {
            return self
                .cpus
                .iter()
                .filter(|c| ids.contains(&level.of(c)))
                .map(field)
                .collect();
        }
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        self.cpus
            .iter()
            .filter(|c| sorted.binary_search(&level.of(c)).is_ok())
            .map(field)
            .collect()
    }

    pub fn cpus(&self) -> CpuSet {
        self.collect(|c| c.id)
    }
    pub fn cores(&self) -> CpuSet {
        self.collect(|c| c.core)
    }
    pub fn sockets(&self) -> CpuSet {
        self.collect(|c| c.socket)
    }
    pub fn numa_nodes(&self) -> CpuSet {
        self.collect(|c| c.numa)
    }
    pub fn uncore_caches(&self) -> CpuSet {
        self.collect(|c| c.uncore)
    }

    pub fn cpus_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Numa, ids, |c| c.id)
    }
    pub fn cpus_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Socket, ids, |c| c.id)
    }
    pub fn cpus_in_cores(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Core, ids, |c| c.id)
    }
    pub fn cpus_in_uncore_caches(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Uncore, ids, |c| c.id)
    }

    pub fn sockets_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Numa, ids, |c| c.socket)
    }
    pub fn numa_nodes_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Socket, ids, |c| c.numa)
    }
    pub fn cores_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Socket, ids, |c| c.core)
    }
    pub fn cores_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Numa, ids, |c| c.core)
    }
    pub fn uncore_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Numa, ids, |c| c.uncore)
    }
    pub fn cores_in_uncore_caches(&self, ids: &[u32]) -> CpuSet {
        self.collect_in(Level::Uncore, ids, |c| c.core)
    }

    /// The `n` lowest core ids in uncore cache `uncore` (all of them if fewer).
    pub fn cores_needed_in_uncore_cache(&self, n: usize, uncore: u32) -> CpuSet {
        self.cores_in_uncore_caches(&[uncore])
            .iter()
            .take(n)
            .collect()
    }

    /// True if every id is a NUMA node of this map and together they span at most one socket.
    pub fn are_numa_nodes_in_same_socket(&self, ids: &[u32]) -> bool {
        let all = self.numa_nodes();
        ids.iter().all(|&id| all.contains(id)) && self.sockets_in_numa_nodes(ids).len() <= 1
    }
}

#[cfg(test)]
mod tests;

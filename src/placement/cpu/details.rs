//! kubelet's `CPUTopology` / `CPUDetails` over [`Topology`]: which CPUs, cores, sockets, NUMA nodes
//! and uncore caches contain which, plus the header counters the allocator reads.
//!
//! Owns only queries; never allocates and never changes the machine model.

use crate::cpuset::CpuSet;
use crate::topology::{CpuInfo, Topology};

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
    details: CpuDetails,
    counts: HeaderCounts,
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
        Self { details, counts }
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

    /// `NumCPUs / NumCores`, 0 without cores.
    pub fn cpus_per_core(&self) -> usize {
        self.counts
            .num_cpus
            .checked_div(self.counts.num_cores)
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

    fn collect(&self, keep: impl Fn(&CpuInfo) -> bool, field: fn(&CpuInfo) -> u32) -> CpuSet {
        self.cpus.iter().filter(|c| keep(c)).map(field).collect()
    }

    pub fn cpus(&self) -> CpuSet {
        self.collect(|_| true, |c| c.id)
    }
    pub fn cores(&self) -> CpuSet {
        self.collect(|_| true, |c| c.core)
    }
    pub fn sockets(&self) -> CpuSet {
        self.collect(|_| true, |c| c.socket)
    }
    pub fn numa_nodes(&self) -> CpuSet {
        self.collect(|_| true, |c| c.numa)
    }
    pub fn uncore_caches(&self) -> CpuSet {
        self.collect(|_| true, |c| c.uncore)
    }

    pub fn cpus_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.numa), |c| c.id)
    }
    pub fn cpus_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.socket), |c| c.id)
    }
    pub fn cpus_in_cores(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.core), |c| c.id)
    }
    pub fn cpus_in_uncore_caches(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.uncore), |c| c.id)
    }

    pub fn sockets_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.numa), |c| c.socket)
    }
    pub fn numa_nodes_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.socket), |c| c.numa)
    }
    pub fn cores_in_sockets(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.socket), |c| c.core)
    }
    pub fn cores_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.numa), |c| c.core)
    }
    pub fn uncore_in_numa_nodes(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.numa), |c| c.uncore)
    }
    pub fn cores_in_uncore_caches(&self, ids: &[u32]) -> CpuSet {
        self.collect(|c| ids.contains(&c.uncore), |c| c.core)
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
mod tests {
    use super::*;

    fn cpu(id: u32, core: u32, socket: u32, numa: u32, uncore: u32) -> CpuInfo {
        CpuInfo {
            id,
            core,
            socket,
            die: 0,
            numa,
            uncore,
        }
    }

    /// topoDualSocketHT: even CPUs socket/NUMA 0, odd socket/NUMA 1, siblings c / c+6.
    fn dual_socket_ht() -> Topology {
        Topology {
            cpus: (0..12).map(|i| cpu(i, i % 6, i % 2, i % 2, 0)).collect(),
            numa: vec![],
        }
    }

    #[test]
    fn derived_counts_and_queries() {
        let t = CpuTopology::new(&dual_socket_ht());
        let c = t.counts();
        assert_eq!(
            (c.num_cpus, c.num_cores, c.num_sockets, c.num_numa_nodes),
            (12, 6, 2, 2)
        );
        assert_eq!(t.cpus_per_core(), 2);
        assert!(t.numa_first());
        let d = t.details();
        assert_eq!(d.cpus_in_numa_nodes(&[1]).to_string(), "1,3,5,7,9,11");
        assert_eq!(d.cpus_in_cores(&[2]).to_string(), "2,8");
        assert_eq!(d.cores_in_sockets(&[0]).to_string(), "0,2,4");
        assert!(d.are_numa_nodes_in_same_socket(&[0]));
        assert!(!d.are_numa_nodes_in_same_socket(&[0, 1]));
        assert!(!d.are_numa_nodes_in_same_socket(&[7]));
        let free = d.keep_only(&CpuSet::parse("2-5").unwrap());
        assert_eq!(free.cores().to_string(), "2-5");
        assert_eq!(free.cores_needed_in_uncore_cache(2, 0).to_string(), "2-3");
    }

    #[test]
    fn header_override_changes_cpus_per_core() {
        let t = CpuTopology::new(&dual_socket_ht()).with_counts(HeaderCounts {
            num_cpus: 12,
            num_cores: 12,
            num_sockets: 1,
            num_numa_nodes: 2,
            num_uncore_caches: 1,
        });
        assert_eq!(t.cpus_per_core(), 1);
        assert!(!t.numa_first());
    }
}

//! kubelet's `cpuAccumulator` and `takeByTopologyNUMAPacked`: whole NUMA nodes / sockets, then
//! (optionally) uncore caches, then whole cores, then single CPUs, always preferring the element
//! with the fewest free CPUs (ties: lowest id).
//!
//! Mirrors `cpu_assignment.go` @08715a58 step for step, including its quirks (a list computed once
//! per step, `take` charging the size of what it is given).

use std::collections::BTreeMap;

use super::details::{CpuDetails, CpuTopology, Level};
use super::CpuError;
use crate::cpuset::CpuSet;

/// kubelet's `CPUSortingStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortingStrategy {
    /// CPUs grouped by core (default).
    Packed,
    /// CPUs by socket then id, no whole-core step (`distribute-cpus-across-cores`).
    Spread,
}

/// The working state of one `takeByTopology` call.
pub(crate) struct Accumulator<'a> {
    pub(crate) topo: &'a CpuTopology,
    /// Free CPUs still claimable.
    pub(crate) free: CpuDetails,
    pub(crate) needed: isize,
    pub(crate) result: CpuSet,
    strategy: SortingStrategy,
}

impl<'a> Accumulator<'a> {
    pub(crate) fn new(
        topo: &'a CpuTopology,
        available: &CpuSet,
        n: usize,
        strategy: SortingStrategy,
    ) -> Self {
        Self {
            topo,
            free: topo.details().keep_only(available),
            needed: n as isize,
            result: CpuSet::new(),
            strategy,
        }
    }

    pub(crate) fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.free.remove(&self.result);
        self.needed -= cpus.len() as isize;
    }

    pub(crate) fn is_satisfied(&self) -> bool {
        self.needed < 1
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.needed > self.free.len() as isize
    }

    fn needs_at_least(&self, n: usize) -> bool {
        self.needed >= n as isize
    }

    /// `ids` ordered by free CPUs ascending (from `free`, one count per element), ties by id.
    fn sorted(ids: Option<&CpuSet>, free: &BTreeMap<u32, usize>) -> Vec<u32> {
        let mut v: Vec<(usize, u32)> = ids
            .into_iter()
            .flat_map(CpuSet::iter)
            .map(|id| (free.get(&id).copied().unwrap_or(0), id))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, id)| id).collect()
    }

    pub(crate) fn sort_numa_nodes(&self) -> Vec<u32> {
        let free = self.free.count_by(Level::Numa);
        if self.topo.numa_first() {
            Self::sorted(Some(&self.free.numa_nodes()), &free)
        } else {
            let numas = self.free.children(Level::Socket, Level::Numa);
            let mut out = Vec::new();
            for socket in self.sort_sockets() {
                out.extend(Self::sorted(numas.get(&socket), &free));
            }
            out
        }
    }

    pub(crate) fn sort_sockets(&self) -> Vec<u32> {
        let free = self.free.count_by(Level::Socket);
        if self.topo.numa_first() {
            let sockets = self.free.children(Level::Numa, Level::Socket);
            let mut out = Vec::new();
            for numa in self.sort_numa_nodes() {
                out.extend(Self::sorted(sockets.get(&numa), &free));
            }
            out
        } else {
            Self::sorted(Some(&self.free.sockets()), &free)
        }
    }

    pub(crate) fn sort_cores(&self) -> Vec<u32> {
        let free = self.free.count_by(Level::Core);
        let mut out = Vec::new();
        if self.topo.numa_first() {
            let cores = self.free.children(Level::Socket, Level::Core);
            for socket in self.sort_sockets() {
                out.extend(Self::sorted(cores.get(&socket), &free));
            }
        } else {
            let cores = self.free.children(Level::Numa, Level::Core);
            for numa in self.sort_numa_nodes() {
                out.extend(Self::sorted(cores.get(&numa), &free));
            }
        }
        out
    }

    pub(crate) fn sort_uncore_caches(&self) -> Vec<u32> {
        let free = self.free.count_by(Level::Uncore);
        let uncores = self.free.children(Level::Numa, Level::Uncore);
        let mut out = Vec::new();
        for numa in self.sort_numa_nodes() {
            out.extend(Self::sorted(uncores.get(&numa), &free));
        }
        out
    }

    /// Free CPUs in the order single CPUs are taken.
    pub(crate) fn sort_cpus(&self) -> Vec<u32> {
        let (level, order) = match self.strategy {
            SortingStrategy::Packed => (Level::Core, self.sort_cores()),
            SortingStrategy::Spread => (Level::Socket, self.sort_sockets()),
        };
        let cpus = self.free.group_by(level);
        order
            .into_iter()
            .filter_map(|id| cpus.get(&id))
            .flatten()
            .copied()
            .collect()
    }

    /// The elements of `sorted` at `level` whose CPUs are all still free. The kubelet's test for
    /// cores and sockets compares the free CPUs with the machine's average per core
    /// (`CPUsPerCore`) or socket (`CPUsPerSocket`), so on machines with elements of different
    /// sizes it calls free an element that is whole but not average-sized (not free then), or
    /// one that is average-sized but partly granted: it would then take the whole element and
    /// grant those CPUs twice. numa-shim calls free only what both tests do, and never grants a
    /// CPU twice (the one divergence of docs/fidelity.md).
    fn whole(&self, level: Level, sorted: Vec<u32>) -> Vec<u32> {
        let free = self.free.count_by(level);
        let average = match level {
            Level::Core => Some(self.topo.cpus_per_core()),
            Level::Socket => Some(self.topo.cpus_per_socket()),
            Level::Numa | Level::Uncore => None,
        };
        let kubelet = self.topo.kubelet_free_test();
        sorted
            .into_iter()
            .filter(|id| {
                let n = free.get(id).copied().unwrap_or(0);
                match average {
                    Some(a) if kubelet => n == a,
                    _ => n == self.topo.count_in(level, *id) && average.is_none_or(|a| n == a),
                }
            })
            .collect()
    }

    pub(crate) fn free_numa_nodes(&self) -> Vec<u32> {
        self.whole(Level::Numa, self.sort_numa_nodes())
    }

    pub(crate) fn free_sockets(&self) -> Vec<u32> {
        self.whole(Level::Socket, self.sort_sockets())
    }

    pub(crate) fn free_cores(&self) -> Vec<u32> {
        self.whole(Level::Core, self.sort_cores())
    }

    fn free_uncore_caches(&self) -> Vec<u32> {
        self.whole(Level::Uncore, self.sort_uncore_caches())
    }

    /// Takes every listed whole element whose size fits the remaining need.
    fn take_full(&mut self, ids: Vec<u32>, level: Level) {
        let topo = self.topo;
        for id in ids {
            let Some(cpus) = topo.cpus_in(level, id) else {
                continue;
            };
            if self.needs_at_least(cpus.len()) {
                self.take(cpus);
            }
        }
    }

    fn take_full_numa_nodes(&mut self) {
        let ids = self.free_numa_nodes();
        self.take_full(ids, Level::Numa);
    }

    fn take_full_sockets(&mut self) {
        let ids = self.free_sockets();
        self.take_full(ids, Level::Socket);
    }

    fn take_full_cores(&mut self) {
        let ids = self.free_cores();
        self.take_full(ids, Level::Core);
    }

    fn take_partial_uncore(&mut self, uncore: u32) {
        let per_core = self.topo.cpus_per_core().max(1);
        let needed = self.needed.max(0) as usize;
        let cores_needed = needed.div_ceil(per_core);
        let cores = self.free.cores_needed_in_uncore_cache(cores_needed, uncore);
        let mut cpus = self.free.cpus_in_cores(&cores.to_vec());
        if !needed.is_multiple_of(2) && self.topo.cpus_per_core() > 1 && cpus.len() > needed {
            if let Some(last) = cpus.iter().last() {
                cpus.remove(last);
            }
        }
        if cpus.len() == needed {
            self.take(&cpus);
        }
    }

    fn take_uncore_caches(&mut self) {
        // kubelet: whole caches once the need reaches the *average* cache size.
        let size = self.topo.cpus_per_uncore();
        for uncore in self.sort_uncore_caches() {
            if self.needs_at_least(size) {
                let ids = self.free_uncore_caches();
                self.take_full(ids, Level::Uncore);
            }
            if self.is_satisfied() {
                return;
            }
            self.take_partial_uncore(uncore);
            if self.is_satisfied() {
                return;
            }
        }
    }

    fn take_remaining_cpus(&mut self) {
        for cpu in self.sort_cpus() {
            self.take(&std::iter::once(cpu).collect());
            if self.is_satisfied() {
                return;
            }
        }
    }
}

/// `takeByTopologyNUMAPacked`: `n` CPUs out of `available`.
pub fn take_packed(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
    strategy: SortingStrategy,
    prefer_uncore: bool,
) -> Result<CpuSet, CpuError> {
    let mut acc = Accumulator::new(topo, available, n, strategy);
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.is_failed() {
        return Err(CpuError::NotEnoughCpus {
            requested: n,
            available: available.len(),
        });
    }
    if topo.numa_first() {
        acc.take_full_numa_nodes();
        if acc.is_satisfied() {
            return Ok(acc.result);
        }
        acc.take_full_sockets();
    } else {
        acc.take_full_sockets();
        if acc.is_satisfied() {
            return Ok(acc.result);
        }
        acc.take_full_numa_nodes();
    }
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if prefer_uncore {
        acc.take_uncore_caches();
        if acc.is_satisfied() {
            return Ok(acc.result);
        }
    }
    if strategy != SortingStrategy::Spread {
        acc.take_full_cores();
        if acc.is_satisfied() {
            return Ok(acc.result);
        }
    }
    acc.take_remaining_cpus();
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    Err(CpuError::FailedToAllocate)
}

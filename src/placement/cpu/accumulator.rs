//! kubelet's `cpuAccumulator` and `takeByTopologyNUMAPacked`: whole NUMA nodes / sockets, then
//! (optionally) uncore caches, then whole cores, then single CPUs, always preferring the element
//! with the fewest free CPUs (ties: lowest id).
//!
//! Mirrors `cpu_assignment.go` @08715a58 step for step, including its quirks (a list computed once
//! per step, `take` charging the size of what it is given).

use super::details::{CpuDetails, CpuTopology};
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
        self.free = self
            .free
            .keep_only(&self.free.cpus().difference(&self.result));
        self.needed -= cpus.len() as isize;
    }

    pub(crate) fn is_satisfied(&self) -> bool {
        self.needed < 1
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.needed > self.free.cpus().len() as isize
    }

    fn needs_at_least(&self, n: usize) -> bool {
        self.needed >= n as isize
    }

    /// `ids` ordered by free CPUs ascending, ties by id.
    fn sorted(&self, ids: &CpuSet, free_in: impl Fn(&CpuDetails, &[u32]) -> CpuSet) -> Vec<u32> {
        let mut v: Vec<(usize, u32)> = ids
            .iter()
            .map(|id| (free_in(&self.free, &[id]).len(), id))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, id)| id).collect()
    }

    pub(crate) fn sort_numa_nodes(&self) -> Vec<u32> {
        if self.topo.numa_first() {
            self.sorted(&self.free.numa_nodes(), CpuDetails::cpus_in_numa_nodes)
        } else {
            let mut out = Vec::new();
            for socket in self.sort_sockets() {
                let numas = self.free.numa_nodes_in_sockets(&[socket]);
                out.extend(self.sorted(&numas, CpuDetails::cpus_in_numa_nodes));
            }
            out
        }
    }

    pub(crate) fn sort_sockets(&self) -> Vec<u32> {
        if self.topo.numa_first() {
            let mut out = Vec::new();
            for numa in self.sort_numa_nodes() {
                let sockets = self.free.sockets_in_numa_nodes(&[numa]);
                out.extend(self.sorted(&sockets, CpuDetails::cpus_in_sockets));
            }
            out
        } else {
            self.sorted(&self.free.sockets(), CpuDetails::cpus_in_sockets)
        }
    }

    pub(crate) fn sort_cores(&self) -> Vec<u32> {
        let mut out = Vec::new();
        if self.topo.numa_first() {
            for socket in self.sort_sockets() {
                let cores = self.free.cores_in_sockets(&[socket]);
                out.extend(self.sorted(&cores, CpuDetails::cpus_in_cores));
            }
        } else {
            for numa in self.sort_numa_nodes() {
                let cores = self.free.cores_in_numa_nodes(&[numa]);
                out.extend(self.sorted(&cores, CpuDetails::cpus_in_cores));
            }
        }
        out
    }

    pub(crate) fn sort_uncore_caches(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for numa in self.sort_numa_nodes() {
            let uncores = self.free.uncore_in_numa_nodes(&[numa]);
            out.extend(self.sorted(&uncores, CpuDetails::cpus_in_uncore_caches));
        }
        out
    }

    /// Free CPUs in the order single CPUs are taken.
    pub(crate) fn sort_cpus(&self) -> Vec<u32> {
        let mut out = Vec::new();
        match self.strategy {
            SortingStrategy::Packed => {
                for core in self.sort_cores() {
                    out.extend(self.free.cpus_in_cores(&[core]).iter());
                }
            }
            SortingStrategy::Spread => {
                for socket in self.sort_sockets() {
                    out.extend(self.free.cpus_in_sockets(&[socket]).iter());
                }
            }
        }
        out
    }

    fn is_free(&self, id: u32, cpus_in: fn(&CpuDetails, &[u32]) -> CpuSet) -> bool {
        cpus_in(&self.free, &[id]).len() == cpus_in(self.topo.details(), &[id]).len()
    }

    pub(crate) fn free_numa_nodes(&self) -> Vec<u32> {
        let f = CpuDetails::cpus_in_numa_nodes;
        self.sort_numa_nodes()
            .into_iter()
            .filter(|&id| self.is_free(id, f))
            .collect()
    }

    pub(crate) fn free_sockets(&self) -> Vec<u32> {
        let f = CpuDetails::cpus_in_sockets;
        self.sort_sockets()
            .into_iter()
            .filter(|&id| self.is_free(id, f))
            .collect()
    }

    pub(crate) fn free_cores(&self) -> Vec<u32> {
        let f = CpuDetails::cpus_in_cores;
        self.sort_cores()
            .into_iter()
            .filter(|&id| self.is_free(id, f))
            .collect()
    }

    fn free_uncore_caches(&self) -> Vec<u32> {
        let f = CpuDetails::cpus_in_uncore_caches;
        self.sort_uncore_caches()
            .into_iter()
            .filter(|&id| self.is_free(id, f))
            .collect()
    }

    /// Takes every listed whole element whose size fits the remaining need.
    fn take_full(&mut self, ids: Vec<u32>, cpus_in: fn(&CpuDetails, &[u32]) -> CpuSet) {
        for id in ids {
            let cpus = cpus_in(self.topo.details(), &[id]);
            if self.needs_at_least(cpus.len()) {
                self.take(&cpus);
            }
        }
    }

    fn take_full_numa_nodes(&mut self) {
        let ids = self.free_numa_nodes();
        self.take_full(ids, CpuDetails::cpus_in_numa_nodes);
    }

    fn take_full_sockets(&mut self) {
        let ids = self.free_sockets();
        self.take_full(ids, CpuDetails::cpus_in_sockets);
    }

    fn take_full_cores(&mut self) {
        let ids = self.free_cores();
        self.take_full(ids, CpuDetails::cpus_in_cores);
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
        for uncore in self.sort_uncore_caches() {
            let size = self.topo.details().cpus_in_uncore_caches(&[uncore]).len();
            if self.needs_at_least(size) {
                let ids = self.free_uncore_caches();
                self.take_full(ids, CpuDetails::cpus_in_uncore_caches);
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

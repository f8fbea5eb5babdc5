//! The per-element indexes and one-pass counts that placement uses instead of rescanning the CPU
//! map agree with brute-force scans (the formulas the code used before) on random, possibly
//! irregular CPU maps: the topology index, `count_by` / `group_by` / `children`, the many-id
//! queries, the accumulator's orderings and whole-element filters, and CPU hint generation.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::policy::config;
use crate::cpuset::CpuSet;
use crate::placement::config::{CpuPolicyOptions, ReservedCpus};
use crate::placement::cpu::accumulator::{Accumulator, SortingStrategy};
use crate::placement::cpu::details::Level;
use crate::placement::cpu::{CpuDetails, CpuManager, CpuTopology, HeaderCounts};
use crate::placement::TopologyHint;
use crate::topology::{CpuInfo, Topology};

const LEVELS: [Level; 4] = [Level::Core, Level::Socket, Level::Numa, Level::Uncore];

/// A many-id `CpuDetails` query such as `cores_in_sockets`.
type Query = fn(&CpuDetails, &[u32]) -> CpuSet;

/// Up to 96 CPUs with ids below 160 and small, freely mixed element ids (maps need not be
/// regular: kubelet fixtures are not always).
fn cpus() -> impl Strategy<Value = Vec<CpuInfo>> {
    let cpu = (0u32..160, 0u32..48, 0u32..4, 0u32..6, 0u32..9).prop_map(
        |(id, core, socket, numa, uncore)| CpuInfo {
            id,
            core,
            socket,
            die: 0,
            numa,
            uncore,
        },
    );
    proptest::collection::vec(cpu, 1..96)
}

/// A pattern choosing a subset (see [`subset`]).
fn bits() -> impl Strategy<Value = Vec<bool>> {
    proptest::collection::vec(any::<bool>(), 1..40)
}

fn topology(cpus: Vec<CpuInfo>) -> CpuTopology {
    CpuTopology::new(&Topology { cpus, numa: vec![] })
}

/// The old query for one element: a scan of the map.
fn scan(d: &CpuDetails, level: Level, id: u32) -> CpuSet {
    match level {
        Level::Core => d.cpus_in_cores(&[id]),
        Level::Socket => d.cpus_in_sockets(&[id]),
        Level::Numa => d.cpus_in_numa_nodes(&[id]),
        Level::Uncore => d.cpus_in_uncore_caches(&[id]),
    }
}

/// A subset of `all` chosen by `bits`.
fn subset(all: &CpuSet, bits: &[bool]) -> CpuSet {
    all.iter()
        .zip(bits.iter().cycle())
        .filter(|(_, &keep)| keep)
        .map(|(id, _)| id)
        .collect()
}

/// The old `sorted`: free CPUs of each id by a scan, ascending, ties by id.
fn old_sorted(free: &CpuDetails, ids: &CpuSet, level: Level) -> Vec<u32> {
    let mut v: Vec<(usize, u32)> = ids
        .iter()
        .map(|id| (scan(free, level, id).len(), id))
        .collect();
    v.sort_unstable();
    v.into_iter().map(|(_, id)| id).collect()
}

fn old_sort_numa_nodes(topo: &CpuTopology, free: &CpuDetails) -> Vec<u32> {
    if topo.numa_first() {
        old_sorted(free, &free.numa_nodes(), Level::Numa)
    } else {
        let mut out = Vec::new();
        for socket in old_sort_sockets(topo, free) {
            let numas = free.numa_nodes_in_sockets(&[socket]);
            out.extend(old_sorted(free, &numas, Level::Numa));
        }
        out
    }
}

fn old_sort_sockets(topo: &CpuTopology, free: &CpuDetails) -> Vec<u32> {
    if topo.numa_first() {
        let mut out = Vec::new();
        for numa in old_sort_numa_nodes(topo, free) {
            let sockets = free.sockets_in_numa_nodes(&[numa]);
            out.extend(old_sorted(free, &sockets, Level::Socket));
        }
        out
    } else {
        old_sorted(free, &free.sockets(), Level::Socket)
    }
}

fn old_sort_cores(topo: &CpuTopology, free: &CpuDetails) -> Vec<u32> {
    let mut out = Vec::new();
    if topo.numa_first() {
        for socket in old_sort_sockets(topo, free) {
            let cores = free.cores_in_sockets(&[socket]);
            out.extend(old_sorted(free, &cores, Level::Core));
        }
    } else {
        for numa in old_sort_numa_nodes(topo, free) {
            let cores = free.cores_in_numa_nodes(&[numa]);
            out.extend(old_sorted(free, &cores, Level::Core));
        }
    }
    out
}

fn old_sort_uncore_caches(topo: &CpuTopology, free: &CpuDetails) -> Vec<u32> {
    let mut out = Vec::new();
    for numa in old_sort_numa_nodes(topo, free) {
        let uncores = free.uncore_in_numa_nodes(&[numa]);
        out.extend(old_sorted(free, &uncores, Level::Uncore));
    }
    out
}

/// Whole elements by a scan: all CPUs free, and for cores and sockets as many as the machine's
/// average (the kubelet's `CPUsPerCore` / `CPUsPerSocket` test).
fn old_whole(topo: &CpuTopology, free: &CpuDetails, level: Level, ids: Vec<u32>) -> Vec<u32> {
    let average = match level {
        Level::Core => Some(topo.cpus_per_core()),
        Level::Socket => Some(topo.cpus_per_socket()),
        _ => None,
    };
    ids.into_iter()
        .filter(|&id| {
            let n = scan(free, level, id).len();
            n == scan(topo.details(), level, id).len() && average.is_none_or(|a| a == n)
        })
        .collect()
}

/// The old `generateCPUTopologyHints`: a scan per mask.
fn old_hints(
    cm: &CpuManager,
    available: &CpuSet,
    reusable: &CpuSet,
    request: usize,
) -> Vec<TopologyHint> {
    let d = cm.topology().details();
    let numas = d.numa_nodes().to_vec();
    let mut min_size = numas.len();
    let numa_of = |cpu: u32| d.info(cpu).map(|i| i.numa);
    let mut hints = Vec::new();
    for mask in crate::placement::topology_manager::iterate_masks(&numas) {
        let bits: Vec<u32> = mask.ids().collect();
        if d.cpus_in_numa_nodes(&bits).len() >= request && bits.len() < min_size {
            min_size = bits.len();
        }
        let in_mask = |cpu: u32| numa_of(cpu).is_some_and(|n| mask.is_set(n));
        if !reusable.iter().all(in_mask) {
            continue;
        }
        let matching = reusable.len() + available.iter().filter(|&c| in_mask(c)).count();
        if matching >= request {
            hints.push(TopologyHint {
                affinity: Some(mask),
                preferred: false,
            });
        }
    }
    let c = cm.topology().counts();
    for h in &mut hints {
        let Some(mask) = h.affinity else { continue };
        let per_socket = c.num_numa_nodes.checked_div(c.num_sockets).unwrap_or(0);
        let bits: Vec<u32> = mask.ids().collect();
        let aligned = cm.options.align_by_socket
            && per_socket > 0
            && d.sockets_in_numa_nodes(&bits).len() == min_size.div_ceil(per_socket);
        if aligned || mask.count() as usize == min_size {
            h.preferred = true;
        }
    }
    hints
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn topology_index_matches_scans(cpus in cpus()) {
        let topo = topology(cpus);
        let d = topo.details();
        for level in LEVELS {
            for id in 0..50 {
                let want = scan(d, level, id);
                let got = topo.cpus_in(level, id).cloned().unwrap_or_default();
                prop_assert_eq!(&got, &want, "{:?} {}", level, id);
                prop_assert_eq!(topo.count_in(level, id), want.len());
            }
        }
        for numa in 0..8 {
            let got = topo.sockets_of_numa(numa).cloned().unwrap_or_default();
            prop_assert_eq!(got, d.sockets_in_numa_nodes(&[numa]));
        }
    }

    #[test]
    fn one_pass_counts_match_scans(cpus in cpus(), bits in bits()) {
        let topo = topology(cpus);
        let mut free = topo.details().keep_only(&subset(&topo.details().cpus(), &bits));
        for level in LEVELS {
            let counts = free.count_by(level);
            let groups = free.group_by(level);
            for id in 0..50 {
                let want = scan(&free, level, id);
                prop_assert_eq!(counts.get(&id).copied().unwrap_or(0), want.len());
                let group: CpuSet = groups.get(&id).into_iter().flatten().copied().collect();
                prop_assert_eq!(group, want);
            }
        }
        let children: [(Level, Level, Query); 5] = [
            (Level::Socket, Level::Core, CpuDetails::cores_in_sockets),
            (Level::Numa, Level::Core, CpuDetails::cores_in_numa_nodes),
            (Level::Socket, Level::Numa, CpuDetails::numa_nodes_in_sockets),
            (Level::Numa, Level::Socket, CpuDetails::sockets_in_numa_nodes),
            (Level::Numa, Level::Uncore, CpuDetails::uncore_in_numa_nodes),
        ];
        for (parent, child, query) in children {
            let map: BTreeMap<u32, CpuSet> = free.children(parent, child);
            for id in 0..50 {
                prop_assert_eq!(map.get(&id).cloned().unwrap_or_default(), query(&free, &[id]));
            }
        }
        // Removing CPUs keeps exactly the others.
        let gone = subset(&free.cpus(), &[true, false, false]);
        let want = free.cpus().difference(&gone);
        free.remove(&gone);
        prop_assert_eq!(free.cpus(), want);
        prop_assert_eq!(free.len(), free.cpus().len());
    }

    #[test]
    fn many_id_queries_match_a_slice_scan(
        cpus in cpus(),
        ids in proptest::collection::vec(0u32..50, 0..30),
    ) {
        let d = topology(cpus).details().clone();
        let by_slice = |field: fn(&CpuInfo) -> u32, key: fn(&CpuInfo) -> u32| -> CpuSet {
            let all: Vec<CpuInfo> = (0..200).filter_map(|c| d.info(c).copied()).collect();
            all.iter().filter(|c| ids.contains(&key(c))).map(field).collect()
        };
        prop_assert_eq!(d.cpus_in_cores(&ids), by_slice(|c| c.id, |c| c.core));
        prop_assert_eq!(d.cpus_in_numa_nodes(&ids), by_slice(|c| c.id, |c| c.numa));
        prop_assert_eq!(d.cores_in_sockets(&ids), by_slice(|c| c.core, |c| c.socket));
        prop_assert_eq!(d.uncore_in_numa_nodes(&ids), by_slice(|c| c.uncore, |c| c.numa));
    }

    #[test]
    fn accumulator_orderings_match_scans(
        cpus in cpus(),
        bits in bits(),
        sockets_first in any::<bool>(),
        spread in any::<bool>(),
    ) {
        let mut topo = topology(cpus);
        if sockets_first {
            // More NUMA nodes than sockets in the header: the sockets-first orderings.
            let c = topo.counts();
            topo = topo.with_counts(HeaderCounts { num_sockets: 1, num_numa_nodes: 2, ..c });
        }
        let available = subset(&topo.details().cpus(), &bits);
        let strategy = if spread { SortingStrategy::Spread } else { SortingStrategy::Packed };
        let acc = Accumulator::new(&topo, &available, 1, strategy);
        let free = topo.details().keep_only(&available);
        prop_assert_eq!(acc.sort_numa_nodes(), old_sort_numa_nodes(&topo, &free));
        prop_assert_eq!(acc.sort_sockets(), old_sort_sockets(&topo, &free));
        prop_assert_eq!(acc.sort_cores(), old_sort_cores(&topo, &free));
        prop_assert_eq!(acc.sort_uncore_caches(), old_sort_uncore_caches(&topo, &free));
        let old_cpus: Vec<u32> = if spread {
            let sockets = old_sort_sockets(&topo, &free);
            sockets.into_iter().flat_map(|s| free.cpus_in_sockets(&[s]).to_vec()).collect()
        } else {
            let cores = old_sort_cores(&topo, &free);
            cores.into_iter().flat_map(|c| free.cpus_in_cores(&[c]).to_vec()).collect()
        };
        prop_assert_eq!(acc.sort_cpus(), old_cpus);
        let numas = old_sort_numa_nodes(&topo, &free);
        prop_assert_eq!(acc.free_numa_nodes(), old_whole(&topo, &free, Level::Numa, numas));
        let sockets = old_sort_sockets(&topo, &free);
        prop_assert_eq!(acc.free_sockets(), old_whole(&topo, &free, Level::Socket, sockets));
        let cores = old_sort_cores(&topo, &free);
        prop_assert_eq!(acc.free_cores(), old_whole(&topo, &free, Level::Core, cores));
    }

    #[test]
    fn cpu_hints_match_per_mask_scans(
        cpus in cpus(),
        bits in bits(),
        reuse in bits(),
        outside in proptest::option::of(160u32..170),
        request in 1usize..40,
        align_by_socket in any::<bool>(),
    ) {
        let topo = topology(cpus);
        let options = CpuPolicyOptions { align_by_socket, ..CpuPolicyOptions::default() };
        let config = config(ReservedCpus::Explicit(CpuSet::new()), options);
        let cm = CpuManager::with_topology(topo, &config);
        let Ok(cm) = cm else { return Ok(()) };
        let all = cm.topology().details().cpus();
        let available = subset(&all, &bits);
        let mut reusable = subset(&all.difference(&available), &reuse);
        if let Some(cpu) = outside {
            // A reusable CPU the machine does not have: no mask can hold it.
            reusable.insert(cpu);
        }
        let want = old_hints(&cm, &available, &reusable, request);
        prop_assert_eq!(cm.generate_hints(&available, &reusable, request), want);
    }
}

//! kubelet's `cpu_assignment_test.go` rows (spec §6.3) and accumulator orderings, on the fixture
//! topologies with kubelet's header counters.

use super::fixtures::{kubelet_topo, set};
use crate::placement::cpu::accumulator::Accumulator;
use crate::placement::cpu::{take_distributed, take_packed, SortingStrategy};

enum Algo {
    Packed,
    Uncore,
    Spread,
    Distributed(usize),
}

/// (row, topology, available, n, algorithm, expected cpus or error message)
const ROWS: &[(&str, &str, &str, usize, Algo, &str)] = &[
    (
        "T1",
        "topoSingleSocketHT",
        "0,2,4,6",
        5,
        Algo::Packed,
        "error: not enough cpus available to satisfy request: requested=5, available=4",
    ),
    (
        "T1d",
        "topoSingleSocketHT",
        "0,2,4,6",
        5,
        Algo::Distributed(1),
        "error: not enough cpus available to satisfy request: requested=5, available=4",
    ),
    (
        "T2",
        "topoSingleSocketHT",
        "1,3,5,6,7",
        1,
        Algo::Packed,
        "6",
    ),
    ("T3", "topoSingleSocketHT", "0-7", 2, Algo::Packed, "0,4"),
    (
        "T4",
        "topoSingleSocketHT",
        "0,1,2,3,6",
        2,
        Algo::Packed,
        "2,6",
    ),
    (
        "T5",
        "topoDualSocketHT",
        "0-11",
        6,
        Algo::Packed,
        "0,2,4,6,8,10",
    ),
    (
        "T6",
        "topoDualSocketMultiNumaPerSocketHT",
        "0-79",
        40,
        Algo::Packed,
        "0-19,40-59",
    ),
    (
        "T7",
        "topoDualSocketMultiNumaPerSocketHT",
        "10-39,50-79",
        20,
        Algo::Packed,
        "10-19,50-59",
    ),
    (
        "T8",
        "topoDualSocketMultiNumaPerSocketHT",
        "1-39,41-79",
        60,
        Algo::Packed,
        "10-39,50-79",
    ),
    ("T9", "topoDualSocketHT", "1-5,7-11", 1, Algo::Packed, "2"),
    (
        "T11",
        "topoDualSocketHT",
        "0-11",
        8,
        Algo::Packed,
        "0,1,2,4,6,7,8,10",
    ),
    (
        "T13",
        "topoUncoreSingleSocketNoSMT",
        "1-15",
        10,
        Algo::Uncore,
        "1,2,4-11",
    ),
    (
        "T14",
        "topoUncoreDualSocketNoSMT",
        "2-15",
        6,
        Algo::Uncore,
        "2-7",
    ),
    (
        "T18",
        "topoDualSocketHT",
        "0-11",
        8,
        Algo::Spread,
        "0-4,6,8,10",
    ),
    ("T19", "topoSingleSocketHT", "0-7", 3, Algo::Spread, "0-2"),
    (
        "T21",
        "topoDualSocketHT",
        "1-5,7-11",
        1,
        Algo::Distributed(1),
        "1",
    ),
    (
        "T23",
        "topoDualSocketHT",
        "0-11",
        8,
        Algo::Distributed(1),
        "0-3,6-9",
    ),
    (
        "T24",
        "topoDualSocketMultiNumaPerSocketHT",
        "2-29,31-39,42-69,71-79",
        48,
        Algo::Distributed(1),
        "10-17,20-27,31-38,50-57,60-67,71-78",
    ),
    // The common packed rows also run through the distributed allocator with group size 1.
    (
        "T2d",
        "topoSingleSocketHT",
        "1,3,5,6,7",
        1,
        Algo::Distributed(1),
        "6",
    ),
    (
        "T5d",
        "topoDualSocketHT",
        "0-11",
        6,
        Algo::Distributed(1),
        "0,2,4,6,8,10",
    ),
    (
        "T7d",
        "topoDualSocketMultiNumaPerSocketHT",
        "10-39,50-79",
        20,
        Algo::Distributed(1),
        "10-19,50-59",
    ),
];

#[test]
fn take_by_topology_rows() {
    for (row, topo_name, avail, n, algo, want) in ROWS {
        let topo = kubelet_topo(topo_name);
        let avail = set(avail);
        let got = match algo {
            Algo::Packed => take_packed(&topo, &avail, *n, SortingStrategy::Packed, false),
            Algo::Uncore => take_packed(&topo, &avail, *n, SortingStrategy::Packed, true),
            Algo::Spread => take_packed(&topo, &avail, *n, SortingStrategy::Spread, false),
            Algo::Distributed(g) => {
                take_distributed(&topo, &avail, *n, *g, SortingStrategy::Packed, false)
            }
        };
        let got = match got {
            Ok(cpus) => cpus.to_string(),
            Err(e) => format!("error: {e}"),
        };
        let want = if want.starts_with("error") {
            want.to_string()
        } else {
            set(want).to_string()
        };
        assert_eq!(got, want, "row {row}");
    }
}

fn acc<'a>(topo: &'a crate::placement::cpu::CpuTopology, avail: &str) -> Accumulator<'a> {
    Accumulator::new(topo, &set(avail), 0, SortingStrategy::Packed)
}

#[test]
fn free_cpu_order() {
    for (topo_name, avail, want) in [
        (
            "topoDualSocketHT",
            "0-11",
            vec![0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
        ),
        ("topoSingleSocketHT", "3-7", vec![4, 5, 6, 3, 7]),
        (
            "topoTripleSocketHT",
            "0-3,6-13",
            vec![12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11],
        ),
    ] {
        let topo = kubelet_topo(topo_name);
        assert_eq!(acc(&topo, avail).sort_cpus(), want, "{topo_name} {avail}");
    }
}

#[test]
fn free_core_order() {
    let topo = kubelet_topo("topoDualSocketHT");
    assert_eq!(acc(&topo, "2-5,8-11").free_cores(), vec![2, 4, 3, 5]);
}

#[test]
fn free_sockets_and_numa_nodes() {
    let topo = kubelet_topo("topoDualSocketMultiNumaPerSocketHT");
    let a = acc(&topo, "1-59,61-79");
    assert!(a.free_sockets().is_empty());
    assert_eq!(a.free_numa_nodes(), vec![1, 3]);
    let all = acc(&topo, "0-79");
    assert_eq!(all.free_sockets(), vec![0, 1]);
    assert_eq!(all.free_numa_nodes(), vec![0, 1, 2, 3]);
}

#[test]
fn partially_used_units_sort_first() {
    // Socket 1 (odd CPUs) has fewer free CPUs, so its NUMA node, cores and CPUs come first.
    let topo = kubelet_topo("topoDualSocketHT");
    let a = acc(&topo, "0-2,4,6,8,10");
    assert_eq!(a.sort_numa_nodes(), vec![1, 0]);
    assert_eq!(a.sort_cpus(), vec![1, 0, 6, 2, 8, 4, 10]);
}

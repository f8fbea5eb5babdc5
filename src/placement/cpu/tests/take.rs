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
    // Further rows of cpu_assignment_test.go @08715a58 (commonTakeByTopologyTestCases,
    // TestTakeByTopologyNUMAPacked, ...WithSpreadPhysicalCPUsPreferredOption, ...NUMADistributed).
    ("zero", "topoSingleSocketHT", "0-7", 0, Algo::Packed, ""),
    ("one", "topoSingleSocketHT", "0-7", 1, Algo::Packed, "0"),
    ("all", "topoSingleSocketHT", "0-7", 8, Algo::Packed, "0-7"),
    ("numa", "topoDualSocketMultiNumaPerSocketHT", "0-79", 20, Algo::Packed, "0-9,40-49"),
    ("socket+numa", "topoDualSocketMultiNumaPerSocketHT", "0-79", 60, Algo::Packed, "0-29,40-69"),
    ("32 cores", "topoDualSocketMultiNumaPerSocketHT", "0-79", 64, Algo::Packed, "0-31,40-71"),
    ("hybrid", "topoSingleSocketSingleNumaPerSocketPCoreHTECoreST", "1-27", 2, Algo::Packed, "16-17"),
    ("uncore one cpu", "topoDualSocketHT", "1-5,7-11", 1, Algo::Uncore, "1"),
    ("uncore first", "topoUncoreDualSocketNoSMT", "0-15", 4, Algo::Uncore, "0-3"),
    ("uncore second socket", "topoUncoreDualSocketNoSMT", "8-15", 4, Algo::Uncore, "8-11"),
    ("uncore numa", "topoUncoreSingleSocketMultiNuma", "3-8,12", 2, Algo::Uncore, "4-5"),
    ("uncore smt best", "topoUncoreSingleSocketSMT", "2-7,10-15", 6, Algo::Uncore, "4-6,12-14"),
    ("uncore smt multiple", "topoUncoreSingleSocketSMT", "1-7,9-15", 10, Algo::Uncore, "1,4-7,9,12-15"),
    ("spread 2", "topoDualSocketHT", "0-11", 2, Algo::Spread, "0,2"),
    ("spread 3", "topoDualSocketHT", "0-11", 3, Algo::Spread, "0,2,4"),
    ("spread 6", "topoDualSocketHT", "0-11", 6, Algo::Spread, "0,2,4,6,8,10"),
    ("spread noht", "topoDualSocketNoHT", "0-7", 2, Algo::Spread, "0-1"),
    ("spread multi numa", "topoDualSocketMultiNumaPerSocketHT", "0-79", 8, Algo::Spread, "0-7"),
    ("spread quad", "topoQuadSocketFourWayHT", "0-287", 12, Algo::Spread, "0-2,9-10,13-14,21-22,25-26,33"),
    ("dist 64", "topoDualSocketMultiNumaPerSocketHT", "0-79", 64, Algo::Distributed(1), "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
    ("dist 48", "topoDualSocketMultiNumaPerSocketHT", "0-79", 48, Algo::Distributed(1), "0-7,10-17,20-27,40-47,50-57,60-67"),
    ("dist 48 first", "topoDualSocketMultiNumaPerSocketHT", "1-29,32-39,41-69,72-79", 48, Algo::Distributed(1), "1-8,10-17,20-27,41-48,50-57,60-67"),
    ("dist 16", "topoDualSocketMultiNumaPerSocketHT", "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, Algo::Distributed(1), "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
    ("dist g2 one", "topoDualSocketHT", "1-5,7-11", 1, Algo::Distributed(2), "2"),
    ("dist 26", "topoDualSocketMultiNumaPerSocketHT", "0-79", 26, Algo::Distributed(1), "0-6,10-16,40-45,50-55"),
    ("dist 26 g2", "topoDualSocketMultiNumaPerSocketHT", "0-79", 26, Algo::Distributed(2), "0-6,10-15,40-46,50-55"),
    ("dist 62", "topoDualSocketMultiNumaPerSocketHT", "0-79", 62, Algo::Distributed(1), "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
    ("dist 62 g2", "topoDualSocketMultiNumaPerSocketHT", "0-79", 62, Algo::Distributed(2), "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
    ("dist 62 balance", "topoDualSocketMultiNumaPerSocketHT", "0-8,10-18,20-39,40-48,50-58,60-79", 62, Algo::Distributed(1), "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
    ("dist 62 balance g2", "topoDualSocketMultiNumaPerSocketHT", "0-8,10-18,20-39,40-48,50-58,60-79", 62, Algo::Distributed(2), "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
    ("dist remainder", "topoDualSocketMultiNumaPerSocketHT", "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, Algo::Distributed(1), "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
    ("dist live machine", "topoDualSocketMultiNumaPerSocketHTLarge", "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255", 28, Algo::Distributed(1), "43-47,75-79,96,101-105,171-174,203-206,229-232"),
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
        let want = if want.starts_with("error") || want.is_empty() {
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
        ("topoSingleSocketHT", "0-7", vec![0, 4, 1, 5, 2, 6, 3, 7]),
        (
            "topoDualSocketHT",
            "1-11",
            vec![6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
        ),
        (
            "topoDualSocketHT",
            "1-5,7-11",
            vec![2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
        ),
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
    for (topo_name, avail, want) in [
        ("topoSingleSocketHT", "0-7", vec![0, 1, 2, 3]),
        ("topoSingleSocketHT", "0-2,4-6", vec![0, 1, 2]),
        ("topoSingleSocketHT", "0-6", vec![0, 1, 2]),
        ("topoSingleSocketHT", "", vec![]),
        ("topoSingleSocketHT", "0-3", vec![]),
        ("topoDualSocketHT", "0-11", vec![0, 2, 4, 1, 3, 5]),
        ("topoDualSocketHT", "1-5,7-11", vec![2, 4, 1, 3, 5]),
        ("topoDualSocketHT", "2-5,8-11", vec![2, 4, 3, 5]),
    ] {
        let topo = kubelet_topo(topo_name);
        assert_eq!(acc(&topo, avail).free_cores(), want, "{topo_name} {avail}");
    }
}

#[test]
fn free_sockets_and_numa_nodes() {
    let topo = kubelet_topo("topoDualSocketMultiNumaPerSocketHT");
    let a = acc(&topo, "1-59,61-79");
    assert!(a.free_sockets().is_empty());
    assert_eq!(a.free_numa_nodes(), vec![1, 3]);
    for (avail, sockets, numas) in [
        ("0-79", vec![0, 1], vec![0, 1, 2, 3]),
        ("1-79", vec![1], vec![1, 2, 3]),
        ("1-9,11-79", vec![1], vec![2, 3]),
    ] {
        let a = acc(&topo, avail);
        assert_eq!(a.free_sockets(), sockets, "{avail}");
        assert_eq!(a.free_numa_nodes(), numas, "{avail}");
    }
    for (topo_name, avail, numas) in [
        (
            "topoDualSocketMultiNumaPerSocketHT",
            "1-9,11-59,61-79",
            vec![3],
        ),
        (
            "topoDualSocketMultiNumaPerSocketHT",
            "1-9,11-59,61-78",
            vec![],
        ),
        ("fakeTopoMultiSocketDualSocketPerNumaHT", "0-79", vec![0, 1]),
        (
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-9,11-79",
            vec![1],
        ),
        (
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-9,11-59,61-79",
            vec![],
        ),
        ("topoDualSocketHT", "0,2-9,11", vec![]),
    ] {
        let topo = kubelet_topo(topo_name);
        assert_eq!(
            acc(&topo, avail).free_numa_nodes(),
            numas,
            "{topo_name} {avail}"
        );
    }
}

#[test]
fn partially_used_units_sort_first() {
    // Socket 1 (odd CPUs) has fewer free CPUs, so its NUMA node, cores and CPUs come first.
    let topo = kubelet_topo("topoDualSocketHT");
    let a = acc(&topo, "0-2,4,6,8,10");
    assert_eq!(a.sort_numa_nodes(), vec![1, 0]);
    assert_eq!(a.sort_cpus(), vec![1, 0, 6, 2, 8, 4, 10]);
}

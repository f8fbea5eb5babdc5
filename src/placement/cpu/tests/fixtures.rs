//! Test-only loader for `shared/fixtures/topologies/*.json` plus the kubelet header counters of
//! each fixture (from `shared/fixtures/topologies/README.md`; "-" = 0).

use std::path::PathBuf;

use crate::cpuset::CpuSet;
use crate::placement::cpu::{CpuTopology, HeaderCounts};
use crate::topology::{CpuInfo, Topology};

#[derive(serde::Deserialize)]
struct File {
    cpus: Vec<CpuInfo>,
}

pub(super) fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")
}

/// (name, NumCPUs, NumCores, NumSockets, NumNUMANodes, NumUncoreCache) as kubelet's fixtures set them.
pub(super) const HEADERS: &[(&str, usize, usize, usize, usize, usize)] = &[
    ("topoSingleSocketHT", 8, 4, 1, 0, 0),
    ("topoDualSocketHT", 12, 6, 2, 0, 1),
    ("topoUncoreDualSocketNoSMT", 16, 16, 2, 0, 4),
    ("topoUncoreSingleSocketMultiNuma", 16, 16, 1, 0, 4),
    ("topoUncoreSingleSocketSMT", 16, 8, 1, 0, 2),
    ("topoUncoreSingleSocketNoSMT", 16, 16, 1, 0, 4),
    ("topoDualSocketNoHT", 8, 8, 2, 0, 0),
    ("topoTripleSocketHT", 18, 9, 3, 0, 0),
    ("topoQuadSocketFourWayHT", 288, 72, 4, 0, 0),
    ("topoDualSocketMultiNumaPerSocketHT", 80, 40, 2, 4, 0),
    ("topoDualSocketMultiNumaPerSocketHTType2", 80, 40, 2, 4, 0),
    ("fakeTopoMultiSocketDualSocketPerNumaHT", 80, 40, 4, 2, 0),
    ("topoDualSocketMultiNumaPerSocketHTLarge", 256, 128, 2, 8, 0),
    (
        "topoDualSocketSingleNumaPerSocketSMTUncore",
        384,
        192,
        2,
        2,
        24,
    ),
    (
        "topoSingleSocketSingleNumaPerSocketSMTSmallUncore",
        128,
        64,
        1,
        1,
        16,
    ),
    (
        "topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore",
        128,
        64,
        1,
        1,
        16,
    ),
    (
        "topoSmallDualSocketSingleNumaPerSocketNoSMTUncore",
        64,
        64,
        2,
        2,
        8,
    ),
    (
        "topoSmallSingleSocketSingleNumaPerSocketNoSMTUncore",
        32,
        32,
        1,
        1,
        4,
    ),
    (
        "topoLargeSingleSocketSingleNumaPerSocketSMTUncore",
        256,
        128,
        1,
        1,
        16,
    ),
    ("topoDualSocketMultiNumaPerSocketUncore", 192, 192, 2, 4, 24),
    (
        "topoDualSocketSubNumaPerSocketHTMonolithicUncore",
        240,
        120,
        2,
        4,
        2,
    ),
    (
        "topoSingleSocketSingleNumaPerSocketPCoreHTMonolithicUncore",
        24,
        16,
        1,
        1,
        1,
    ),
    (
        "topoSingleSocketSingleNumaPerSocketPCoreHTECoreST",
        28,
        20,
        1,
        1,
        0,
    ),
    (
        "topoLargeSingleSocketSingleNumaPerSocketUncore",
        128,
        128,
        1,
        1,
        16,
    ),
    ("topoSingleSocketSingleNumaPerSocketUncore", 64, 64, 1, 1, 1),
];

/// The fixture's CPU map as a [`Topology`].
pub(super) fn machine(name: &str) -> Topology {
    let path = fixtures_dir().join(format!("topologies/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let file: File = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    Topology {
        cpus: file.cpus,
        numa: vec![],
    }
}

/// The fixture exactly as kubelet's tests see it: CPU map plus hand-set header counters.
pub(super) fn kubelet_topo(name: &str) -> CpuTopology {
    let &(_, cpus, cores, sockets, numa, uncore) = HEADERS
        .iter()
        .find(|h| h.0 == name)
        .unwrap_or_else(|| panic!("no header for {name}"));
    CpuTopology::new(&machine(name)).with_counts(HeaderCounts {
        num_cpus: cpus,
        num_cores: cores,
        num_sockets: sockets,
        num_numa_nodes: numa,
        num_uncore_caches: uncore,
    })
}

pub(super) fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

#[test]
fn derived_counts_match_headers_except_documented_anomalies() {
    for &(name, cpus, cores, sockets, numa, uncore) in HEADERS {
        let c = CpuTopology::new(&machine(name)).counts();
        let anomaly = name == "topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore"
            || name == "topoDualSocketMultiNumaPerSocketUncore";
        if anomaly {
            assert_ne!((c.num_cpus, c.num_cores), (cpus, cores), "{name}");
            continue;
        }
        assert_eq!(
            (c.num_cpus, c.num_cores, c.num_sockets),
            (cpus, cores, sockets),
            "{name}"
        );
        if numa != 0 {
            assert_eq!(c.num_numa_nodes, numa, "{name}");
        }
        if uncore > 1 {
            assert_eq!(c.num_uncore_caches, uncore, "{name}");
        }
    }
}

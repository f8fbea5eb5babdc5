//! Machines whose cores (or sockets, or uncore caches) differ in size: kubelet v1.37.2's
//! accumulator calls a core free when its free CPUs number the machine's *average* threads per
//! core (`CPUsPerCore() = NumCPUs / NumCores`), a socket when they number `CPUsPerSocket()`, and
//! takes whole uncore caches once the need reaches `CPUsPerUncore()`. numa-shim follows, except
//! where the kubelet would then take a core or socket some of whose CPUs are already granted: it
//! never grants a CPU twice (docs/fidelity.md).

use crate::cpuset::CpuSet;
use crate::placement::cpu::{take_packed, CpuTopology, SortingStrategy};
use crate::topology::{CpuInfo, Topology};

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

/// (id, core, socket, uncore) on NUMA node 0.
fn topo(cpus: &[(u32, u32, u32, u32)]) -> CpuTopology {
    CpuTopology::new(&Topology {
        cpus: cpus
            .iter()
            .map(|&(id, core, socket, uncore)| CpuInfo {
                id,
                core,
                socket,
                die: 0,
                numa: 0,
                uncore,
            })
            .collect(),
        numa: vec![],
    })
}

/// One NUMA node, two sockets: socket 0 has a 4-thread core (0-3) and a 1-thread core (8),
/// socket 1 a 4-thread core (11-14). 9 CPUs / 3 cores: 3 per core "on average", 4 per socket.
fn lopsided() -> CpuTopology {
    topo(&[
        (0, 0, 0, 0),
        (1, 0, 0, 0),
        (2, 0, 0, 0),
        (3, 0, 0, 0),
        (8, 8, 0, 0),
        (11, 11, 1, 1),
        (12, 11, 1, 1),
        (13, 11, 1, 1),
        (14, 11, 1, 1),
    ])
}

#[test]
fn a_whole_core_of_the_wrong_size_is_not_free() {
    let t = lopsided();
    // Core 8 (1 CPU) is not "free" (1 ≠ 3): the single CPU comes from the socket with fewer
    // free CPUs, socket 1, as the kubelet takes it (its reserved CPU for kubeReserved 500m).
    let one = take_packed(&t, &t.details().cpus(), 1, SortingStrategy::Packed, false).unwrap();
    assert_eq!(one, set("11"));
    // Core 11 has 3 free CPUs, the average: the kubelet calls it free (and would take all four
    // if two were asked for... it is not asked: 4 > 2); two CPUs come from socket 1.
    let two = take_packed(&t, &set("0-3,8,12-14"), 2, SortingStrategy::Packed, false).unwrap();
    assert_eq!(two, set("12-13"));
}

#[test]
fn a_partly_granted_core_is_never_taken_whole() {
    let t = lopsided();
    // Core 0 with CPU 0 granted: 3 free = the average; the kubelet would take core 0 whole
    // (CPUs 0-3, 0 included) for a 4-CPU request. numa-shim does not give CPU 0 again.
    let four = take_packed(&t, &set("1-3,8,11-14"), 4, SortingStrategy::Packed, false).unwrap();
    assert!(!four.contains(0), "{four}");
    assert_eq!(four.len(), 4);
}

#[test]
fn whole_uncore_caches_are_taken_from_the_average_size_on() {
    // Uncore 0: CPUs 0-1, uncore 1: CPUs 2-7 (no SMT): 8 CPUs / 2 caches = 4 on average. Three
    // CPUs are fewer than that: no whole cache, the partial step fits them in uncore 1.
    let t = topo(&[
        (0, 0, 0, 0),
        (1, 1, 0, 0),
        (2, 2, 0, 1),
        (3, 3, 0, 1),
        (4, 4, 0, 1),
        (5, 5, 0, 1),
        (6, 6, 0, 1),
        (7, 7, 0, 1),
    ]);
    let got = take_packed(&t, &t.details().cpus(), 3, SortingStrategy::Packed, true).unwrap();
    assert_eq!(got, set("2-4"));
}

/// `Config::reproduce_kubelet_double_grants` (for the differential suite's classification only)
/// runs the kubelet's average-only test: core 0, with CPU 0 already granted, is taken whole.
#[test]
fn the_kubelets_rule_can_be_reproduced_for_classification() {
    // Sockets are not "free" (3 free each, 4 on average); core 0 is (3 free, the average).
    let available = set("1-3,12-14");
    let kubelet = lopsided().with_kubelet_free_test(true);
    let four = take_packed(&kubelet, &available, 4, SortingStrategy::Packed, false).unwrap();
    assert_eq!(four, set("0-3"), "the kubelet grants CPU 0 again");
    let ours = take_packed(&lopsided(), &available, 4, SortingStrategy::Packed, false).unwrap();
    assert!(ours.is_subset(&available) && ours.len() == 4, "{ours}");
}

//! Queries and header counters on kubelet's dual-socket fixture.

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

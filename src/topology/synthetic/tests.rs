use std::collections::BTreeSet;

use super::*;
use crate::topology::fake::FakeSysfs;

/// Checks every structural promise of the module doc against a built machine.
fn check_shape(spec: &SyntheticSpec, t: &Topology) {
    let ncores = spec.sockets * spec.numa_per_socket * spec.cores_per_numa;
    let numa_count = spec.sockets * spec.numa_per_socket;
    t.validate().unwrap();
    assert_eq!(t.cpus.len() as u64, spec.num_cpus());
    assert_eq!(t.num_cores(), ncores as usize);
    assert_eq!(t.num_sockets(), spec.sockets as usize);
    assert_eq!(t.numa.len(), numa_count as usize);
    assert_eq!(t.num_numa_nodes(), numa_count as usize);
    assert_eq!(
        t.num_uncore_caches(),
        (numa_count * spec.uncore_per_numa) as usize
    );
    for cpu in &t.cpus {
        // Threads of core c are {c, c + ncores, ...}; the core id is the lowest of them.
        assert_eq!(cpu.core, cpu.id % ncores, "{cpu:?}");
        let sibling = t.cpu(cpu.core).unwrap();
        assert_eq!(
            (sibling.socket, sibling.numa, sibling.uncore),
            (cpu.socket, cpu.numa, cpu.uncore)
        );
        assert_eq!(cpu.socket, cpu.numa / spec.numa_per_socket, "{cpu:?}");
    }
    for node in &t.numa {
        let cpus = t.cpus_in_numa(node.id);
        assert_eq!(
            cpus.len() as u32,
            spec.cores_per_numa * spec.threads_per_core
        );
        let cores: BTreeSet<u32> = cpus.iter().map(|c| c % ncores).collect();
        let lo = node.id * spec.cores_per_numa;
        assert_eq!(
            cores,
            (lo..lo + spec.cores_per_numa).collect(),
            "node {}",
            node.id
        );
        assert_eq!(node.memory, spec.memory_per_numa);
        assert_eq!(node.distances.len(), t.numa.len());
        for (to, d) in node.distances.iter().enumerate() {
            assert_eq!(*d, t.numa[to].distances[node.id as usize], "symmetric");
            let same_socket = node.id / spec.numa_per_socket == to as u32 / spec.numa_per_socket;
            let want = match (node.id == to as u32, same_socket, spec.numa_per_socket) {
                (true, _, _) => 10,
                (false, _, 1) | (false, true, _) => 21,
                (false, false, _) => 31,
            };
            assert_eq!(*d, want, "distance {} → {to}", node.id);
        }
    }
}

#[test]
fn builds_16_256_1024_4096_cpu_machines() {
    for (spec, cpus) in [
        (SyntheticSpec::new(1, 1, 8, 2, 2), 16),
        (SyntheticSpec::new(2, 2, 32, 2, 4), 256),
        (SyntheticSpec::new(2, 4, 64, 2, 8), 1024),
        (SyntheticSpec::new(4, 2, 256, 2, 16), 4096),
    ] {
        let t = spec.build().unwrap();
        assert_eq!(t.cpus.len(), cpus);
        check_shape(&spec, &t);
    }
}

#[test]
fn numbering_of_a_small_machine_by_hand() {
    // 2 sockets × 2 nodes × 2 cores × 2 threads: 8 cores, threads {c, c+8}.
    let t = SyntheticSpec::new(2, 2, 2, 2, 1).build().unwrap();
    let row = |id: u32| {
        let c = t.cpu(id).unwrap();
        (c.core, c.socket, c.numa, c.uncore)
    };
    assert_eq!(row(0), (0, 0, 0, 0));
    assert_eq!(row(3), (3, 0, 1, 1));
    assert_eq!(row(13), (5, 1, 2, 2));
    assert_eq!(row(15), (7, 1, 3, 3));
    assert_eq!(t.numa[0].distances, [10, 21, 31, 31]);
    assert_eq!(t.numa[3].distances, [31, 31, 21, 10]);
    assert_eq!(t.cpus_in_numa(2).to_list(), "4-5,12-13");
}

#[test]
fn four_way_smt_and_no_smt() {
    let spec = SyntheticSpec::new(1, 1, 4, 4, 1);
    let t = spec.build().unwrap();
    check_shape(&spec, &t);
    assert_eq!(
        t.cpus
            .iter()
            .filter(|c| c.core == 1)
            .map(|c| c.id)
            .collect::<Vec<_>>(),
        [1, 5, 9, 13]
    );
    let spec = SyntheticSpec::new(2, 1, 4, 1, 1);
    check_shape(&spec, &spec.build().unwrap());
}

#[test]
fn refuses_impossible_shapes() {
    assert_eq!(
        SyntheticSpec::new(0, 1, 1, 1, 1).build(),
        Err(SyntheticError::Zero("sockets"))
    );
    assert_eq!(
        SyntheticSpec::new(1, 1, 6, 1, 4).build(),
        Err(SyntheticError::UncoreSplit {
            cores: 6,
            uncore: 4
        })
    );
    let huge = SyntheticSpec::new(u32::MAX, u32::MAX, u32::MAX, u32::MAX, 1);
    assert!(matches!(
        huge.build(),
        Err(SyntheticError::TooManyCpus { .. })
    ));
}

#[test]
fn survives_json_and_a_fake_sysfs_round_trip() {
    // Several uncore caches per node: the L3 is not node-wide, so sysfs discovery keeps the ids.
    let mut spec = SyntheticSpec::new(2, 2, 16, 2, 2);
    spec.hugepages_per_numa = BTreeMap::from([(2 << 20, 1 << 30)]);
    let t = spec.build().unwrap();
    assert_eq!(Topology::from_json_str(&t.to_json().unwrap()).unwrap(), t);
    let dir = tempfile::tempdir().unwrap();
    FakeSysfs::new(t.clone()).write(dir.path()).unwrap();
    assert_eq!(crate::topology::discover(dir.path()).unwrap(), t);
}

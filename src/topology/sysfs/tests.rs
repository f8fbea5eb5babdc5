//! Discovery on fake sysfs trees. Each tree says which machine shape it mimics; all but the
//! first are written by `topology::fake` from a hand-written model, and every test also checks
//! a few ids by hand so that writer and reader cannot agree on a mistake unnoticed.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use super::*;
use crate::topology::fake::{remove, write_file, FakeSysfs};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// A temp dir with the sysfs root at `<tmp>/sys` (so `<root>/../proc` stays inside it).
fn tree(fake: &FakeSysfs) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sys");
    fake.write(&root).unwrap();
    (dir, root)
}

/// CPUs from (id, core, socket, numa, uncore) rows.
fn cpus(rows: &[(u32, u32, u32, u32, u32)]) -> Vec<CpuInfo> {
    rows.iter()
        .map(|&(id, core, socket, numa, uncore)| CpuInfo {
            id,
            core,
            socket,
            die: 0,
            numa,
            uncore,
        })
        .collect()
}

fn node(id: u32, memory: u64, hugepages: &[(u64, u64)], distances: &[u32]) -> NumaNode {
    NumaNode {
        id,
        memory,
        hugepages: hugepages.iter().copied().collect(),
        distances: distances.to_vec(),
    }
}

/// 2 sockets × 4 cores × 2 threads, threads {c, c+8}, socket = NUMA node, one L3 per socket
/// (a two-socket Xeon with Hyper-Threading, numbered as Linux does on Intel).
fn dual_socket_ht() -> Topology {
    let rows: Vec<_> = (0..16)
        .map(|cpu| {
            let core = cpu % 8;
            let socket = core / 4;
            (cpu, core, socket, socket, socket)
        })
        .collect();
    Topology {
        cpus: cpus(&rows),
        numa: vec![
            node(0, 32 * GI, &[], &[10, 21]),
            node(1, 32 * GI, &[], &[21, 10]),
        ],
    }
}

#[test]
fn this_two_cpu_vm_read_from_literal_files() {
    // Copied from this machine's /sys (a 2-vCPU VM: no SMT, one socket, one node, one L3).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let w = |rel: &str, text: &str| write_file(root, rel, text).unwrap();
    w("devices/system/cpu/online", "0-1");
    for cpu in 0..2 {
        let t = format!("devices/system/cpu/cpu{cpu}/topology");
        w(&format!("{t}/physical_package_id"), "0");
        w(&format!("{t}/die_id"), "0");
        w(&format!("{t}/core_id"), &cpu.to_string());
        w(&format!("{t}/core_cpus_list"), &cpu.to_string());
        w(&format!("{t}/thread_siblings_list"), &cpu.to_string());
        for (index, level, kind, shared) in [
            (0, "1", "Data", cpu.to_string()),
            (1, "1", "Instruction", cpu.to_string()),
            (2, "2", "Unified", cpu.to_string()),
            (3, "3", "Unified", "0-1".to_string()),
        ] {
            let c = format!("devices/system/cpu/cpu{cpu}/cache/index{index}");
            w(&format!("{c}/level"), level);
            w(&format!("{c}/type"), kind);
            w(&format!("{c}/id"), "0");
            w(&format!("{c}/shared_cpu_list"), &shared);
        }
    }
    let n = "devices/system/node/node0";
    w(&format!("{n}/cpulist"), "0-1");
    w(&format!("{n}/distance"), "10");
    w(
        &format!("{n}/meminfo"),
        "Node 0 MemTotal:        6252756 kB\nNode 0 MemFree:         3664188 kB\n",
    );
    w(
        &format!("{n}/hugepages/hugepages-1048576kB/nr_hugepages"),
        "0",
    );
    w(&format!("{n}/hugepages/hugepages-2048kB/nr_hugepages"), "0");

    let t = discover(root).unwrap();
    assert_eq!(t.cpus, cpus(&[(0, 0, 0, 0, 0), (1, 1, 0, 0, 0)]));
    assert_eq!(
        t.numa,
        vec![node(0, 6_252_756 * 1024, &[(2 * MI, 0), (GI, 0)], &[10])]
    );
}

#[test]
fn dual_socket_ht_core_is_lowest_sibling_not_sysfs_core_id() {
    let want = dual_socket_ht();
    let (_dir, root) = tree(&FakeSysfs::new(want.clone()));
    // The kernel's core_id is socket-local: CPU 12 is core 0 of socket 1.
    let core_id = fs::read_to_string(root.join("devices/system/cpu/cpu12/topology/core_id"));
    assert_eq!(core_id.unwrap().trim(), "0");
    let got = discover(&root).unwrap();
    assert_eq!(got, want);
    let cpu12 = got.cpu(12).unwrap();
    assert_eq!(
        (cpu12.core, cpu12.socket, cpu12.numa, cpu12.uncore),
        (4, 1, 1, 1)
    );
}

#[test]
fn without_sibling_lists_cores_group_by_package_and_core_id() {
    let want = dual_socket_ht();
    let (_dir, root) = tree(&FakeSysfs::new(want.clone()).without_sibling_lists());
    assert_eq!(discover(&root).unwrap(), want);
}

#[test]
fn dual_socket_two_numa_per_socket_l3_spanning_the_socket_is_uncore() {
    // Sub-NUMA clustering (Intel SNC2 / AMD NPS2): 2 sockets × 2 nodes × 2 cores × 2 threads,
    // threads {c, c+8}; the L3 (kernel ids 4 and 5) spans both nodes of its socket, so it is
    // not a node-level cache and its id becomes the uncore id.
    let rows: Vec<_> = (0..16)
        .map(|cpu| {
            let core = cpu % 8;
            (cpu, core, core / 4, core / 2, 4 + core / 4)
        })
        .collect();
    let d = [
        [10, 11, 21, 21],
        [11, 10, 21, 21],
        [21, 21, 10, 11],
        [21, 21, 11, 10],
    ];
    let want = Topology {
        cpus: cpus(&rows),
        numa: (0..4)
            .map(|i| node(i, 16 * GI, &[], &d[i as usize]))
            .collect(),
    };
    let (_dir, root) = tree(&FakeSysfs::new(want.clone()));
    let got = discover(&root).unwrap();
    assert_eq!(got, want);
    let cpu10 = got.cpu(10).unwrap();
    assert_eq!(
        (cpu10.core, cpu10.socket, cpu10.numa, cpu10.uncore),
        (2, 0, 1, 4)
    );
    assert_eq!(got.cpus_in_numa(3).to_list(), "6-7,14-15");
}

/// 1 socket, 1 node, 16 cores × 2 threads {c, c+16}, one L3 per 4 cores with kernel ids 8-11
/// (an AMD EPYC / Ryzen with CCX-split L3).
fn single_socket_ccx() -> Topology {
    let rows: Vec<_> = (0..32)
        .map(|cpu| {
            let core = cpu % 16;
            (cpu, core, 0, 0, 8 + core / 4)
        })
        .collect();
    Topology {
        cpus: cpus(&rows),
        numa: vec![node(0, 128 * GI, &[], &[10])],
    }
}

#[test]
fn single_socket_with_many_l3_has_one_uncore_per_ccx() {
    let want = single_socket_ccx();
    let (_dir, root) = tree(&FakeSysfs::new(want.clone()));
    let got = discover(&root).unwrap();
    assert_eq!(got, want);
    assert_eq!(got.num_uncore_caches(), 4);
    assert_eq!(got.cpu(21).unwrap().uncore, 9);
}

#[test]
fn without_caches_uncore_falls_back_to_socket() {
    let (_dir, root) = tree(&FakeSysfs::new(single_socket_ccx()).without_caches());
    let got = discover(&root).unwrap();
    assert!(got.cpus.iter().all(|c| c.uncore == 0), "{:?}", got.cpus);
}

#[test]
fn four_numa_with_hugepages_and_non_uniform_distances() {
    // 4 sockets, one node each, 2 cores, no SMT; a ring of sockets (16 to a neighbour, 22
    // across) as on 4-socket Opteron / Xeon boards; hugepages differ per node.
    let rows: Vec<_> = (0..8)
        .map(|cpu| (cpu, cpu, cpu / 2, cpu / 2, cpu / 2))
        .collect();
    let want = Topology {
        cpus: cpus(&rows),
        numa: vec![
            node(0, 16 * GI, &[(2 * MI, GI)], &[10, 16, 16, 22]),
            node(1, 32 * GI, &[(2 * MI, 0), (GI, 4 * GI)], &[16, 10, 22, 16]),
            node(2, 16 * GI, &[], &[16, 22, 10, 16]),
            node(3, 8 * GI, &[(2 * MI, 2 * MI)], &[22, 16, 16, 10]),
        ],
    };
    let (_dir, root) = tree(&FakeSysfs::new(want.clone()));
    let pages = fs::read_to_string(
        root.join("devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"),
    );
    assert_eq!(pages.unwrap().trim(), "512");
    let got = discover(&root).unwrap();
    assert_eq!(got, want);
    assert_eq!(got.numa_node(3).unwrap().distances, [22, 16, 16, 10]);
    assert_eq!(got.numa_node(1).unwrap().hugepages[&GI], 4 * GI);
}

#[test]
fn offline_cpus_are_excluded_and_cores_shrink() {
    // 4 cores × 2 threads {c, c+4}; CPUs 1 and 6 offline (echo 0 > cpuN/online). The sibling and
    // node lists still name them. The L3 (id 3) is shared by the 6 online CPUs while cadvisor's
    // test compares with cores × threads-of-this-core (8 or 4), so every core reports uncore 3.
    let rows: Vec<_> = (0..8).map(|cpu| (cpu, cpu % 4, 0, 0, 3)).collect();
    let machine = Topology {
        cpus: cpus(&rows),
        numa: vec![node(0, 8 * GI, &[], &[10])],
    };
    let offline = CpuSet::parse("1,6").unwrap();
    let (_dir, root) = tree(&FakeSysfs::new(machine).offline(offline));
    let got = discover(&root).unwrap();
    let want = cpus(&[
        (0, 0, 0, 0, 3),
        (2, 2, 0, 0, 3),
        (3, 3, 0, 0, 3),
        (4, 0, 0, 0, 3),
        (5, 5, 0, 0, 3),
        (7, 3, 0, 0, 3),
    ]);
    assert_eq!(got.cpus, want);
    assert_eq!(got.num_cores(), 4);
}

#[test]
fn no_node_directory_is_one_node_zero_with_proc_meminfo() {
    // A kernel without CONFIG_NUMA: two sockets, no devices/system/node/.
    let mut machine = dual_socket_ht();
    machine.numa[0].hugepages = BTreeMap::from([(2 * MI, 4 * MI)]);
    let (dir, root) = tree(&FakeSysfs::new(machine).without_node_dir());
    let got = discover(&root).unwrap();
    assert!(got.cpus.iter().all(|c| c.numa == 0));
    assert_eq!(got.cpu(12).unwrap().socket, 1);
    assert_eq!(got.numa, vec![node(0, 64 * GI, &[(2 * MI, 4 * MI)], &[10])]);

    fs::remove_file(dir.path().join("proc/meminfo")).unwrap();
    assert_eq!(discover(&root).unwrap().numa[0].memory, 0);
}

#[test]
fn memory_only_node_is_kept() {
    // A CXL memory expander shows up as a node with memory and an empty cpulist.
    let mut machine = dual_socket_ht();
    for cpu in &mut machine.cpus {
        cpu.numa = 0;
    }
    machine.numa = vec![
        node(0, 64 * GI, &[], &[10, 20]),
        node(1, 256 * GI, &[], &[20, 10]),
    ];
    let (_dir, root) = tree(&FakeSysfs::new(machine.clone()));
    let cpulist = fs::read_to_string(root.join("devices/system/node/node1/cpulist"));
    assert_eq!(cpulist.unwrap().trim(), "");
    let got = discover(&root).unwrap();
    assert_eq!(got.numa, machine.numa);
    assert_eq!(got.num_numa_nodes(), 1);
}

/// Discovery of the dual-socket tree after `edit`; the error and its message.
fn error_after(edit: impl FnOnce(&Path)) -> (TopologyError, String) {
    let (_dir, root) = tree(&FakeSysfs::new(dual_socket_ht()));
    edit(&root);
    let err = discover(&root).unwrap_err();
    let text = err.to_string();
    (err, text)
}

#[test]
fn errors_name_the_file() {
    const DEL: Option<&str> = None;
    let d = "devices/system";
    // (file to rewrite or delete, new content or DEL, path the error names, what it says)
    let cases = [
        ("cpu/online", DEL, "cpu/online", "read"),
        ("cpu/online", Some("0-x"), "cpu/online", "not a cpu id"),
        ("cpu/online", Some(""), "cpu/online", "no online cpu"),
        (
            "cpu/cpu1/topology/physical_package_id",
            Some("abc"),
            "cpu1/topology/physical_package_id",
            "an unsigned integer",
        ),
        (
            "cpu/cpu3/topology/core_id",
            DEL,
            "cpu3/topology/core_id",
            "read",
        ),
        (
            "cpu/cpu2/topology/core_cpus_list",
            Some("2,"),
            "cpu2/topology/core_cpus_list",
            "empty element",
        ),
        ("node/node1/cpulist", DEL, "node1/cpulist", "read"),
        (
            "node/node0/meminfo",
            Some("Node 0 MemFree: 1 kB"),
            "node0/meminfo",
            "MemTotal",
        ),
        (
            "node/node0/meminfo",
            Some("Node 0 MemTotal: 12 MB"),
            "node0/meminfo",
            "MemTotal",
        ),
        (
            "node/node1/distance",
            Some("21 x"),
            "node1/distance",
            "distances",
        ),
        (
            "node/node0/hugepages/hugepages-2048kB/nr_hugepages",
            Some("many"),
            "hugepages-2048kB/nr_hugepages",
            "page count",
        ),
        (
            "node/node0/hugepages/hugepages-2MB/nr_hugepages",
            Some("1"),
            "hugepages-2MB",
            "hugepages-<size>kB",
        ),
        (
            "cpu/cpu0/cache/index3/level",
            Some("three"),
            "cpu0/cache/index3/level",
            "an unsigned integer",
        ),
        (
            "cpu/cpu0/cache/index3/shared_cpu_list",
            Some("0-"),
            "cpu0/cache/index3/shared_cpu_list",
            "not a cpu id",
        ),
    ];
    for (file, content, path, reason) in cases {
        let rel = format!("{d}/{file}");
        let (_, text) = error_after(|r| match content {
            Some(text) => write_file(r, &rel, text).unwrap(),
            None => remove(r, &rel).unwrap(),
        });
        assert!(text.contains(path), "{text:?} does not name {path}");
        assert!(text.contains(reason), "{text:?} does not say {reason}");
    }
}

#[test]
fn cpu_on_no_node_or_two_nodes_is_refused() {
    let (err, _) =
        error_after(|r| write_file(r, "devices/system/node/node1/cpulist", "4-7").unwrap());
    assert!(
        matches!(err, TopologyError::CpuWithoutNode { cpu: 12, .. }),
        "{err}"
    );
    let (err, _) =
        error_after(|r| write_file(r, "devices/system/node/node1/cpulist", "3-7,11-15").unwrap());
    assert!(
        matches!(
            err,
            TopologyError::CpuInTwoNodes {
                cpu: 3,
                first: 0,
                second: 1
            }
        ),
        "{err}"
    );
    let (err, _) =
        error_after(|r| write_file(r, "devices/system/node/node1/distance", "21 10 30").unwrap());
    assert!(
        matches!(
            err,
            TopologyError::DistanceCount {
                numa: 1,
                got: 3,
                want: 2
            }
        ),
        "{err}"
    );
}

#[test]
fn optional_files_may_be_missing() {
    let (_dir, root) = tree(&FakeSysfs::new(dual_socket_ht()));
    remove(&root, "devices/system/node/node0/meminfo").unwrap();
    remove(&root, "devices/system/node/node0/distance").unwrap();
    remove(&root, "devices/system/node/node1/distance").unwrap();
    remove(&root, "devices/system/cpu/cpu5/topology/die_id").unwrap();
    remove(&root, "devices/system/cpu/cpu0/cache/index3/id").unwrap();
    write_file(
        &root,
        "devices/system/cpu/cpu9/topology/physical_package_id",
        "-1",
    )
    .unwrap();
    let got = discover(&root).unwrap();
    assert_eq!(got.numa[0].memory, 0);
    assert!(got.numa.iter().all(|n| n.distances.is_empty()));
    assert_eq!(got.cpu(9).unwrap().socket, 0);
    assert_eq!(got.cpus.len(), 16);
}

#[test]
fn discovers_this_machine() {
    let root = Path::new("/sys");
    let Ok(online) = fs::read_to_string(root.join("devices/system/cpu/online")) else {
        eprintln!("no /sys/devices/system/cpu/online: not a Linux machine, skipped");
        return;
    };
    let online = CpuSet::parse(&online).unwrap();
    let t = discover(root).unwrap();
    assert_eq!(t.cpu_set(), online);
    let usable = std::thread::available_parallelism().unwrap().get();
    assert!(
        usable <= t.cpus.len(),
        "{usable} usable cpus > {} online",
        t.cpus.len()
    );
    assert!(!t.numa.is_empty());
    for cpu in &t.cpus {
        assert!(
            t.cpu(cpu.core).is_some_and(|c| c.core == cpu.core),
            "{cpu:?}"
        );
        assert!(cpu.core <= cpu.id, "core id is the lowest sibling: {cpu:?}");
    }
    eprintln!(
        "this machine: {} cpus, {} numa nodes",
        t.cpus.len(),
        t.numa.len()
    );
}

//! Placement decision time: `Node::admit` of one pod with pod-level resources (an exclusive app
//! container and a shared sidecar, topology manager pod scope), the query of every container's
//! placement, and the release (`Node::remove_pod`), on synthetic machines of 16 to 4096 CPUs that
//! already hold pods on about half of their CPUs. State is restored per iteration: the node is
//! cloned outside the timed section (`admit_query`, `remove`), or admission and release are timed
//! as a pair on one node (`cycle`). Run with `cargo bench --bench placement`; see
//! docs/PERFORMANCE.md. `cargo test --all-targets` runs it once on the smallest machine only.
//! Pure computation: no I/O besides criterion's own output.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use numa_shim::cpuset::CpuSet;
use numa_shim::placement::config::{
    CpuPolicy, MemoryPolicy, ReservedCpus, ReservedMemory, TopologyPolicy, TopologyScope,
};
use numa_shim::placement::node::Node;
use numa_shim::placement::test_pods::{self, GI};
use numa_shim::placement::{Config, ContainerRole, PodSpec};
use numa_shim::topology::SyntheticSpec;

/// CPUs of the pod-level request: 2 exclusive for the app, 1 left as the pod's shared pool.
const POD_CPUS: u64 = 3;

/// (sockets, NUMA nodes per socket, cores per NUMA node), 2 threads per core, 2 uncore caches per
/// NUMA node: 16, 256, 1024 and 4096 CPUs with 2, 4, 8 and 8 NUMA nodes, then 64 and 256 CPUs
/// with 8 NUMA nodes so that growth in CPUs can be told apart from growth in NUMA nodes.
const MACHINES: [(u32, u32, u32); 6] = [
    (2, 1, 4),
    (2, 2, 32),
    (2, 4, 64),
    (2, 4, 256),
    (2, 4, 4),
    (2, 4, 16),
];

/// A pod with `spec.resources` of 3 CPUs / 3Gi: a Guaranteed app container of 2 CPUs / 2Gi
/// (exclusive CPUs) and a sidecar without resources (runs on the pod's shared pool).
fn bench_pod(uid: &str) -> PodSpec {
    test_pods::pod(
        uid,
        vec![test_pods::bare("sidecar", ContainerRole::Sidecar)],
        vec![test_pods::gu("app", ContainerRole::App, 2000, 2 * GI)],
        Some((POD_CPUS * 1000, 3 * GI)),
    )
}

fn config(policy: TopologyPolicy, numa_nodes: u32) -> Config {
    Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(CpuSet::from_iter([0])),
        memory_policy: MemoryPolicy::Static,
        reserved_memory: (0..numa_nodes)
            .map(|n| ReservedMemory {
                numa_node: n,
                memory: GI,
                hugepages: BTreeMap::new(),
            })
            .collect(),
        topology_policy: policy,
        topology_scope: TopologyScope::Pod,
        ..Config::default()
    }
}

/// The machine with background pods on about half of its CPUs, and its label (`<cpus>cpu-<numa>numa`).
fn loaded_node(shape: (u32, u32, u32), policy: TopologyPolicy) -> (Node, String) {
    let (sockets, per_socket, cores) = shape;
    let spec = SyntheticSpec {
        memory_per_numa: 4096 * GI,
        ..SyntheticSpec::new(sockets, per_socket, cores, 2, 2)
    };
    let topology = spec.build().expect("synthetic machine");
    let cpus = topology.cpus.len();
    let mut node = Node::new(topology, config(policy, sockets * per_socket)).expect("node");
    let background = cpus / 2 / POD_CPUS as usize;
    for i in 0..background {
        node.admit(&bench_pod(&format!("background-{i}")))
            .expect("background pod admitted");
    }
    // The measured pod must fit and be placed as intended.
    let mut probe = node.clone();
    let placed = probe
        .admit(&bench_pod("measured"))
        .expect("measured pod admitted");
    let exclusive: Vec<bool> = placed.containers.iter().map(|c| c.exclusive).collect();
    assert_eq!(
        exclusive,
        vec![false, true],
        "sidecar shared, app exclusive"
    );
    (node, format!("{cpus}cpu-{}numa", sockets * per_socket))
}

/// Admission plus the per-container queries the relay makes at CreateContainer.
fn admit_and_query(node: &mut Node, p: &PodSpec) -> usize {
    let placed = node.admit(p).expect("admitted");
    let mut n = placed.containers.len();
    for c in p.init_containers.iter().chain(&p.containers) {
        n += usize::from(node.container(&p.uid, &c.name).is_some());
    }
    n
}

/// The machines to run: all of them under `cargo bench` (which passes `--bench`); only the
/// smallest under `cargo test --all-targets`, where criterion runs each benchmark once as a smoke
/// test and a debug build would take minutes to fill the large machines.
fn machines() -> &'static [(u32, u32, u32)] {
    if std::env::args().any(|a| a == "--bench") {
        &MACHINES
    } else {
        &MACHINES[..1]
    }
}

fn placement(c: &mut Criterion) {
    let measured = bench_pod("measured");
    for (label, policy) in [
        ("best-effort", TopologyPolicy::BestEffort),
        ("single-numa-node", TopologyPolicy::SingleNumaNode),
    ] {
        let mut group = c.benchmark_group(format!("placement/{label}"));
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for &shape in machines() {
            let (node, machine) = loaded_node(shape, policy);
            group.bench_with_input(
                BenchmarkId::new("admit_query", &machine),
                &node,
                |b, node| {
                    b.iter_batched(
                        || node.clone(),
                        |mut n| {
                            black_box(admit_and_query(&mut n, &measured));
                            n
                        },
                        BatchSize::LargeInput,
                    )
                },
            );
            let mut holding = node.clone();
            holding.admit(&measured).expect("admitted");
            group.bench_with_input(BenchmarkId::new("remove", &machine), &holding, |b, node| {
                b.iter_batched(
                    || node.clone(),
                    |mut n| {
                        n.remove_pod(&measured.uid);
                        n
                    },
                    BatchSize::LargeInput,
                )
            });
            let mut cycling = node.clone();
            group.bench_function(BenchmarkId::new("cycle", &machine), |b| {
                b.iter(|| {
                    black_box(admit_and_query(&mut cycling, &measured));
                    cycling.remove_pod(&measured.uid);
                })
            });
        }
        group.finish();
    }
}

/// Wide machines: 2 sockets, `n` NUMA nodes of `cores` cores × 2 threads (4 or 16 CPUs per
/// node), `max-allowable-numa-nodes` raised to `n`, every policy and scope, Static memory. The
/// machine holds 3-CPU pods on about half its CPUs; the measured pod asks for 9 CPUs (an 8-CPU
/// exclusive app and a shared sidecar), so it spans several nodes (single-numa-node refuses it:
/// that is a decision too). Each iteration is one decision: admit plus the container queries.
/// Besides criterion's estimates, the median and worst of 200 timed decisions per case are
/// printed as a table (docs/PERFORMANCE.md, "Wide machines").
const WIDE: [(u32, u32); 5] = [(8, 2), (16, 2), (32, 2), (64, 2), (16, 8)];

fn wide_pod(uid: &str) -> PodSpec {
    test_pods::pod(
        uid,
        vec![test_pods::bare("sidecar", ContainerRole::Sidecar)],
        vec![test_pods::gu("app", ContainerRole::App, 8000, 8 * GI)],
        Some((9000, 9 * GI)),
    )
}

fn wide_node(n: u32, cores: u32, policy: TopologyPolicy, scope: TopologyScope) -> Node {
    let spec = SyntheticSpec {
        memory_per_numa: 64 * GI,
        ..SyntheticSpec::new(2, n / 2, cores, 2, 1)
    };
    let topology = spec.build().expect("synthetic machine");
    let cpus = topology.cpus.len();
    let mut config = config(policy, n);
    config.topology_scope = scope;
    config.topology_options.max_allowable_numa_nodes = n;
    let mut node = Node::new(topology, config).expect("node");
    for i in 0..cpus / 2 / POD_CPUS as usize {
        // Background pods that do not fit are simply left out.
        let _ = node.admit(&bench_pod(&format!("background-{i}")));
    }
    node
}

fn decide(node: &mut Node, p: &PodSpec) -> usize {
    let mut n = usize::from(node.admit(p).is_ok());
    for c in p.init_containers.iter().chain(&p.containers) {
        n += usize::from(node.container(&p.uid, &c.name).is_some());
    }
    n
}

fn wide(c: &mut Criterion) {
    let full = std::env::args().any(|a| a == "--bench");
    let shapes: &[(u32, u32)] = if full { &WIDE } else { &WIDE[..1] };
    let measured = wide_pod("measured");
    let mut table = Vec::new();
    for (label, policy) in [
        ("best-effort", TopologyPolicy::BestEffort),
        ("restricted", TopologyPolicy::Restricted),
        ("single-numa-node", TopologyPolicy::SingleNumaNode),
    ] {
        for (scope_label, scope) in [
            ("pod", TopologyScope::Pod),
            ("container", TopologyScope::Container),
        ] {
            let mut group = c.benchmark_group(format!("wide/{label}/{scope_label}"));
            group
                .sample_size(10)
                .warm_up_time(Duration::from_millis(100))
                .measurement_time(Duration::from_millis(400));
            for &(n, cores) in shapes {
                let node = wide_node(n, cores, policy, scope);
                let machine = format!("{n}numa-{}cpu", n * cores * 2);
                group.bench_with_input(BenchmarkId::new("decide", &machine), &node, |b, node| {
                    b.iter_batched(
                        || node.clone(),
                        |mut n| {
                            black_box(decide(&mut n, &measured));
                            n
                        },
                        BatchSize::LargeInput,
                    )
                });
                let mut times: Vec<Duration> = (0..if full { 200 } else { 2 })
                    .map(|_| {
                        let mut n = node.clone();
                        let t = std::time::Instant::now();
                        black_box(decide(&mut n, &measured));
                        t.elapsed()
                    })
                    .collect();
                times.sort_unstable();
                table.push(format!(
                    "| {machine} | {label} | {scope_label} | {:.3} | {:.3} |",
                    times[times.len() / 2].as_secs_f64() * 1e3,
                    times[times.len() - 1].as_secs_f64() * 1e3
                ));
            }
            group.finish();
        }
    }
    eprintln!("| machine | policy | scope | median ms | worst ms |\n|---|---|---|---|---|");
    for row in table {
        eprintln!("{row}");
    }
}

criterion_group!(benches, placement, wide);
criterion_main!(benches);

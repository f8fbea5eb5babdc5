//! PodResources `List` with 1,000 pods / 5,000 containers tracked: the time the registry lock is
//! held (a full snapshot capture, and the capture of one changed pod that a rebuild does), the
//! in-process answer (capture + build), and the full call over a unix socket, with the registry
//! unchanged and with one pod changed before each call. After criterion, prints p50/p99/max of each over many calls (criterion
//! reports means and confidence intervals, not tail percentiles).

use numa_shim::testing::podresources::registry as support;

use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use numa_shim::lifecycle::Registry;
use numa_shim::placement::config::TopologyScope;
use numa_shim::podresources::{list_response, PodResourcesService, RegistrySource, Snapshot};
use numa_shim::proto::podresources::v1 as pr;
use support::*;

const PODS: usize = 1000;
const CONTAINERS_PER_POD: usize = 5;
/// Pods with a pod-level bubble (2 CPUs: one exclusive container, four on the pod pool).
const PLRM_PODS: usize = 150;

/// 4 NUMA nodes × 128 CPUs; 150 PLRM pods and 850 burstable pods, 5 containers each.
fn loaded_registry() -> Registry {
    let mut r = registry_on(4, 128, TopologyScope::Pod);
    for i in 0..PODS {
        let uid = format!("pod-{i:04}");
        let spec = if i < PLRM_PODS {
            let mut containers = vec![app("excl", guaranteed(1000, GI / 2))];
            containers.extend(
                (1..CONTAINERS_PER_POD).map(|k| app(&format!("pool-{k}"), Default::default())),
            );
            pod_of(&uid, Some(guaranteed(2000, GI)), containers)
        } else {
            let containers = (0..CONTAINERS_PER_POD)
                .map(|k| app(&format!("c-{k}"), burstable(100)))
                .collect();
            pod_of(&uid, None, containers)
        };
        assert!(run(&mut r, spec), "pod {uid} refused");
    }
    assert_eq!(r.pods().len(), PODS);
    assert_eq!(r.containers().len(), PODS * CONTAINERS_PER_POD);
    r
}

/// One pod changes, as when the pool updater records a cpuset it pushed: the registry epoch
/// moves and that pod's revision with it. Cycles through the pods.
fn change_one_pod(placer: &numa_shim::lifecycle::Placer, turn: &mut usize) {
    let mut guard = placer.registry();
    let registry: &mut Registry = &mut guard;
    let (id, cpus) = registry
        .containers()
        .iter()
        .nth(*turn % (PODS * CONTAINERS_PER_POD))
        .map(|(id, c)| (id.clone(), c.cpus.clone()))
        .unwrap();
    registry.mark_applied(&id, &cpus);
    *turn += 1;
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{name}: n={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        at(0.50),
        at(0.99),
        samples[samples.len() - 1]
    );
}

fn bench(c: &mut Criterion) {
    let state = tempfile::tempdir().unwrap();
    let shared = placer(loaded_registry(), state.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let served = rt.block_on(Served::start(dir.path(), shared.clone(), options()));
    let mut client = served.client();
    let list = rt
        .block_on(client.list(pr::ListPodResourcesRequest {}))
        .unwrap()
        .into_inner();
    assert_eq!(list.pod_resources.len(), PODS);
    let bytes = prost::Message::encoded_len(&list);
    println!(
        "List answer: {PODS} pods, {} containers, {bytes} bytes",
        PODS * CONTAINERS_PER_POD
    );

    let mut group = c.benchmark_group("podresources_list_1000_pods");
    group.bench_function("snapshot_capture_under_lock", |b| {
        b.iter(|| shared.with_registry(Snapshot::capture))
    });
    group.bench_function("capture_and_build", |b| {
        b.iter(|| list_response(&shared.with_registry(Snapshot::capture)))
    });
    let service = PodResourcesService::new(shared.clone(), &options());
    group.bench_function("list_published_in_process", |b| {
        b.iter(|| rt.block_on(service.list_pods()))
    });
    group.bench_function("list_over_unix_socket", |b| {
        b.iter(|| {
            rt.block_on(client.list(pr::ListPodResourcesRequest {}))
                .unwrap()
        })
    });
    // Every call after a change: one pod changes before each List.
    let mut turn = 0;
    group.bench_function("list_over_unix_socket_after_a_change", |b| {
        b.iter(|| {
            change_one_pod(&shared, &mut turn);
            rt.block_on(client.list(pr::ListPodResourcesRequest {}))
                .unwrap()
        })
    });
    group.finish();
    // Not PodResources: what the pool gauges cost at this size. The lifecycle hook publishes
    // them after every admission and release: counted under the registry lock, then published.
    // For comparison, the same gauges from the full placement view (how they were computed
    // before).
    let metrics = numa_shim::telemetry::Metrics::new();
    c.bench_function("pool_gauges_1000_pods/count_and_publish", |b| {
        b.iter(|| {
            let pools = shared.with_registry(numa_shim::lifecycle::gauges::pool_counts);
            numa_shim::lifecycle::gauges::publish_pool_counts(&pools, &metrics);
        })
    });
    c.bench_function("pool_gauges_1000_pods/view_and_publish", |b| {
        b.iter(|| {
            let view = shared.with_registry(numa_shim::inspect::PlacementView::from_registry);
            let pools = numa_shim::inspect::view_pool_counts(&view);
            numa_shim::lifecycle::gauges::publish_pool_counts(&pools, &metrics);
        })
    });

    let mut lock = Vec::new();
    let mut lock_changed = Vec::new();
    let mut build = Vec::new();
    let mut call = Vec::new();
    let mut changed = Vec::new();
    for _ in 0..1000 {
        let revisions: std::collections::HashMap<String, u64> = shared.with_registry(|r| {
            r.pods()
                .keys()
                .map(|uid| (uid.clone(), r.revision(uid)))
                .collect()
        });
        change_one_pod(&shared, &mut turn);
        let known = |uid: &str, rev: u64| revisions.get(uid) == Some(&rev);
        let t = Instant::now();
        std::hint::black_box(shared.with_registry(|r| Snapshot::capture_changed(r, &known)));
        lock_changed.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(shared.with_registry(Snapshot::capture));
        lock.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(list_response(&shared.with_registry(Snapshot::capture)));
        build.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(
            rt.block_on(client.list(pr::ListPodResourcesRequest {}))
                .unwrap(),
        );
        call.push(t.elapsed());
        change_one_pod(&shared, &mut turn);
        let t = Instant::now();
        std::hint::black_box(
            rt.block_on(client.list(pr::ListPodResourcesRequest {}))
                .unwrap(),
        );
        changed.push(t.elapsed());
    }
    percentiles("lock held (full capture)", lock);
    percentiles("lock held (capture after one pod changed)", lock_changed);
    percentiles("capture + build", build);
    percentiles("List over unix socket, registry unchanged", call);
    percentiles(
        "List over unix socket, registry changed before each call",
        changed,
    );
    rt.block_on(served.stop());
}

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}

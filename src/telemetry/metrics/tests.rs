use super::*;
use crate::telemetry::scrape::Exposition;

fn scrape(metrics: &Metrics) -> Exposition {
    Exposition::parse(&metrics.render())
}

#[test]
fn kubelet_families_have_kubelet_names_types_and_labels() {
    let exposition = scrape(&Metrics::new());
    for (name, kind, labels) in [
        (
            "resource_manager_allocations_total",
            "counter",
            ["resource_name", "source"],
        ),
        (
            "resource_manager_allocation_errors_total",
            "counter",
            ["resource_name", "source"],
        ),
        (
            "resource_manager_container_assignments",
            "counter",
            ["assignment_type", "resource_name"],
        ),
    ] {
        assert_eq!(exposition.types.get(name).map(String::as_str), Some(kind));
        assert_eq!(
            exposition.label_names(name),
            vec![labels.map(String::from).to_vec()]
        );
    }
}

#[test]
fn kubelet_help_texts_match_the_kubelet() {
    let text = Metrics::new().render();
    for line in [
        "# HELP resource_manager_allocations_total [ALPHA] Number of exclusive resource allocations performed by a resource manager.",
        "# HELP resource_manager_allocation_errors_total [ALPHA] Number of errors encountered during exclusive resource allocation.",
        "# HELP resource_manager_container_assignments [ALPHA] Number of containers with a specific type of resource assignment.",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?}");
    }
}

#[test]
fn kubelet_counters_start_at_zero_for_every_label_value() {
    let exposition = scrape(&Metrics::new());
    for resource in ["cpu", "memory"] {
        for source in ["pod", "node"] {
            let labels = [("resource_name", resource), ("source", source)];
            for name in [
                "resource_manager_allocations_total",
                "resource_manager_allocation_errors_total",
            ] {
                assert_eq!(
                    exposition.value(name, &labels),
                    Some(0.0),
                    "{name} {labels:?}"
                );
            }
        }
        for kind in ["node_exclusive", "pod_exclusive", "pod_shared"] {
            let labels = [("resource_name", resource), ("assignment_type", kind)];
            let value = exposition.value("resource_manager_container_assignments", &labels);
            assert_eq!(value, Some(0.0), "{labels:?}");
        }
    }
}

#[test]
fn allocations_and_errors_count_separately() {
    let metrics = Metrics::new();
    metrics.allocation(ResourceName::Cpu, Source::Pod, true);
    metrics.allocation(ResourceName::Cpu, Source::Pod, true);
    metrics.allocation(ResourceName::Memory, Source::Node, false);
    metrics.container_assignment(ResourceName::Cpu, AssignmentType::PodShared);
    let exposition = scrape(&metrics);
    let cpu_pod = [("resource_name", "cpu"), ("source", "pod")];
    let mem_node = [("resource_name", "memory"), ("source", "node")];
    assert_eq!(
        exposition.value("resource_manager_allocations_total", &cpu_pod),
        Some(2.0)
    );
    assert_eq!(
        exposition.value("resource_manager_allocations_total", &mem_node),
        Some(0.0)
    );
    let errors = "resource_manager_allocation_errors_total";
    assert_eq!(exposition.value(errors, &mem_node), Some(1.0));
    assert_eq!(exposition.value(errors, &cpu_pod), Some(0.0));
    let shared = [("resource_name", "cpu"), ("assignment_type", "pod_shared")];
    let assignments = "resource_manager_container_assignments";
    assert_eq!(exposition.value(assignments, &shared), Some(1.0));
    assert_eq!(metrics.allocations(ResourceName::Cpu, Source::Pod), 2);
}

#[test]
fn relay_latency_splits_shim_and_runtime_time() {
    let metrics = Metrics::new();
    metrics.record_relay("CreateContainer", 0.0002, 0.3);
    metrics.record_relay("CreateContainer", 0.0004, 0.7);
    metrics.record_relay("Version", 0.00005, 0.001);
    let exposition = scrape(&metrics);
    let shim = "numa_shim_relay_shim_duration_seconds";
    let runtime = "numa_shim_relay_runtime_duration_seconds";
    assert_eq!(exposition.types[shim], "histogram");
    let create = [("method", "CreateContainer")];
    assert_eq!(
        exposition.value(&format!("{shim}_count"), &create),
        Some(2.0)
    );
    let shim_sum = exposition
        .value(&format!("{shim}_sum"), &create)
        .unwrap_or(-1.0);
    assert!((shim_sum - 0.0006).abs() < 1e-12, "{shim_sum}");
    let runtime_sum = exposition
        .value(&format!("{runtime}_sum"), &create)
        .unwrap_or(-1.0);
    assert!((runtime_sum - 1.0).abs() < 1e-12, "{runtime_sum}");
    let le = |bound| [("method", "CreateContainer"), ("le", bound)];
    let bucket = format!("{runtime}_bucket");
    assert_eq!(exposition.value(&bucket, &le("0.25")), Some(0.0));
    assert_eq!(exposition.value(&bucket, &le("0.5")), Some(1.0));
    assert_eq!(exposition.value(&bucket, &le("1")), Some(2.0));
    assert_eq!(exposition.value(&bucket, &le("+Inf")), Some(2.0));
    assert_eq!(metrics.relay_count("Version"), 1);
    assert_eq!(metrics.relay_count("RunPodSandbox"), 0);
}

#[test]
fn pools_drift_checkpoints_and_runtime_state() {
    let metrics = Metrics::new();
    metrics.set_pool_cpus(0, Pool::Shared, 30);
    metrics.set_pool_cpus(1, Pool::Pod, 8);
    metrics.set_pool_cpus(0, Pool::Shared, 26);
    metrics.set_pool_memory_bytes(1, Pool::Reserved, 1 << 30);
    metrics.drift_correction(ResourceName::Cpu);
    metrics.checkpoint_write(true);
    metrics.checkpoint_write(false);
    metrics.set_runtime_connected(true);
    let exposition = scrape(&metrics);
    let cpus = "numa_shim_pool_cpus";
    assert_eq!(exposition.types[cpus], "gauge");
    assert_eq!(
        exposition.value(cpus, &[("numa_node", "0"), ("pool", "shared")]),
        Some(26.0)
    );
    assert_eq!(
        exposition.value(cpus, &[("numa_node", "1"), ("pool", "pod")]),
        Some(8.0)
    );
    let memory = [("numa_node", "1"), ("pool", "reserved")];
    let bytes = exposition.value("numa_shim_pool_memory_bytes", &memory);
    assert_eq!(bytes, Some(1_073_741_824.0));
    let drift = "numa_shim_drift_corrections_total";
    assert_eq!(
        exposition.value(drift, &[("resource_name", "cpu")]),
        Some(1.0)
    );
    assert_eq!(
        exposition.value(drift, &[("resource_name", "memory")]),
        Some(0.0)
    );
    assert_eq!(
        exposition.value("numa_shim_checkpoint_writes_total", &[]),
        Some(2.0)
    );
    let failures = "numa_shim_checkpoint_write_failures_total";
    assert_eq!(exposition.value(failures, &[]), Some(1.0));
    assert_eq!(
        exposition.value("numa_shim_runtime_connected", &[]),
        Some(1.0)
    );
    metrics.set_runtime_connected(false);
    metrics.clear_pools();
    let exposition = scrape(&metrics);
    assert_eq!(
        exposition.value("numa_shim_runtime_connected", &[]),
        Some(0.0)
    );
    assert_eq!(exposition.value(cpus, &[("pool", "shared")]), None);
}

/// Replacing the pools leaves exactly the new series: old NUMA nodes and pools go.
#[test]
fn replace_pools_swaps_the_whole_set() {
    let metrics = Metrics::new();
    metrics.set_pool_cpus(0, Pool::Shared, 30);
    metrics.set_pool_memory_bytes(0, Pool::Shared, 7);
    metrics.replace_pools(&[(1, Pool::Pod, 4)], &[]);
    let exposition = scrape(&metrics);
    let cpus = "numa_shim_pool_cpus";
    assert_eq!(
        exposition.value(cpus, &[("numa_node", "1"), ("pool", "pod")]),
        Some(4.0)
    );
    assert_eq!(
        exposition.value(cpus, &[("numa_node", "0"), ("pool", "shared")]),
        None
    );
    assert_eq!(
        exposition.value(
            "numa_shim_pool_memory_bytes",
            &[("numa_node", "0"), ("pool", "shared")]
        ),
        None
    );
}

#[test]
fn every_family_is_typed_and_every_sample_belongs_to_one() {
    let metrics = Metrics::new();
    metrics.record_relay("Version", 0.001, 0.002);
    metrics.set_pool_cpus(0, Pool::Exclusive, 2);
    let exposition = scrape(&metrics);
    for sample in &exposition.samples {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| sample.name.strip_suffix(suffix))
            .filter(|base| exposition.types.get(*base).map(String::as_str) == Some("histogram"))
            .unwrap_or(&sample.name);
        assert!(
            exposition.types.contains_key(family),
            "{} has no # TYPE",
            sample.name
        );
    }
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    assert_eq!(
        exposition.value("numa_shim_build_info", &version),
        Some(1.0)
    );
}

#[test]
fn counters_kept_elsewhere_are_read_at_each_render() {
    let m = Metrics::new();
    assert!(!m.render().contains("numa_shim_apiserver_watch_total{"));
    let lists = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    let seen = lists.clone();
    m.on_render(move |m| {
        let n = seen.load(std::sync::atomic::Ordering::Relaxed);
        m.set_apiserver_watch(&[("list", n), ("expired", 0)]);
        m.set_refusal_reports(&[("status", n * 2)]);
    });
    let text = m.render();
    assert!(
        text.contains("# TYPE numa_shim_apiserver_watch_total counter"),
        "{text}"
    );
    assert!(
        text.contains("numa_shim_apiserver_watch_total{what=\"list\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("numa_shim_apiserver_watch_total{what=\"expired\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("numa_shim_refusal_reports_total{outcome=\"status\"} 2\n"),
        "{text}"
    );
    lists.store(3, std::sync::atomic::Ordering::Relaxed);
    let text = m.render();
    assert!(
        text.contains("numa_shim_apiserver_watch_total{what=\"list\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("numa_shim_refusal_reports_total{outcome=\"status\"} 6\n"),
        "{text}"
    );
}

//! numa-shim's Prometheus metrics behind a typed API, so callers never spell a metric name or a
//! label value.
//!
//! The three `resource_manager_*` families carry the kubelet's names, types, help texts (with the
//! `[ALPHA] ` stability prefix Kubernetes' metrics library adds) and label names (kubelet 1.37 `pkg/kubelet/metrics/metrics.go`, listed in the Kubernetes metrics
//! reference): dashboards built for a kubelet with PodLevelResourceManagers work unchanged against
//! numa-shim. Everything numa-shim adds is prefixed `numa_shim_`.
//!
//! Owns counting and rendering only. Must never do I/O, block on anything but a short mutex, or
//! decide anything: callers report what happened.

use super::family::{HistogramFamily, ScalarFamily};

/// `resource_name` label of the kubelet's resource-manager metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceName {
    Cpu,
    Memory,
}

/// `source` label: whether an exclusive allocation came from the node pool or a pod's bubble.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Pod,
    Node,
}

/// `assignment_type` label of `resource_manager_container_assignments`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignmentType {
    /// Exclusive resources taken from the node pool (container scope).
    NodeExclusive,
    /// An exclusive slice of the pod's bubble (pod scope).
    PodExclusive,
    /// The pod shared pool (pod scope).
    PodShared,
}

/// `pool` label of the per-NUMA-node pool gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Reserved for the system (`reservedSystemCPUs`, `reservedMemory`).
    Reserved,
    /// The node shared pool (the CPU manager's default set).
    Shared,
    /// Held exclusively by containers placed from the node pool.
    Exclusive,
    /// Held by pod bubbles (pod scope), exclusive slices and pod shared pools together.
    Pod,
}

/// Every metric numa-shim exports. Cheap to share behind an `Arc`; all methods take `&self`.
#[derive(Debug)]
pub struct Metrics {
    allocations: ScalarFamily,
    allocation_errors: ScalarFamily,
    container_assignments: ScalarFamily,
    relay_shim: HistogramFamily,
    relay_runtime: HistogramFamily,
    relay_cut_off: ScalarFamily,
    settled: ScalarFamily,
    decisions_abandoned: ScalarFamily,
    pool_cpus: ScalarFamily,
    pool_memory: ScalarFamily,
    drift_corrections: ScalarFamily,
    checkpoint_writes: ScalarFamily,
    checkpoint_failures: ScalarFamily,
    runtime_connected: ScalarFamily,
    pods: ScalarFamily,
    pod_refusals: ScalarFamily,
    apiserver_watch: ScalarFamily,
    refusal_reports: ScalarFamily,
    resizes: ScalarFamily,
    build_info: ScalarFamily,
    collectors: Collectors,
}

/// Reads counters another task keeps (as atomics) into their families; run at each render.
type Collector = Box<dyn Fn(&Metrics) + Send + Sync>;

/// The collectors [`Metrics::on_render`] added.
#[derive(Default)]
struct Collectors(std::sync::Mutex<Vec<Collector>>);

impl std::fmt::Debug for Collectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |c| c.len());
        write!(f, "Collectors({n})")
    }
}

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Latency bounds in seconds: from 100 µs (numa-shim's own work) to 30 s (a slow image pull in
/// the runtime).
static LATENCY_BOUNDS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

// Label names sorted as the Prometheus Go client prints them.
const RESOURCE_SOURCE: &[&str] = &["resource_name", "source"];
const ASSIGNMENT_RESOURCE: &[&str] = &["assignment_type", "resource_name"];
const METHOD: &[&str] = &["method"];
const NUMA_POOL: &[&str] = &["numa_node", "pool"];
const RESOURCE: &[&str] = &["resource_name"];
const VERSION: &[&str] = &["version"];
const SOURCE: &[&str] = &["source"];
const REFUSAL: &[&str] = &["message", "namespace", "pod", "reason"];
const WHAT: &[&str] = &["what"];
const OUTCOME: &[&str] = &["outcome"];
const METHOD_REASON: &[&str] = &["method", "reason"];
const METHOD_RESULT: &[&str] = &["method", "result"];

impl ResourceName {
    /// All values, for pre-creating series.
    pub const ALL: [Self; 2] = [Self::Cpu, Self::Memory];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
        }
    }
}

impl Source {
    /// All values, for pre-creating series.
    pub const ALL: [Self; 2] = [Self::Pod, Self::Node];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "pod",
            Self::Node => "node",
        }
    }
}

impl AssignmentType {
    /// All values, for pre-creating series.
    pub const ALL: [Self; 3] = [Self::NodeExclusive, Self::PodExclusive, Self::PodShared];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeExclusive => "node_exclusive",
            Self::PodExclusive => "pod_exclusive",
            Self::PodShared => "pod_shared",
        }
    }
}

impl Pool {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
            Self::Pod => "pod",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry. The kubelet's counters start at zero for every label combination so that
    /// `rate()` and absence alerts work from the first scrape; the runtime starts disconnected.
    pub fn new() -> Self {
        let metrics = Self {
            allocations: ScalarFamily::counter(
                "resource_manager_allocations_total",
                "[ALPHA] Number of exclusive resource allocations performed by a resource manager.",
                RESOURCE_SOURCE,
            ),
            allocation_errors: ScalarFamily::counter(
                "resource_manager_allocation_errors_total",
                "[ALPHA] Number of errors encountered during exclusive resource allocation.",
                RESOURCE_SOURCE,
            ),
            container_assignments: ScalarFamily::counter(
                "resource_manager_container_assignments",
                "[ALPHA] Number of containers with a specific type of resource assignment.",
                ASSIGNMENT_RESOURCE,
            ),
            relay_shim: HistogramFamily::new(
                "numa_shim_relay_shim_duration_seconds",
                "Time a CRI call spent inside numa-shim (decoding, placement, patching), by method.",
                METHOD,
                &LATENCY_BOUNDS,
            ),
            relay_runtime: HistogramFamily::new(
                "numa_shim_relay_runtime_duration_seconds",
                "Time a CRI call spent waiting for the container runtime, by method.",
                METHOD,
                &LATENCY_BOUNDS,
            ),
            relay_cut_off: ScalarFamily::counter(
                "numa_shim_relay_cancelled_total",
                "CRI calls whose runtime call numa-shim cancelled (its stream reset) before the \
                 runtime answered, by method and reason: deadline (the caller's grpc-timeout \
                 passed) or hangup (the caller reset its stream or went away).",
                METHOD_REASON,
            ),
            settled: ScalarFamily::counter(
                "numa_shim_relay_settled_total",
                "Cancelled RunPodSandbox and CreateContainer calls, by what numa-shim did with \
                 their reservation: kept (the runtime listed the object), released (it listed \
                 nothing, twice), released_unconfirmed (it did not say within the settle limit).",
                METHOD_RESULT,
            ),
            decisions_abandoned: ScalarFamily::counter(
                "numa_shim_placement_decisions_failed_total",
                "Placement decisions that did not finish, by method and reason: deadline (the \
                 caller's deadline passed first; nothing was held), panicked (refused with \
                 INTERNAL).",
                METHOD_REASON,
            ),
            pool_cpus: ScalarFamily::gauge(
                "numa_shim_pool_cpus",
                "CPUs in each pool on each NUMA node.",
                NUMA_POOL,
            ),
            pool_memory: ScalarFamily::gauge(
                "numa_shim_pool_memory_bytes",
                "Memory bytes in each pool on each NUMA node.",
                NUMA_POOL,
            ),
            drift_corrections: ScalarFamily::counter(
                "numa_shim_drift_corrections_total",
                "Containers whose cpuset was found changed by someone else and was put back.",
                RESOURCE,
            ),
            checkpoint_writes: ScalarFamily::counter(
                "numa_shim_checkpoint_writes_total",
                "State checkpoint writes attempted.",
                &[],
            ),
            checkpoint_failures: ScalarFamily::counter(
                "numa_shim_checkpoint_write_failures_total",
                "State checkpoint writes that failed.",
                &[],
            ),
            runtime_connected: ScalarFamily::gauge(
                "numa_shim_runtime_connected",
                "1 while the container runtime answers, 0 otherwise.",
                &[],
            ),
            pods: ScalarFamily::gauge(
                "numa_shim_pods",
                "Pods numa-shim holds, by where their spec came from: pods-api, apiserver, \
                 inferred (from CRI alone) or adopted (found running at start-up).",
                SOURCE,
            ),
            pod_refusals: ScalarFamily::counter(
                "numa_shim_pod_refusals_total",
                "RunPodSandbox calls refused for each pod refused now, with the kubelet's reason \
                 and message; the kubelet retries a refused pod every 10-15 s.",
                REFUSAL,
            ),
            apiserver_watch: ScalarFamily::counter(
                "numa_shim_apiserver_watch_total",
                "The API server pod watcher (podKnowledge: apiserver): lists completed, watches \
                 accepted, events and bookmarks received, resourceVersions expired (410 Gone, each \
                 followed by a re-list), failed requests.",
                WHAT,
            ),
            refusal_reports: ScalarFamily::counter(
                "numa_shim_refusal_reports_total",
                "Refusal reports written to the API server (refusalReports), by outcome: event \
                 (created), repeat (its count bumped), status (pod ended Failed), skipped (pod gone \
                 or replaced), failure (a write failed for good), dropped (queue full).",
                OUTCOME,
            ),
            resizes: ScalarFamily::counter(
                "numa_shim_resizes_total",
                "In-place resizes (UpdateContainerResources / UpdatePodSandboxResources that change \
                 a container's or a pod budget's resources), by outcome: applied, refused (numa-shim \
                 answered with the reason), rolled_back (the runtime refused the call: undone), \
                 rollback_kept (undoing was refused; the resized state stays), unanswered_kept (a \
                 grow whose runtime call was cut off by the caller's deadline: kept).",
                OUTCOME,
            ),
            build_info: ScalarFamily::gauge(
                "numa_shim_build_info",
                "Always 1, labelled with the numa-shim version.",
                VERSION,
            ),
            collectors: Collectors::default(),
        };
        metrics.initialise();
        metrics
    }

    fn initialise(&self) {
        for resource in ResourceName::ALL {
            for source in Source::ALL {
                let labels = [resource.as_str(), source.as_str()];
                self.allocations.add(&labels, 0.0);
                self.allocation_errors.add(&labels, 0.0);
            }
            for assignment in AssignmentType::ALL {
                let labels = [assignment.as_str(), resource.as_str()];
                self.container_assignments.add(&labels, 0.0);
            }
            self.drift_corrections.add(&[resource.as_str()], 0.0);
        }
        self.checkpoint_writes.add(&[], 0.0);
        self.checkpoint_failures.add(&[], 0.0);
        self.runtime_connected.set(&[], 0.0);
        for outcome in Self::RESIZE_OUTCOMES {
            self.resizes.add(&[outcome], 0.0);
        }
        self.build_info.set(&[env!("CARGO_PKG_VERSION")], 1.0);
    }

    /// One exclusive allocation attempt of `resource` from `source`: counts
    /// `resource_manager_allocations_total` when `ok`, else `..._allocation_errors_total`.
    pub fn allocation(&self, resource: ResourceName, source: Source, ok: bool) {
        let labels = [resource.as_str(), source.as_str()];
        let family = if ok {
            &self.allocations
        } else {
            &self.allocation_errors
        };
        family.add(&labels, 1.0);
    }

    /// One container given an assignment of `kind` for `resource`
    /// (`resource_manager_container_assignments`).
    pub fn container_assignment(&self, resource: ResourceName, kind: AssignmentType) {
        self.container_assignments
            .add(&[kind.as_str(), resource.as_str()], 1.0);
    }

    /// One relayed CRI call: `shim_secs` spent in numa-shim, `runtime_secs` waiting for the
    /// runtime. `method` is the CRI method's short name (`RunPodSandbox`), not the full path.
    pub fn record_relay(&self, method: &str, shim_secs: f64, runtime_secs: f64) {
        self.relay_shim.observe(&[method], shim_secs.max(0.0));
        self.relay_runtime.observe(&[method], runtime_secs.max(0.0));
    }

    /// How many CPUs `pool` holds on `numa_node` now.
    pub fn set_pool_cpus(&self, numa_node: u32, pool: Pool, cpus: u64) {
        let node = numa_node.to_string();
        self.pool_cpus.set(&[&node, pool.as_str()], cpus as f64);
    }

    /// How many bytes of memory `pool` holds on `numa_node` now.
    pub fn set_pool_memory_bytes(&self, numa_node: u32, pool: Pool, bytes: u64) {
        let node = numa_node.to_string();
        self.pool_memory.set(&[&node, pool.as_str()], bytes as f64);
    }

    /// Replaces every pool gauge with `cpus` and `memory` (NUMA node, pool, amount), each
    /// family in one step.
    pub fn replace_pools(&self, cpus: &[(u32, Pool, u64)], memory: &[(u32, Pool, u64)]) {
        let series = |rows: &[(u32, Pool, u64)]| {
            rows.iter()
                .map(|(node, pool, v)| {
                    (vec![node.to_string(), pool.as_str().to_string()], *v as f64)
                })
                .collect::<Vec<_>>()
        };
        self.pool_cpus.replace(series(cpus));
        self.pool_memory.replace(series(memory));
    }

    /// Forgets every pool gauge (before publishing a new snapshot of a changed topology).
    pub fn clear_pools(&self) {
        self.pool_cpus.clear();
        self.pool_memory.clear();
    }

    /// One container whose `resource` placement drifted and was put back: `cpu` for its
    /// `cpuset.cpus` or its lifted CFS quota, `memory` for its `cpuset.mems`.
    pub fn drift_correction(&self, resource: ResourceName) {
        self.drift_corrections.add(&[resource.as_str()], 1.0);
    }

    /// Current value of `numa_shim_drift_corrections_total{resource_name}`.
    pub fn drift_corrections(&self, resource: ResourceName) -> u64 {
        let value = self.drift_corrections.get(&[resource.as_str()]);
        value.unwrap_or(0.0) as u64
    }

    /// One state checkpoint write; `ok == false` also counts a failure.
    pub fn checkpoint_write(&self, ok: bool) {
        self.checkpoint_writes.add(&[], 1.0);
        if !ok {
            self.checkpoint_failures.add(&[], 1.0);
        }
    }

    /// Number of state checkpoint writes attempted so far (for tests and status output).
    pub fn checkpoint_writes(&self) -> u64 {
        self.checkpoint_writes.get(&[]).unwrap_or(0.0) as u64
    }

    /// Whether the container runtime currently answers.
    pub fn set_runtime_connected(&self, connected: bool) {
        self.runtime_connected
            .set(&[], if connected { 1.0 } else { 0.0 });
    }

    /// Replaces the pods-by-source gauge: (source, pods).
    pub fn set_pods_by_source(&self, rows: &[(&str, u64)]) {
        self.pods.replace(
            rows.iter()
                .map(|(source, n)| (vec![source.to_string()], *n as f64)),
        );
    }

    /// Replaces the refusal counters with the pods refused now: (namespace, pod, reason,
    /// message, refusals).
    pub fn replace_refusals(&self, rows: &[(&str, &str, &str, &str, u64)]) {
        self.pod_refusals
            .replace(rows.iter().map(|(namespace, pod, reason, message, n)| {
                let key = [message, namespace, pod, reason].map(|v| v.to_string());
                (key.to_vec(), *n as f64)
            }));
    }

    /// A runtime call cancelled before it answered: `reason` is `deadline` or `hangup`.
    pub fn relay_cancelled(&self, method: &str, reason: &str) {
        self.relay_cut_off.add(&[method, reason], 1.0);
    }

    /// Number of runtime calls of `method` cancelled for `reason` (for tests).
    pub fn relay_cancelled_count(&self, method: &str, reason: &str) -> u64 {
        self.relay_cut_off.get(&[method, reason]).unwrap_or(0.0) as u64
    }

    /// A cancelled intercepted call settled: `result` is `kept`, `released` or
    /// `released_unconfirmed`.
    pub fn relay_settled(&self, method: &str, result: &str) {
        self.settled.add(&[method, result], 1.0);
    }

    /// Number of cancelled calls of `method` settled with `result` (for tests).
    pub fn relay_settled_count(&self, method: &str, result: &str) -> u64 {
        self.settled.get(&[method, result]).unwrap_or(0.0) as u64
    }

    /// A placement decision that did not finish: `reason` is `deadline` or `panicked`.
    pub fn decision_failed(&self, method: &str, reason: &str) {
        self.decisions_abandoned.add(&[method, reason], 1.0);
    }

    /// Number of placement decisions of `method` that did not finish for `reason` (for tests).
    pub fn decision_failed_count(&self, method: &str, reason: &str) -> u64 {
        self.decisions_abandoned
            .get(&[method, reason])
            .unwrap_or(0.0) as u64
    }

    /// Resize outcomes, to pre-create their series.
    pub const RESIZE_OUTCOMES: [&'static str; 5] = [
        "applied",
        "refused",
        "rolled_back",
        "rollback_kept",
        "unanswered_kept",
    ];

    /// One in-place resize ended with `outcome` (one of [`Self::RESIZE_OUTCOMES`]).
    pub fn resize(&self, outcome: &str) {
        self.resizes.add(&[outcome], 1.0);
    }

    /// Resizes that ended with `outcome` (for tests and status output).
    pub fn resizes(&self, outcome: &str) -> u64 {
        self.resizes.get(&[outcome]).unwrap_or(0.0) as u64
    }

    /// Number of relayed calls recorded for `method` (for tests and status output).
    pub fn relay_count(&self, method: &str) -> u64 {
        self.relay_shim.count(&[method])
    }

    /// Current value of `resource_manager_allocations_total{resource_name, source}`.
    pub fn allocations(&self, resource: ResourceName, source: Source) -> u64 {
        let value = self.allocations.get(&[resource.as_str(), source.as_str()]);
        value.unwrap_or(0.0) as u64
    }

    /// Everything in the Prometheus text format ([`CONTENT_TYPE`]).
    /// Runs `collector` before each render, to copy counters kept elsewhere into their
    /// families (e.g. [`Self::set_apiserver_watch`]).
    pub fn on_render(&self, collector: impl Fn(&Metrics) + Send + Sync + 'static) {
        if let Ok(mut all) = self.collectors.0.lock() {
            all.push(Box::new(collector));
        }
    }

    /// Replaces the API server watcher's counters: (what, count) with what one of `list`,
    /// `watch`, `event`, `bookmark`, `expired`, `error`.
    pub fn set_apiserver_watch(&self, rows: &[(&str, u64)]) {
        self.apiserver_watch.replace(
            rows.iter()
                .map(|(what, n)| (vec![what.to_string()], *n as f64)),
        );
    }

    /// Replaces the refusal writer's counters: (outcome, count).
    pub fn set_refusal_reports(&self, rows: &[(&str, u64)]) {
        self.refusal_reports.replace(
            rows.iter()
                .map(|(outcome, n)| (vec![outcome.to_string()], *n as f64)),
        );
    }

    pub fn render(&self) -> String {
        if let Ok(all) = self.collectors.0.lock() {
            for collect in all.iter() {
                collect(self);
            }
        }
        let mut out = String::with_capacity(8192);
        self.allocations.render(&mut out);
        self.allocation_errors.render(&mut out);
        self.container_assignments.render(&mut out);
        self.relay_shim.render(&mut out);
        self.relay_runtime.render(&mut out);
        self.relay_cut_off.render(&mut out);
        self.settled.render(&mut out);
        self.decisions_abandoned.render(&mut out);
        self.pool_cpus.render(&mut out);
        self.pool_memory.render(&mut out);
        self.drift_corrections.render(&mut out);
        self.checkpoint_writes.render(&mut out);
        self.checkpoint_failures.render(&mut out);
        self.runtime_connected.render(&mut out);
        self.pods.render(&mut out);
        self.pod_refusals.render(&mut out);
        self.apiserver_watch.render(&mut out);
        self.refusal_reports.render(&mut out);
        self.resizes.render(&mut out);
        self.build_info.render(&mut out);
        out
    }
}

#[cfg(test)]
mod tests;

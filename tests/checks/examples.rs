//! The example pods of `shared/fixtures/examples/` (from the Pod-Level Resource Managers
//! tutorial and the v1.37 announcement), unchanged, on the kubelet fixture machine
//! `topoDualSocketHT` (2 NUMA nodes, 6 CPUs each; 16Gi per node added), with the tutorial's
//! kubelet settings (`kubelet-pod-scope.yaml`, read as a file) plus the reservations the kubelet
//! requires to start (a reserved CPU, and reservedMemory equal to the default 100Mi eviction
//! threshold). Everything runs through the `numa-shim` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use numa_shim::cpuset::CpuSet;
use serde_json::Value;

fn shared(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures")
        .join(sub)
}

/// The scenario header: machine and kubelet settings, with `extra` kubelet fields on top.
fn header(extra: &str) -> String {
    format!(
        "topology: {{file: {machine}, memoryPerNuma: 16Gi}}\nkubelet:\n  file: {kubelet}\n  reservedSystemCPUs: \"0\"\n  reservedMemory: [{{numaNode: 0, limits: {{memory: 100Mi}}}}]\n{extra}",
        machine = shared("topologies/topoDualSocketHT.json").display(),
        kubelet = shared("examples/kubelet-pod-scope.yaml").display(),
    )
}

fn pods(names: &[&str]) -> String {
    let list: Vec<String> = names
        .iter()
        .map(|n| shared(&format!("examples/{n}.yaml")).display().to_string())
        .collect();
    format!("pods: [{}]\n", list.join(", "))
}

fn run(scenario: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, scenario).expect("write scenario");
    Command::new(env!("CARGO_BIN_EXE_numa-shim"))
        .arg("simulate")
        .arg(&path)
        .args(args)
        .output()
        .expect("run numa-shim")
}

fn simulate(scenario: &str) -> Value {
    let out = run(scenario, &["--output", "json"]);
    assert!(
        out.status.success(),
        "numa-shim simulate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn pod<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("pod {name} not in {report}"))
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("container {name} not in {pod}"))
}

fn cpus(v: &Value) -> CpuSet {
    CpuSet::parse(
        v.as_str()
            .unwrap_or_else(|| panic!("cpu list expected, got {v}")),
    )
    .expect("canonical cpu list")
}

/// topoDualSocketHT: even CPUs on NUMA node 0, odd CPUs on NUMA node 1.
fn numa_of(set: &CpuSet) -> Vec<u32> {
    let mut nodes: Vec<u32> = set.iter().map(|c| c % 2).collect();
    nodes.dedup();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

#[test]
fn pod_scope_mixed_is_placed_in_one_numa_aligned_budget() {
    let report = simulate(&(header("") + &pods(&["pod-scope-mixed"])));
    let p = pod(&report, "pod-scope-mixed");
    assert_eq!(p["admitted"], true, "{p}");
    let budget = cpus(&p["cpus"]);
    assert_eq!(budget.len(), 4, "{p}");
    let node = numa_of(&budget);
    assert_eq!(node.len(), 1, "budget {budget:?} spans NUMA nodes");

    let main = container(p, "main-app");
    let slice = cpus(&main["cpus"]);
    assert_eq!(
        (main["exclusive"].clone(), main["role"].clone(), slice.len()),
        (Value::Bool(true), Value::from("app"), 2)
    );
    assert!(slice.is_subset(&budget));
    assert_eq!(main["cpuQuota"], -1);

    for sidecar in ["metrics-sidecar", "logging-sidecar"] {
        let c = container(p, sidecar);
        assert_eq!(c["role"], "sidecar", "{c}");
        assert_eq!(c["exclusive"], false, "{c}");
        assert_eq!(cpus(&c["cpus"]), budget.difference(&slice), "{c}");
        assert_eq!(
            c["cpuQuota"], 400_000,
            "{c}: the pod limit, quota kept in the pod pool"
        );
    }
    // Every container's memory is pinned to the budget's NUMA node.
    let want = Value::from(node[0].to_string());
    assert_eq!(p["memoryNodes"], want);
    for c in p["containers"].as_array().into_iter().flatten() {
        assert_eq!(c["memoryNodes"], want, "{c}");
    }
    // The budget left the node shared pool; the reserved CPU did not.
    let shared = cpus(&report["node"]["sharedCPUs"]);
    assert!(shared.is_disjoint(&budget));
    assert_eq!(report["node"]["reservedCPUs"], "0");
    assert!(shared.contains(0));
}

#[test]
fn empty_shared_pool_is_rejected_as_the_kubelet_does() {
    // single-numa-node (the tutorial's setting): the CPU provider has no pod hint → TopologyAffinityError.
    let report = simulate(&(header("") + &pods(&["empty-shared-pool"])));
    let p = pod(&report, "empty-shared-pool");
    assert_eq!(p["admitted"], false, "{p}");
    assert_eq!(p["reason"], "TopologyAffinityError", "{p}");
    assert_eq!(p["containers"], Value::Array(vec![]));
    assert!(p.get("cpus").is_none());

    // best-effort admits the hint, then AllocatePod refuses the empty pod shared pool.
    let report = simulate(
        &(header("  topologyManagerPolicy: best-effort\n") + &pods(&["empty-shared-pool"])),
    );
    let p = pod(&report, "empty-shared-pool");
    assert_eq!(p["reason"], "EmptyPodSharedPoolError", "{p}");
    assert_eq!(
        p["message"],
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"
    );
    // Nothing was kept: every CPU is back in the node shared pool.
    assert_eq!(report["node"]["sharedCPUs"], "0-11");
}

fn assert_container_scope_mixed_placed(report: &Value) {
    let p = pod(report, "container-scope-mixed");
    assert_eq!(p["admitted"], true, "{p}");
    assert!(
        p.get("cpus").is_none(),
        "no pod budget in container scope: {p}"
    );
    let sidecar = container(p, "infrastructure-sidecar");
    let slice = cpus(&sidecar["cpus"]);
    assert_eq!(
        (sidecar["exclusive"].clone(), slice.len()),
        (Value::Bool(true), 2),
        "{sidecar}"
    );
    assert_eq!(numa_of(&slice).len(), 1, "slice {slice:?} is NUMA aligned");
    let shared = cpus(&report["node"]["sharedCPUs"]);
    assert!(shared.is_disjoint(&slice));
    for worker in ["worker-1", "worker-2"] {
        let c = container(p, worker);
        assert_eq!(c["exclusive"], false, "{c}");
        assert_eq!(cpus(&c["cpus"]), shared, "{c} runs on the node shared pool");
        assert_eq!(c["cpuQuota"], 400_000, "{c}: capped by the pod limit");
    }
}

/// The tutorial's step 6 settings (container scope, Static memory policy as the tutorial has
/// it): the sidecar gets a NUMA-aligned 2-CPU slice from the node, the workers (no memory request
/// of their own: kubelet v1.37.2's Memory Manager skips them) run in the node shared pool under
/// the pod limit.
#[test]
fn container_scope_mixed_gets_a_node_slice_and_the_node_shared_pool() {
    let report = simulate(
        &(header("  topologyManagerScope: container\n") + &pods(&["container-scope-mixed"])),
    );
    assert_container_scope_mixed_placed(&report);
    let p = pod(&report, "container-scope-mixed");
    assert_eq!(container(p, "infrastructure-sidecar")["memoryNodes"], "0");
    assert!(container(p, "worker-1").get("memoryNodes").is_none());
}

/// Without the Memory Manager the same placement.
#[test]
fn container_scope_mixed_without_the_memory_manager() {
    let report = simulate(
        &(header("  topologyManagerScope: container\n  memoryManagerPolicy: None\n")
            + &pods(&["container-scope-mixed"])),
    );
    assert_container_scope_mixed_placed(&report);
}

#[test]
fn the_announcement_demo_shares_its_two_cpu_budget() {
    let report = simulate(&(header("") + &pods(&["pod-level-resource-demo"])));
    let p = pod(&report, "pod-level-resource-demo");
    assert_eq!(p["admitted"], true, "{p}");
    let budget = cpus(&p["cpus"]);
    assert_eq!(budget.len(), 2);
    for name in ["worker", "telemetry-sidecar"] {
        let c = container(p, name);
        assert_eq!(
            (c["exclusive"].clone(), cpus(&c["cpus"])),
            (Value::Bool(false), budget.clone()),
            "{c}"
        );
    }
}

#[test]
fn the_table_draws_the_numa_map() {
    let out = run(
        &(header("") + &pods(&["pod-scope-mixed"])),
        &["--output", "table"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "default/pod-scope-mixed",
        "NUMA node 0\n",
        "NUMA node 1\n",
        "  cpu    0  core    0  socket  0  reserved\n",
        "exclusive    default/pod-scope-mixed main-app",
        "pod pool     default/pod-scope-mixed",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn the_high_performance_node_settings_as_published_fail_the_reserved_memory_rule() {
    let scenario = format!(
        "topology: {{file: {}, memoryPerNuma: 16Gi}}\nkubelet: {}\n{}",
        shared("topologies/topoDualSocketHT.json").display(),
        shared("examples/kubelet-high-performance-node.yaml").display(),
        pods(&["pod-scope-mixed"]),
    );
    let out = run(&scenario, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reservedMemory: the total amount \"1Gi\" of type \"memory\" is not equal to the value \"100Mi\""),
        "{err}"
    );
}

#[test]
fn check_fails_on_an_unmet_expectation_and_names_it() {
    let scenario = header("")
        + &pods(&["pod-scope-mixed"])
        + "expect:\n  pods:\n  - {name: pod-scope-mixed, admitted: false}\n";
    let out = run(&scenario, &["--check"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pods[pod-scope-mixed].admitted: expected false, got true"),
        "{err}"
    );

    let scenario = header("")
        + &pods(&["pod-scope-mixed"])
        + "expect: {pods: [{name: pod-scope-mixed, admitted: true}]}\n";
    let out = run(&scenario, &["--check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The README's `simulate` examples (docs/examples/*.yaml, copies of the shared examples) still
/// give what their `expect` blocks and the README show.
#[test]
fn readme_examples_match_their_expect_blocks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples");
    for scenario in ["pod-scope.yaml", "container-scope.yaml"] {
        let out = Command::new(env!("CARGO_BIN_EXE_numa-shim"))
            .args(["simulate", "--check", "--output", "table"])
            .arg(dir.join(scenario))
            .output()
            .expect("run numa-shim");
        assert!(
            out.status.success(),
            "{scenario}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

//! What the kernel, numa-shim and the kubelet show for a rig, step by step: kernel readings,
//! decisions (numa-shim's `/placement`, the kubelet's state files), PodResources answers, and
//! the comparison of a numa-shim run with a reference run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{self, *};
use super::{Mode, Rig};

/// What numa-shim or the kubelet decided for one container: its CPUs when they are its own or
/// its pod's (None: the node shared pool) and the NUMA nodes of its memory.
type Decided = BTreeMap<String, (Option<String>, Option<String>)>;

/// Pod → (pod CPUs, pod memory NUMA nodes, containers).
type Decisions = BTreeMap<String, (Option<String>, Option<String>, Decided)>;

/// numa-shim's decisions, from `/placement` (static pods are named `<name>-<node>`).
pub fn numa_shim_decisions(shim: &Shim, node: &str) -> Decisions {
    let view = shim.placement();
    let mut out = Decisions::new();
    for pod in view["pods"].as_array().cloned().unwrap_or_default() {
        let name = pod["name"].as_str().unwrap_or_default();
        let name = name
            .strip_suffix(&format!("-{node}"))
            .unwrap_or(name)
            .to_string();
        let text = |v: &Value| v.as_str().map(str::to_string);
        let containers = pod["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let cpus = (c["pool"] != "node-shared")
                    .then(|| text(&c["cpus"]))
                    .flatten();
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    (cpus, text(&c["memoryNodes"])),
                )
            })
            .collect();
        out.insert(
            name,
            (text(&pod["cpus"]), text(&pod["memoryNodes"]), containers),
        );
    }
    out
}

/// NUMA nodes of memory blocks (`[{numaAffinity: [0], ...}]`) as a list ("0").
fn block_nodes(blocks: &Value) -> Option<String> {
    let nodes: numa_shim::cpuset::CpuSet = blocks
        .as_array()?
        .iter()
        .flat_map(|b| b["numaAffinity"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_u64().map(|n| n as u32))
        .collect();
    (!nodes.is_empty()).then(|| nodes.to_list())
}

/// The kubelet's own decisions, from its cpu_manager_state and memory_manager_state.
fn kubelet_decisions(kubelet: &Kubelet) -> Decisions {
    let cpu = kubelet.state("cpu_manager_state");
    let memory = kubelet.state("memory_manager_state");
    let mut out = Decisions::new();
    for pod in kubelet.pods() {
        if pod["status"]["phase"] == "Failed" {
            continue;
        }
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let mut containers = Decided::new();
        for c in ["initContainers", "containers"]
            .iter()
            .flat_map(|k| pod["spec"][*k].as_array().cloned().unwrap_or_default())
        {
            let name = c["name"].as_str().unwrap_or_default();
            let cpus = cpu["entries"][uid][name].as_str().map(str::to_string);
            let mems = block_nodes(&memory["entries"][uid][name]);
            containers.insert(name.to_string(), (cpus, mems));
        }
        out.insert(
            short_name(&pod),
            (
                cpu["podEntries"][uid]["cpuSet"]
                    .as_str()
                    .map(str::to_string),
                block_nodes(&memory["podEntries"][uid]["memoryBlocks"]),
                containers,
            ),
        );
    }
    out
}

/// Everything one phase showed.
#[derive(Debug)]
pub struct Seen {
    pub kernel: BTreeMap<String, BTreeMap<String, support::Seen>>,
    decisions: Decisions,
    /// PodResources `List`, and `Get` of each pod, normalised.
    list: BTreeMap<String, Value>,
    get: BTreeMap<String, Value>,
    allocatable_cpus: Value,
}

pub async fn observe(env: &Env, rig: &Rig) -> Seen {
    let kernel = kernel(env, &rig.kubelet).await;
    let node = rig
        .kubelet
        .pods()
        .first()
        .and_then(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
        .unwrap_or_default();
    let (decisions, socket) = match rig.mode {
        Mode::NumaShim => (
            numa_shim_decisions(&rig.shim, &node),
            rig.shim.pod_resources(),
        ),
        Mode::Reference => (
            kubelet_decisions(&rig.kubelet),
            rig.kubelet.path("pod_resources"),
        ),
    };
    let list: BTreeMap<String, Value> = podresources(&socket, &["list"])["pod_resources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|p| normalise_pod(p, &node))
        .map(|p| (p["name"].as_str().unwrap_or_default().to_string(), p))
        .collect();
    let mut get = BTreeMap::new();
    // Get for each pod List names (a refused pod is in neither; the kubelet's own refusal may
    // not show as phase Failed in its pod list yet, so List, compared below, is the judge).
    for pod in rig.kubelet.pods() {
        if pod["status"]["phase"] == "Failed" || !list.contains_key(&short_name(&pod)) {
            continue;
        }
        let full = pod["metadata"]["name"].as_str().unwrap_or_default();
        let answer = podresources(&socket, &["get", full, "default"]);
        get.insert(
            short_name(&pod),
            normalise_pod(&answer["pod_resources"], &node),
        );
    }
    let allocatable_cpus = podresources(&socket, &["allocatable"])["cpu_ids"].clone();
    Seen {
        kernel,
        decisions,
        list,
        get,
        allocatable_cpus,
    }
}

pub fn seen(cpus: &str, mems: &str, quota: i64) -> support::Seen {
    support::Seen {
        cpus: cpus.into(),
        mems: mems.into(),
        quota,
        allowed: cpus.into(),
    }
}

/// One step of the tutorial run: manifests added and removed, then what the kernel must show.
pub struct Step {
    pub title: &'static str,
    pub add: Vec<(&'static str, String)>,
    pub remove: Vec<&'static str>,
    pub running: Vec<&'static str>,
    pub expect: BTreeMap<String, BTreeMap<String, support::Seen>>,
}

pub fn expect(
    rows: &[(&str, &str, support::Seen)],
) -> BTreeMap<String, BTreeMap<String, support::Seen>> {
    let mut out: BTreeMap<String, BTreeMap<String, support::Seen>> = BTreeMap::new();
    for (pod, container, s) in rows {
        out.entry(pod.to_string())
            .or_default()
            .insert(container.to_string(), s.clone());
    }
    out
}

/// The pod-scope steps. `inferred`: numa-shim infers specs from CRI (no Pods API), so a classic
/// Guaranteed pod looks like a pod budget whose one container keeps its quota
/// (docs/pod-knowledge.md), and the refused pod is refused at its main container instead.
/// Runs the steps on a rig; returns what each step showed.
pub async fn run_steps(env: &Env, rig: &Rig, steps: &[Step]) -> Vec<Seen> {
    let mut out = Vec::new();
    for step in steps {
        eprintln!("--- {:?}: {}", rig.mode, step.title);
        for file in &step.remove {
            rig.kubelet.remove(file);
        }
        for (file, yaml) in &step.add {
            rig.kubelet.add(file, yaml);
        }
        let gone: Vec<&str> = ["pod-level-resource-demo", "pod-scope-mixed", "guaranteed"]
            .into_iter()
            .filter(|p| !step.running.contains(p) && !step.expect.contains_key(*p))
            .collect();
        rig.kubelet.wait_running(&step.running, &gone).await;
        // Pool changes reach running containers asynchronously.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut observed = observe(env, rig).await;
        while observed.kernel != step.expect && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            observed = observe(env, rig).await;
        }
        eprintln!(
            "kernel: {:#?}\ndecisions: {:#?}",
            observed.kernel, observed.decisions
        );
        assert_eq!(
            observed.kernel, step.expect,
            "{:?} {}: the kernel's cpusets and quotas",
            rig.mode, step.title
        );
        out.push(observed);
    }
    out
}

/// The kernel, numa-shim's decisions and its PodResources against the reference run.
pub fn compare(steps: &[Step], shim: &[Seen], reference: &[Seen]) {
    for ((step, s), r) in steps.iter().zip(shim).zip(reference) {
        assert_eq!(
            s.kernel, r.kernel,
            "{}: kernel, numa-shim vs kubelet",
            step.title
        );
        assert_eq!(
            s.decisions, r.decisions,
            "{}: numa-shim's decisions vs the kubelet's cpu_manager_state / memory_manager_state",
            step.title
        );
        assert_eq!(s.list, r.list, "{}: PodResources List", step.title);
        assert_eq!(s.get, r.get, "{}: PodResources Get", step.title);
        assert_eq!(
            s.allocatable_cpus, r.allocatable_cpus,
            "{}: GetAllocatableResources cpu_ids",
            step.title
        );
    }
}

//! Comparing numa-shim's answer with the oracle's, step by step and field by field: admission,
//! reason and message (word for word), API refusals, every container's CPUs, isolation, memory
//! NUMA nodes and blocks, device plugin devices, the pod's CPUs and memory, the node's shared CPUs and memory state.
//!
//! One class of difference is numa-shim's on purpose (docs/fidelity.md): on machines whose cores
//! (or sockets) differ in size, kubelet 1.37.2's free-core test compares a core's free CPUs with
//! the machine's *average* threads per core (`CPUsPerCore() = NumCPUs / NumCores`; sockets
//! likewise), so it can take a core whose other thread is already granted and hand one CPU to two
//! containers. numa-shim never grants a CPU twice. A case is in that class when numa-shim run
//! with that kubelet test reproduced (`Config::reproduce_kubelet_double_grants`) gives the
//! oracle's answer exactly, step for step.
//!
//! Texts the kubelet builds in Go map order (the memory type named by the Memory Manager's
//! EmptyPodSharedPool messages when several violate) are compared with that name left out.

use numa_shim::cpuset::CpuSet;
use numa_shim::scenario::steps::{BlockState, ContainerState, PodState, StepSnapshot};
use numa_shim::scenario::StepsReport;

/// Where the two answers first differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The step index (None: before any step, e.g. the settings).
    pub step: Option<usize>,
    /// The field, e.g. `pods[default/p1].containers[app-1].cpus`.
    pub path: String,
    pub ours: String,
    pub theirs: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            Some(s) => write!(f, "after step {s}: ")?,
            None => write!(f, "settings: ")?,
        }
        write!(
            f,
            "{}: numa-shim {:?}, kubelet {:?}",
            self.path, self.ours, self.theirs
        )
    }
}

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Agree,
    /// The documented divergence: the kubelet granted a CPU twice (`detail` says where).
    GrantedTwice {
        difference: Difference,
        detail: String,
    },
    Disagree(Difference),
}

/// Compares the two answers. `reproduced` is numa-shim's answer with the kubelet's free
/// core/socket test reproduced (asked only when the answers differ): when it agrees with the
/// oracle on everything, the difference is the documented divergence and nothing else.
/// `reserved`: the reserved CPUs when the settings list them; `regular_init`: whether a container
/// name is a regular init container's (both only for describing where the CPU went twice).
pub fn compare(
    ours: &StepsReport,
    theirs: &StepsReport,
    reproduced: &mut dyn FnMut() -> Option<StepsReport>,
    reserved: &CpuSet,
    regular_init: &dyn Fn(&str) -> bool,
) -> Verdict {
    let Some(diff) = first_difference(ours, theirs) else {
        return Verdict::Agree;
    };
    let Some(quirk) = reproduced() else {
        return Verdict::Disagree(diff);
    };
    if first_difference(&quirk, theirs).is_some() {
        return Verdict::Disagree(diff);
    }
    // Where the kubelet granted a CPU twice, if a snapshot shows it (a refused pod's grants
    // are swept before the snapshot).
    let detail = theirs
        .steps
        .iter()
        .enumerate()
        .find_map(|(i, snap)| {
            granted_twice(snap, reserved, regular_init).map(|d| format!("after step {i}: {d}"))
        })
        .unwrap_or_else(|| {
            "inside a refused admission (numa-shim with the kubelet's free-core test gives the kubelet's answer)".into()
        });
    Verdict::GrantedTwice {
        difference: diff,
        detail,
    }
}

fn differ(step: Option<usize>, path: String, ours: String, theirs: String) -> Option<Difference> {
    (ours != theirs).then_some(Difference {
        step,
        path,
        ours,
        theirs,
    })
}

/// CPU and NUMA lists compared as sets.
fn list(s: &str) -> String {
    CpuSet::parse(s).map_or_else(|_| format!("unparsable {s:?}"), |c| c.to_list())
}

/// The Memory Manager's EmptyPodSharedPool texts name the first violating memory type of a Go
/// map; with several violating, which one is chance: the name is left out of the comparison.
fn map_order_free(message: &str) -> String {
    const TEMPLATES: [(&str, &str); 2] = [
        (
            "pod rejected, sum of exclusive container ",
            " requests equals pod budget, leaving no memory for shared containers",
        ),
        (
            "pod rejected, pod has shared init containers but no ",
            " available for them",
        ),
    ];
    for (head, tail) in TEMPLATES {
        if let Some(name) = message
            .strip_prefix(head)
            .and_then(|rest| rest.strip_suffix(tail))
        {
            if name == "memory" || name.starts_with("hugepages-") {
                return format!("{head}<memory type>{tail}");
            }
        }
    }
    message.to_string()
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_default()
}

fn blocks(b: &[BlockState]) -> String {
    let mut b: Vec<String> = b
        .iter()
        .map(|b| format!("{}:{}@{}", b.resource, b.size, list(&b.numa)))
        .collect();
    b.sort();
    b.join(" ")
}

pub fn first_difference(ours: &StepsReport, theirs: &StepsReport) -> Option<Difference> {
    if let Some(d) = differ(
        None,
        "configError".into(),
        ours.config_error.is_some().to_string(),
        theirs.config_error.is_some().to_string(),
    ) {
        return Some(Difference {
            ours: opt(&ours.config_error),
            theirs: opt(&theirs.config_error),
            ..d
        });
    }
    if let Some(d) = differ(
        None,
        "steps".into(),
        ours.steps.len().to_string(),
        theirs.steps.len().to_string(),
    ) {
        return Some(d);
    }
    ours.steps
        .iter()
        .zip(&theirs.steps)
        .enumerate()
        .find_map(|(i, (a, b))| snapshot_difference(i, a, b))
}

fn snapshot_difference(i: usize, a: &StepSnapshot, b: &StepSnapshot) -> Option<Difference> {
    let s = Some(i);
    let names = |p: &[PodState]| -> String {
        p.iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if let Some(d) = differ(s, "pods".into(), names(&a.pods), names(&b.pods)) {
        return Some(d);
    }
    for (pa, pb) in a.pods.iter().zip(&b.pods) {
        if let Some(d) = pod_difference(i, pa, pb) {
            return Some(d);
        }
    }
    differ(
        s,
        "node.sharedCPUs".into(),
        list(&a.node.shared_cpus),
        list(&b.node.shared_cpus),
    )
    .or_else(|| {
        let mem = |n: &StepSnapshot| {
            let mut m: Vec<String> = n
                .node
                .memory
                .iter()
                .map(|m| {
                    format!(
                        "{}/{}: allocatable {} free {} reserved {}",
                        m.numa, m.resource, m.allocatable, m.free, m.reserved
                    )
                })
                .collect();
            m.sort();
            m.join("; ")
        };
        differ(s, "node.memory".into(), mem(a), mem(b))
    })
}

fn pod_difference(i: usize, a: &PodState, b: &PodState) -> Option<Difference> {
    let s = Some(i);
    let at = format!("pods[{}/{}]", a.namespace, a.name);
    let checks = [
        (
            "apiError",
            a.api_error.is_some().to_string(),
            b.api_error.is_some().to_string(),
        ),
        ("admitted", a.admitted.to_string(), b.admitted.to_string()),
        ("reason", opt(&a.reason), opt(&b.reason)),
        (
            "message",
            map_order_free(&opt(&a.message)),
            map_order_free(&opt(&b.message)),
        ),
        (
            "cpus",
            a.cpus.as_deref().map(list).unwrap_or_default(),
            b.cpus.as_deref().map(list).unwrap_or_default(),
        ),
        ("memory", blocks(&a.memory), blocks(&b.memory)),
    ];
    for (field, x, y) in checks {
        if let Some(mut d) = differ(s, format!("{at}.{field}"), x, y) {
            if field == "apiError" {
                d.ours = opt(&a.api_error);
                d.theirs = opt(&b.api_error);
            }
            return Some(d);
        }
    }
    let names = |p: &PodState| -> String {
        p.containers
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
            .join(" ")
    };
    if let Some(d) = differ(s, format!("{at}.containers"), names(a), names(b)) {
        return Some(d);
    }
    a.containers
        .iter()
        .zip(&b.containers)
        .find_map(|(ca, cb)| container_difference(i, &at, ca, cb))
}

fn container_difference(
    i: usize,
    at: &str,
    a: &ContainerState,
    b: &ContainerState,
) -> Option<Difference> {
    let at = format!("{at}.containers[{}]", a.name);
    let nodes = |c: &ContainerState| c.memory_nodes.as_deref().map(list).unwrap_or_default();
    [
        ("cpus", list(&a.cpus), list(&b.cpus)),
        ("isolation", a.isolation.clone(), b.isolation.clone()),
        ("memoryNodes", nodes(a), nodes(b)),
        ("memory", blocks(&a.memory), blocks(&b.memory)),
        (
            "devices",
            format!("{:?}", a.devices),
            format!("{:?}", b.devices),
        ),
    ]
    .into_iter()
    .find_map(|(field, x, y)| differ(Some(i), format!("{at}.{field}"), x, y))
}

/// Whether the snapshot shows a CPU granted twice: held by two pods, by two long-running
/// exclusive containers of one pod, exclusively while in the shared pool, outside the pod's own
/// CPUs, or although reserved.
pub fn granted_twice(
    snap: &StepSnapshot,
    reserved: &CpuSet,
    regular_init: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let parse = |s: &str| CpuSet::parse(s).unwrap_or_default();
    let shared = parse(&snap.node.shared_cpus);
    let mut held: Vec<(String, CpuSet)> = Vec::new();
    for p in snap.pods.iter().filter(|p| p.admitted) {
        let key = format!("{}/{}", p.namespace, p.name);
        let exclusive: Vec<(&str, CpuSet)> = p
            .containers
            .iter()
            .filter(|c| c.isolation == "container")
            .map(|c| (c.name.as_str(), parse(&c.cpus)))
            .collect();
        for (name, cpus) in &exclusive {
            let both = cpus.intersection(&shared);
            if !both.is_empty() {
                return Some(format!("{key}: {name} holds {both} of the shared pool"));
            }
            if let Some(bubble) = p.cpus.as_deref().map(parse) {
                let outside = cpus.difference(&bubble);
                if !outside.is_empty() {
                    return Some(format!(
                        "{key}: {name} holds {outside}, outside the pod's CPUs"
                    ));
                }
            }
        }
        let long: Vec<&(&str, CpuSet)> =
            exclusive.iter().filter(|(n, _)| !regular_init(n)).collect();
        for (x, (na, a)) in long.iter().enumerate() {
            for (nb, b) in long.iter().skip(x + 1) {
                let both = a.intersection(b);
                if !both.is_empty() {
                    return Some(format!("{key}: {na} and {nb} both hold {both}"));
                }
            }
        }
        let all = match &p.cpus {
            Some(bubble) => parse(bubble),
            None => exclusive
                .iter()
                .fold(CpuSet::new(), |acc, (_, c)| acc.union(c)),
        };
        let r = all.intersection(reserved);
        if !r.is_empty() {
            return Some(format!("{key} holds reserved CPUs {r}"));
        }
        held.push((key, all));
    }
    for (x, (ka, a)) in held.iter().enumerate() {
        for (kb, b) in held.iter().skip(x + 1) {
            let both = a.intersection(b);
            if !both.is_empty() {
                return Some(format!("{ka} and {kb} both hold {both}"));
            }
        }
    }
    None
}

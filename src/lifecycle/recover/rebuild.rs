//! Recovery without a usable checkpoint: every pod found running is put back into the decision
//! core where it runs, whole — its spec from the checkpoint numa-shim could not restore as a
//! whole (re-adopted pod by pod), else from the sandbox's annotation — so its budget, memory
//! and containers are all there again. What runs is the truth: exclusive slices never move,
//! pod-pool containers are found where the kernel has them (never on another container's
//! exclusive CPU), and a pod that cannot be put back whole keeps its containers' CPUs held.

use std::collections::BTreeMap;

use super::observe::Seen;
use super::Recovery;
use crate::cpuset::CpuSet;
use crate::lifecycle::annotations::{parse_pod_annotation, CONTAINER_ANNOTATION, POD_ANNOTATION};
use crate::lifecycle::registry::{
    Adoption, FoundContainer, FoundPod, Registry, RegistrySnapshot, Source, PLACEHOLDER,
};
use crate::placement::node::{Found, Isolation};
use crate::placement::{ContainerSpec, NumaMask, PodSpec};
use crate::proto::cri::v1 as cri;

/// One pod to put back: what it is, where it may be, and its containers as found.
struct Plan<'a> {
    sandbox: &'a cri::PodSandbox,
    spec: PodSpec,
    source: Source,
    /// Where to put it, best first: the checkpoint's decision, then what was found.
    candidates: Vec<Found>,
    seen: Vec<&'a Seen>,
}

impl Plan<'_> {
    fn cpus(&self) -> CpuSet {
        self.candidates
            .iter()
            .flat_map(|f| f.exclusive.values().chain(std::iter::once(&f.budget)))
            .fold(CpuSet::new(), |acc, c| acc.union(c))
    }
}

/// Rebuilds the registry from the running pods (`refused`: the checkpoint that could not be
/// restored as a whole, if there was one).
pub(super) fn rebuild(
    registry: &mut Registry,
    refused: Option<RegistrySnapshot>,
    sandboxes: &[cri::PodSandbox],
    containers: &[cri::Container],
    seen: &[Seen],
    report: &mut Recovery,
) {
    let exclusive_all = exclusive_cpus(seen);
    let mut ready: Vec<&cri::PodSandbox> = sandboxes
        .iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .collect();
    ready.sort_by_key(|s| s.created_at);
    let (records, decisions) = match refused {
        Some(snapshot) => {
            let decisions: BTreeMap<String, Found> = snapshot
                .node
                .admitted()
                .into_iter()
                .map(|(spec, found)| (spec.uid, found))
                .collect();
            (snapshot.pods, decisions)
        }
        None => Default::default(),
    };
    let all_numa = registry.node().topology().numa.len();
    let mut plans = Vec::new();
    let mut pools_taken = CpuSet::new();
    for sandbox in ready {
        let of_sandbox: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.container.pod_sandbox_id == sandbox.id)
            .collect();
        if of_sandbox.is_empty() {
            continue;
        }
        let uid = sandbox.metadata.as_ref().map_or("", |m| m.uid.as_str());
        let known = records
            .get(uid)
            .filter(|r| r.sandbox_id.as_deref().is_none_or(|id| id == sandbox.id))
            .map(|r| (r.spec.clone(), r.source));
        let annotated = || {
            let (spec, source) = parse_pod_annotation(sandbox.annotations.get(POD_ANNOTATION)?)?;
            let spec = match source {
                Source::Inferred => inferred_spec(spec, &sandbox.id, containers),
                _ => spec,
            };
            Some((spec, source))
        };
        let Some((spec, source)) = known.or_else(annotated) else {
            hold_all(registry, sandbox, &of_sandbox, &exclusive_all, report);
            continue;
        };
        let mut observed = found_in(&of_sandbox, all_numa);
        let own = own_exclusive(&observed);
        observed.budget = observed
            .budget
            .difference(&exclusive_all)
            .difference(&pools_taken);
        pools_taken = pools_taken.union(&observed.budget);
        let mut candidates = Vec::new();
        if let Some(decided) = decisions.get(uid) {
            // The checkpoint's decision, unless it contradicts what runs elsewhere.
            let others = exclusive_all.difference(&own);
            if decided_cpus(decided).is_disjoint(&others) {
                candidates.push(decided.clone());
            }
        }
        candidates.push(observed);
        plans.push(Plan {
            sandbox,
            spec,
            source,
            candidates,
            seen: of_sandbox,
        });
    }
    // Everything found in use is held while pods are put back one by one, so that completing
    // one pod's budget never takes CPUs another pod runs on.
    let in_use = plans
        .iter()
        .fold(exclusive_all.union(&pools_taken), |acc, p| {
            acc.union(&p.cpus())
        });
    let _ = registry.hold_foreign(&in_use);
    for plan in plans {
        registry.release_foreign(&plan.cpus());
        let containers: Vec<FoundContainer> =
            plan.seen.iter().map(|s| found_container(s)).collect();
        let mut last = None;
        let adopted = plan.candidates.iter().any(|found| {
            let pod = FoundPod {
                spec: plan.spec.clone(),
                source: plan.source,
                sandbox_id: plan.sandbox.id.clone(),
                found: found.clone(),
                containers: containers.clone(),
            };
            match registry.adopt_pod(&pod) {
                Ok(()) => true,
                Err(err) => {
                    last = Some(err);
                    false
                }
            }
        });
        if adopted {
            report.rebuilt += 1;
            report.adopted += containers.len();
            continue;
        }
        if let Some(err) = last {
            report.problems.push(format!(
                "pod {}/{}: cannot be put back whole ({err}); its containers keep their cpus",
                plan.spec.namespace, plan.spec.name
            ));
        }
        hold_all(registry, plan.sandbox, &plan.seen, &exclusive_all, report);
    }
}

/// The CPUs of every exclusive slice found (decided at creation; slices never move).
pub(super) fn exclusive_cpus(seen: &[Seen]) -> CpuSet {
    seen.iter()
        .filter(|s| s.decision.isolation == Isolation::Container)
        .fold(CpuSet::new(), |acc, s| acc.union(&s.decision.cpus))
}

/// Where the containers of one pod were found: slices, the CPUs its pod-pool containers run
/// on, and the NUMA nodes their memory is pinned to (unless that is simply every node).
fn found_in(seen: &[&Seen], numa_nodes: usize) -> Found {
    let mut found = Found::default();
    for s in seen {
        match s.decision.isolation {
            Isolation::Container => {
                found
                    .exclusive
                    .insert(s.name().to_string(), s.decision.cpus.clone());
            }
            Isolation::Pod => found.budget = found.budget.union(&s.cpus),
            Isolation::Host => continue,
        }
        let mask = s
            .mems
            .as_deref()
            .and_then(|m| CpuSet::parse(m).ok())
            .map(|m| NumaMask::from_ids(m.iter()));
        if let Some(mask) = mask.filter(|m| !m.is_empty()) {
            if numa_nodes <= 1 || (mask.count() as usize) < numa_nodes {
                found.memory_nodes.insert(s.name().to_string(), mask);
            }
        }
    }
    found
}

fn own_exclusive(found: &Found) -> CpuSet {
    found
        .exclusive
        .values()
        .fold(CpuSet::new(), |acc, c| acc.union(c))
}

fn decided_cpus(found: &Found) -> CpuSet {
    own_exclusive(found).union(&found.budget)
}

fn found_container(s: &Seen) -> FoundContainer {
    FoundContainer {
        id: s.container.id.clone(),
        name: s.name().to_string(),
        cpus: s.cpus.clone(),
        mems: pinned_mems(s),
        exclusive: s.decision.exclusive,
    }
}

/// The mems to keep for a container: only those numa-shim pinned (it never sets mems of
/// containers on the node shared pool).
fn pinned_mems(s: &Seen) -> Option<String> {
    (s.decision.isolation != Isolation::Host)
        .then(|| s.mems.clone())
        .flatten()
}

/// An inferred pod's spec as the sandbox annotation has it (its budget and the stand-in
/// container), with the containers numa-shim inferred since, in the order they were created.
fn inferred_spec(mut spec: PodSpec, sandbox_id: &str, containers: &[cri::Container]) -> PodSpec {
    let mut created: Vec<&cri::Container> = containers
        .iter()
        .filter(|c| c.pod_sandbox_id == sandbox_id)
        .collect();
    created.sort_by_key(|c| c.created_at);
    let inferred: Vec<ContainerSpec> = created
        .iter()
        .filter_map(|c| serde_json::from_str(c.annotations.get(CONTAINER_ANNOTATION)?).ok())
        .collect();
    if inferred.is_empty() {
        return spec;
    }
    spec.containers.retain(|c| c.name != PLACEHOLDER);
    for c in inferred {
        if !spec.containers.iter().any(|known| known.name == c.name) {
            spec.containers.push(c);
        }
    }
    spec
}

/// Records the pod's containers one by one, holding the CPUs they run on.
fn hold_all(
    registry: &mut Registry,
    sandbox: &cri::PodSandbox,
    seen: &[&Seen],
    exclusive_all: &CpuSet,
    report: &mut Recovery,
) {
    for s in seen {
        hold(registry, sandbox, s, exclusive_all, report);
    }
}

/// Records one container found running whose pod is not known whole: an exclusive slice keeps
/// its CPUs, a pod-pool container keeps where it runs except any exclusive CPU (falling back to
/// the node shared pool if nothing is left), a node-pool container follows the node pool.
pub(super) fn hold(
    registry: &mut Registry,
    sandbox: &cri::PodSandbox,
    s: &Seen,
    exclusive_all: &CpuSet,
    report: &mut Recovery,
) {
    let meta = sandbox.metadata.clone().unwrap_or_default();
    let (cpus, pinned) = match s.decision.isolation {
        Isolation::Container => (s.decision.cpus.clone(), true),
        Isolation::Pod => {
            let own = s.cpus.difference(exclusive_all);
            if own.is_empty() {
                (s.cpus.clone(), false)
            } else {
                (own, true)
            }
        }
        Isolation::Host => (s.cpus.clone(), false),
    };
    let found = Adoption {
        container_id: s.container.id.clone(),
        sandbox_id: sandbox.id.clone(),
        pod: PodSpec {
            uid: meta.uid,
            namespace: meta.namespace,
            name: meta.name,
            resources: None,
            init_containers: vec![],
            containers: vec![],
        },
        name: s.name().to_string(),
        pinned,
        cpus,
        mems: pinned_mems(s),
        exclusive: s.decision.exclusive,
    };
    match registry.adopt_container(found) {
        Ok(()) => {
            report.adopted += 1;
            report.held += 1;
        }
        Err(err) => report
            .problems
            .push(format!("container {}: {err}", s.container.id)),
    }
}

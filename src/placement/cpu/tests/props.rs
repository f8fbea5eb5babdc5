//! Property tests over random admission / removal sequences: no CPU granted twice, reserved never
//! granted, slices inside the bubble, pool = bubble − live slices, the state always passes
//! kubelet's `validateState`, removal restores the default set exactly, same input → same output.

use proptest::prelude::*;

use super::fixtures::machine;
use super::policy::{config, ctr};
use crate::cpuset::CpuSet;
use crate::placement::config::{CpuPolicyOptions, ReservedCpus};
use crate::placement::cpu::CpuManager;
use crate::placement::hint::NumaMask;
use crate::placement::pod::{ContainerRole, PodSpec};
use crate::placement::qos::IsolationLevel;
use crate::placement::test_pods::{self, GI};
use crate::placement::{HintProvider, TopologyHint};

#[derive(Debug, Clone)]
enum Op {
    /// Container-scope pod: (init cpus, sidecar cpus, app cpus); 0 = shared.
    Containers(Vec<(u8, u8)>, Option<u32>),
    /// Pod-level pod: budget, containers (role, cpus).
    PodLevel(u8, Vec<(u8, u8)>, Option<u32>),
    Remove(usize),
}

fn role(r: u8) -> ContainerRole {
    match r % 3 {
        0 => ContainerRole::Init,
        1 => ContainerRole::Sidecar,
        _ => ContainerRole::App,
    }
}

fn build(uid: &str, level: Option<u64>, spec: &[(u8, u8)]) -> PodSpec {
    let mut p = test_pods::pod(uid, vec![], vec![], level.map(|c| (c * 1000, GI)));
    for (i, &(r, n)) in spec.iter().enumerate() {
        let c = ctr(&format!("c{i}"), role(r), (n > 0).then_some(u64::from(n)));
        if c.role == ContainerRole::App {
            p.containers.push(c);
        } else {
            p.init_containers.push(c);
        }
    }
    if p.containers.is_empty() {
        p.containers.push(ctr("app", ContainerRole::App, None));
    }
    p
}

fn op() -> impl Strategy<Value = Op> {
    let ctrs = proptest::collection::vec((0u8..3, 0u8..4), 1..4);
    let hint = proptest::option::of(1u32..4);
    prop_oneof![
        (ctrs.clone(), hint.clone()).prop_map(|(c, h)| Op::Containers(c, h)),
        (1u8..7, ctrs, hint).prop_map(|(b, c, h)| Op::PodLevel(b, c, h)),
        (0usize..8).prop_map(Op::Remove),
    ]
}

fn options() -> impl Strategy<Value = CpuPolicyOptions> {
    (any::<bool>(), 0u8..4, any::<bool>()).prop_map(|(full, mode, strict)| CpuPolicyOptions {
        full_pcpus_only: full && mode != 2,
        distribute_cpus_across_numa: mode == 1,
        distribute_cpus_across_cores: mode == 2,
        prefer_align_cpus_by_uncore_cache: mode == 3,
        strict_cpu_reservation: strict,
        align_by_socket: false,
    })
}

/// Every invariant that must hold between operations.
fn check(cm: &CpuManager) -> Result<(), TestCaseError> {
    let s = cm.snapshot();
    let strict = cm.options.strict_cpu_reservation;
    let mut all = cm.topology().details().cpus();
    if strict {
        all = all.difference(cm.reserved());
    }
    // kubelet refuses an empty default set with assignments; with no reservation it can happen.
    if !s.default_cpu_set.is_empty() {
        s.validate(&all, cm.reserved(), strict)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let mut seen = s.default_cpu_set.clone();
    for (uid, containers) in &s.entries {
        let held = match s.pod_entries.get(uid) {
            Some(bubble) => {
                for a in containers.values() {
                    prop_assert!(a.cpus.is_subset(bubble), "slice outside bubble");
                }
                bubble.clone()
            }
            None => containers
                .values()
                .fold(CpuSet::new(), |u, a| u.union(&a.cpus)),
        };
        prop_assert!(held.is_disjoint(&seen), "cpus {} granted twice", held);
        prop_assert!(held.is_disjoint(cm.reserved()), "reserved granted");
        seen = seen.union(&held);
    }
    prop_assert_eq!(seen, all, "cpus lost");
    Ok(())
}

fn hint(mask: Option<u32>) -> TopologyHint {
    TopologyHint {
        affinity: mask.map(|m| NumaMask(u64::from(m))),
        preferred: true,
    }
}

fn apply(
    cm: &mut CpuManager,
    live: &mut Vec<PodSpec>,
    n: usize,
    op: &Op,
) -> Result<(), TestCaseError> {
    match op {
        Op::Containers(spec, mask) => {
            let p = build(&format!("p{n}"), None, spec);
            let before = cm.snapshot();
            let mut ok = true;
            for c in p.init_containers.iter().chain(&p.containers) {
                if cm.allocate(&p, c, &hint(*mask)).is_err() {
                    ok = false;
                    break;
                }
            }
            if ok {
                live.push(p);
            } else {
                for c in p.init_containers.iter().chain(&p.containers) {
                    cm.remove_container(&p.uid, &c.name);
                }
                prop_assert_eq!(
                    cm.snapshot(),
                    before,
                    "failed admission not undone by removal"
                );
            }
        }
        Op::PodLevel(budget, spec, mask) => {
            let p = build(&format!("p{n}"), Some(u64::from(*budget)), spec);
            let before = cm.snapshot();
            if cm.allocate_pod(&p, &hint(*mask)).is_ok() {
                if let Some(bubble) = cm.pod_cpus(&p.uid).cloned() {
                    let s = cm.snapshot();
                    let mut slices = CpuSet::new();
                    let mut pool = None;
                    for c in p.init_containers.iter().chain(&p.containers) {
                        let a = &s.entries[&p.uid][&c.name];
                        let long_running = c.role != ContainerRole::Init;
                        match (a.isolation, long_running) {
                            (IsolationLevel::Container, true) => slices = slices.union(&a.cpus),
                            (IsolationLevel::Pod, true) => pool = Some(a.cpus.clone()),
                            _ => {}
                        }
                    }
                    if let Some(pool) = pool {
                        prop_assert_eq!(
                            pool,
                            bubble.difference(&slices),
                            "pool != bubble - slices"
                        );
                    }
                }
                live.push(p);
            } else {
                prop_assert_eq!(cm.snapshot(), before, "failed pod admission changed state");
            }
        }
        Op::Remove(i) => {
            if !live.is_empty() {
                let p = live.remove(i % live.len());
                for c in p.init_containers.iter().chain(&p.containers) {
                    cm.remove_container(&p.uid, &c.name);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn allocation_invariants(
        topo in prop_oneof![Just("topoDualSocketHT"), Just("topoDualSocketMultiNumaPerSocketHT")],
        reserved in 0u64..3,
        opts in options(),
        ops in proptest::collection::vec(op(), 1..16),
    ) {
        let cfg = config(ReservedCpus::Count { milli: reserved * 1000 }, opts);
        let mut cm = CpuManager::new(&machine(topo), &cfg).unwrap();
        let initial = cm.snapshot();
        let mut twin = cm.clone();
        let mut live = Vec::new();
        let mut twin_live = Vec::new();
        for (n, op) in ops.iter().enumerate() {
            apply(&mut cm, &mut live, n, op)?;
            apply(&mut twin, &mut twin_live, n, op)?;
            prop_assert_eq!(cm.snapshot(), twin.snapshot(), "same input, different output");
            check(&cm)?;
        }
        for p in live.drain(..) {
            for c in p.init_containers.iter().chain(&p.containers) {
                cm.remove_container(&p.uid, &c.name);
            }
        }
        prop_assert_eq!(cm.snapshot(), initial, "removal did not restore the initial state");
    }
}

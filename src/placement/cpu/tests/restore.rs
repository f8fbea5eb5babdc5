//! The pod-level restore path (kubernetes#141041): `TestStaticPolicyRestorePodAllocation`,
//! `TestGetPodTopologyHintsWithRestoredPodCPUSet`, `TestGetPodTopologyHintsStalePodCPUSet` and
//! `TestGetPodTopologyHintsStaleNonPrefixPodCPUSet`, on the same two small machines.

use std::collections::BTreeMap;

use super::fixtures::set;
use super::policy::{config, ctr};
use crate::placement::config::{CpuPolicyOptions, ReservedCpus};
use crate::placement::cpu::{ContainerAssignment, CpuManager};
use crate::placement::pod::{ContainerRole, ContainerSpec, PodSpec};
use crate::placement::qos::IsolationLevel;
use crate::placement::test_pods::{self, GI};
use crate::placement::{HintProvider, TopologyHint};
use crate::topology::{CpuInfo, Topology};

const I: ContainerRole = ContainerRole::Init;
const S: ContainerRole = ContainerRole::Sidecar;
const A: ContainerRole = ContainerRole::App;

/// 8 CPUs, no SMT, one socket; NUMA node = cpu / `per_numa`.
fn machine(per_numa: u32) -> CpuManager {
    let cpus = (0..8)
        .map(|id| CpuInfo {
            id,
            core: id,
            socket: 0,
            die: 0,
            numa: id / per_numa,
            uncore: 0,
        })
        .collect();
    let cfg = config(
        ReservedCpus::Explicit(set("0")),
        CpuPolicyOptions::default(),
    );
    CpuManager::new(&Topology { cpus, numa: vec![] }, &cfg).unwrap()
}

fn c(name: &str, role: ContainerRole, cpus: Option<u64>) -> ContainerSpec {
    ctr(name, role, cpus)
}

fn seed(cm: &mut CpuManager, p: &PodSpec, default: &str, bubble: &str, held: &[(&str, &str)]) {
    cm.state.default_cpu_set = set(default);
    cm.state.pod_entries.insert(p.uid.clone(), set(bubble));
    let entries: BTreeMap<String, ContainerAssignment> = held
        .iter()
        .map(|(n, cpus)| {
            let a = ContainerAssignment {
                cpus: set(cpus),
                isolation: IsolationLevel::Container,
            };
            (n.to_string(), a)
        })
        .collect();
    if !entries.is_empty() {
        cm.state.entries.insert(p.uid.clone(), entries);
    }
}

type Row = (
    &'static str,
    u64,
    Vec<ContainerSpec>,
    Vec<ContainerSpec>,
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<(&'static str, &'static str)>,
    &'static str,
    &'static str,
);

#[test]
fn restore_pod_allocation() {
    let any = TopologyHint {
        affinity: None,
        preferred: true,
    };
    // (case, budget, init, apps, default, bubble, recorded, expected, expected bubble, expected default)
    let rows: Vec<Row> = vec![
        (
            "full",
            4,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![("c1", "1-2"), ("c2", "3-4")],
            vec![("c1", "1-2"), ("c2", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "moved",
            4,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
            "0-2,7",
            "3-6",
            vec![("c1", "3-4"), ("c2", "5-6")],
            vec![("c1", "3-4"), ("c2", "5-6")],
            "3-6",
            "0-2,7",
        ),
        (
            "partial",
            4,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![("c1", "1-2")],
            vec![("c1", "1-2"), ("c2", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "none",
            4,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![],
            vec![("c1", "1-2"), ("c2", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "shared",
            3,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, None)],
            "0,4-7",
            "1-3",
            vec![("c1", "1-2")],
            vec![("c1", "1-2"), ("c2", "3")],
            "1-3",
            "0,4-7",
        ),
        (
            "init-reuse",
            2,
            vec![c("i1", I, Some(2))],
            vec![c("c1", A, Some(2))],
            "0,3-7",
            "1-2",
            vec![("i1", "1-2")],
            vec![("i1", "1-2"), ("c1", "1-2")],
            "1-2",
            "0,3-7",
        ),
        (
            "sidecar",
            4,
            vec![c("s1", S, Some(2))],
            vec![c("c1", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![("s1", "1-2")],
            vec![("s1", "1-2"), ("c1", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "two-sidecars",
            6,
            vec![c("s1", S, Some(2)), c("s2", S, Some(2))],
            vec![c("c1", A, Some(2))],
            "0,7",
            "1-6",
            vec![("s1", "1-2")],
            vec![("s1", "1-2"), ("s2", "3-4"), ("c1", "5-6")],
            "1-6",
            "0,7",
        ),
        (
            "nonprefix-app",
            4,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![("c2", "2,4")],
            vec![("c1", "1-2"), ("c2", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "nonprefix-init",
            2,
            vec![c("i1", I, Some(2))],
            vec![c("c1", A, Some(2))],
            "0,3-7",
            "1-2",
            vec![("c1", "2")],
            vec![("i1", "1-2"), ("c1", "1-2")],
            "1-2",
            "0,3-7",
        ),
        (
            "stale-overlap",
            2,
            vec![],
            vec![c("c1", A, Some(2))],
            "0-7",
            "5-6",
            vec![],
            vec![("c1", "1-2")],
            "1-2",
            "0,3-7",
        ),
        (
            "ngu-sidecar",
            3,
            vec![c("s1", S, None)],
            vec![c("c1", A, Some(2))],
            "0,4-7",
            "1-3",
            vec![],
            vec![("s1", "3"), ("c1", "1-2")],
            "1-3",
            "0,4-7",
        ),
        (
            "ngu-init",
            4,
            vec![c("s1", S, Some(2)), c("i1", I, None)],
            vec![c("c1", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![("s1", "1-2")],
            vec![("s1", "1-2"), ("i1", "3-4"), ("c1", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "ngu-init-restored",
            4,
            vec![c("s1", S, Some(2)), c("i1", I, None)],
            vec![c("c1", A, Some(2))],
            "0,5-7",
            "1-4",
            vec![("s1", "1-2"), ("i1", "3")],
            vec![("s1", "1-2"), ("i1", "3"), ("c1", "3-4")],
            "1-4",
            "0,5-7",
        ),
        (
            "multi-init-reuse",
            2,
            vec![c("i1", I, Some(2)), c("i2", I, Some(2))],
            vec![c("c1", A, Some(2))],
            "0,3-7",
            "1-2",
            vec![("i1", "1-2")],
            vec![("i1", "1-2"), ("i2", "1-2"), ("c1", "1-2")],
            "1-2",
            "0,3-7",
        ),
    ];
    for (case, budget, init, apps, default, bubble, held, want, want_bubble, want_default) in rows {
        let mut cm = machine(8);
        let p = test_pods::pod(case, init, apps, Some((budget * 1000, GI)));
        seed(&mut cm, &p, default, bubble, &held);
        cm.allocate_pod(&p, &any)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        // Restoring is idempotent.
        let once = cm.snapshot();
        cm.allocate_pod(&p, &any).unwrap();
        assert_eq!(cm.snapshot(), once, "{case}: second call changed the state");
        assert_eq!(cm.pod_cpus(case), Some(&set(want_bubble)), "{case}");
        assert_eq!(cm.shared_pool(), &set(want_default), "{case}");
        let got: Vec<(String, String)> = cm.snapshot().entries[case]
            .iter()
            .map(|(n, a)| (n.clone(), a.cpus.to_string()))
            .collect();
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(n, c)| (n.to_string(), set(c).to_string()))
            .collect();
        want.sort();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn failed_restore_releases_everything() {
    let mut cm = machine(8);
    let p = test_pods::pod(
        "p",
        vec![],
        vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
        Some((4 * 1000, GI)),
    );
    seed(&mut cm, &p, "0,3-7", "1-2", &[("c1", "1-2")]);
    let any = TopologyHint {
        affinity: None,
        preferred: true,
    };
    let err = cm.allocate_pod(&p, &any).unwrap_err();
    assert_eq!(err.reason(), "UnexpectedAdmissionError");
    assert!(cm.pod_cpus("p").is_none());
    assert!(!cm.snapshot().entries.contains_key("p"));
    assert_eq!(cm.shared_pool(), &set("0-7"));
}

fn preferred(cm: &CpuManager, p: &PodSpec) -> Vec<Vec<u32>> {
    cm.pod_hints(p)["cpu"]
        .clone()
        .unwrap()
        .iter()
        .filter(|h| h.preferred)
        .map(|h| h.affinity.unwrap().ids().collect())
        .collect()
}

#[test]
fn pod_hints_follow_the_restored_bubble() {
    let p = test_pods::pod("p", vec![], vec![c("c1", A, Some(2))], Some((2 * 1000, GI)));
    let mut cm = machine(4);
    seed(&mut cm, &p, "0-4,7", "5-6", &[]);
    assert_eq!(preferred(&cm, &p), vec![vec![1]]);
    let mut cm = machine(4);
    seed(&mut cm, &p, "0,4-7", "1-3", &[]);
    assert_eq!(cm.pod_hints(&p)["cpu"], Some(vec![]));
    // A stale bubble (already back in the shared pool) is ignored.
    let mut cm = machine(4);
    seed(&mut cm, &p, "0-7", "5-6", &[]);
    assert!(preferred(&cm, &p).contains(&vec![0]));
}

#[test]
fn pod_hints_count_cpus_a_stale_bubble_will_release() {
    let p = test_pods::pod(
        "p",
        vec![],
        vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
        Some((4 * 1000, GI)),
    );
    let mut cm = machine(4);
    seed(&mut cm, &p, "0-3", "4-7", &[("c2", "6-7")]);
    assert!(preferred(&cm, &p).contains(&vec![1]));
    let p = test_pods::pod(
        "q",
        vec![],
        vec![c("c1", A, Some(2)), c("c2", A, None)],
        Some((3 * 1000, GI)),
    );
    let mut cm = machine(4);
    seed(&mut cm, &p, "0-4", "5-7", &[("c2", "7")]);
    assert!(preferred(&cm, &p).contains(&vec![1]));
}

//! Pod-Level Resource Managers rows of kubelet's `policy_static_test.go`
//! (`TestStaticPolicyAllocatePod` cases beyond the shared P vectors, `TestValidatePodScopeResources`)
//! and `TestSMTAlignmentErrorText`.

use super::fixtures::{machine, set};
use super::policy::{config, ctr};
use crate::placement::config::{CpuPolicyOptions, ReservedCpus};
use crate::placement::cpu::CpuManager;
use crate::placement::pod::{ContainerRole, ContainerSpec};
use crate::placement::test_pods::{self, GI};
use crate::placement::{AdmissionError, HintProvider, TopologyHint};

const I: ContainerRole = ContainerRole::Init;
const S: ContainerRole = ContainerRole::Sidecar;
const A: ContainerRole = ContainerRole::App;

fn c(name: &str, role: ContainerRole, cpus: Option<u64>) -> ContainerSpec {
    ctr(name, role, cpus)
}

fn manager(topo: &str) -> CpuManager {
    let cfg = config(
        ReservedCpus::Explicit(set("0")),
        CpuPolicyOptions::default(),
    );
    CpuManager::new(&machine(topo), &cfg).unwrap()
}

/// (init containers, app containers, expected cpus per container).
type Case = (
    Vec<ContainerSpec>,
    Vec<ContainerSpec>,
    Vec<(&'static str, &'static str)>,
);

/// TestStaticPolicyAllocatePod cases with init containers and sidecars (topoDualSocketHT,
/// reserved {0}, the fake topology manager's empty hint).
#[test]
fn allocate_pod_with_init_and_sidecars() {
    let any = TopologyHint {
        affinity: None,
        preferred: true,
    };
    let cases: Vec<Case> = vec![
        (
            vec![
                c("ngu-init-1", I, None),
                c("gu-side-2", S, Some(1)),
                c("ngu-init-3", I, None),
            ],
            vec![c("gu-1", A, Some(1)), c("ngu-2", A, None)],
            vec![
                ("ngu-init-1", "2,6,8"),
                ("gu-side-2", "6"),
                ("ngu-init-3", "2,8"),
                ("gu-1", "2"),
                ("ngu-2", "8"),
            ],
        ),
        (
            vec![
                c("ngu-init-1", I, None),
                c("ngu-side-2", S, None),
                c("ngu-init-3", I, None),
            ],
            vec![c("gu-1", A, Some(1)), c("ngu-2", A, None)],
            vec![
                ("ngu-init-1", "2,6,8"),
                ("ngu-side-2", "2,8"),
                ("ngu-init-3", "2,6,8"),
                ("gu-1", "6"),
                ("ngu-2", "2,8"),
            ],
        ),
    ];
    for (init, apps, want) in cases {
        let mut cm = manager("topoDualSocketHT");
        let p = test_pods::pod("p", init, apps, Some((3 * 1000, GI)));
        cm.allocate_pod(&p, &any).unwrap();
        for (name, cpus) in want {
            assert_eq!(cm.cpuset_or_default("p", name), set(cpus), "{name}");
        }
        assert_eq!(cm.shared_pool(), &set("0,1,3-5,7,9-11"));
        assert_eq!(cm.snapshot().entries["p"].len(), 5);
    }
}

/// "should not allocate exclusive CPUs to a non-guaranteed pod with pod-level resources".
#[test]
fn allocate_pod_skips_non_guaranteed_pod() {
    let mut cm = manager("topoDualSocketHT");
    let mut p = test_pods::pod(
        "p",
        vec![],
        vec![c("gu-1", A, Some(1))],
        Some((2 * 1000, GI)),
    );
    if let Some(r) = p.resources.as_mut() {
        r.limits.cpu_milli = Some(1000);
    }
    cm.allocate_pod(
        &p,
        &TopologyHint {
            affinity: None,
            preferred: true,
        },
    )
    .unwrap();
    assert!(cm.snapshot().entries.is_empty());
    assert_eq!(cm.shared_pool(), &set("0-11"));
    assert!(cm.pod_hints(&p).is_empty());
}

/// TestValidatePodScopeResources (topoSingleSocketHT): (budget, init, apps, valid).
#[test]
fn validate_pod_scope_resources_table() {
    let mut burstable = c("c3", A, None);
    burstable.resources.requests.cpu_milli = Some(500);
    burstable.resources.limits.cpu_milli = Some(1000);
    let rows: Vec<(u64, Vec<ContainerSpec>, Vec<ContainerSpec>, bool)> = vec![
        (4, vec![], vec![c("c1", A, Some(2)), c("c2", A, None)], true),
        (
            4,
            vec![],
            vec![c("c1", A, Some(2)), c("c2", A, Some(2))],
            true,
        ),
        (4, vec![], vec![c("c1", A, None), c("c2", A, None)], true),
        (
            6,
            vec![],
            vec![
                c("c1", A, Some(3)),
                c("c2", A, Some(2)),
                burstable,
                c("c4", A, None),
            ],
            true,
        ),
        (
            5,
            vec![],
            vec![c("c1", A, Some(3)), c("c2", A, Some(2)), c("c3", A, None)],
            false,
        ),
        (
            2,
            vec![c("i1", I, Some(1)), c("s1", S, Some(1))],
            vec![c("c1", A, None)],
            true,
        ),
        (
            2,
            vec![c("i1", I, Some(2))],
            vec![c("c1", A, Some(2))],
            true,
        ),
        (
            2,
            vec![c("s1", S, Some(2)), c("i1", I, None)],
            vec![],
            false,
        ),
        (2, vec![c("i1", I, None), c("s1", S, Some(2))], vec![], true),
        (
            2,
            vec![c("s1", S, Some(2)), c("s2", S, None)],
            vec![],
            false,
        ),
        (
            2,
            vec![c("s1", S, Some(1))],
            vec![c("c1", A, Some(1))],
            true,
        ),
    ];
    let cm = manager("topoSingleSocketHT");
    for (n, (budget, init, apps, valid)) in rows.into_iter().enumerate() {
        let p = test_pods::pod("p", init, apps, Some((budget * 1000, GI)));
        let got = cm.validate_pod_scope_resources(&p);
        assert_eq!(got.is_ok(), valid, "row {n}: {got:?}");
        if let Err(e) = got {
            assert_eq!(e.reason(), "EmptyPodSharedPoolError", "row {n}");
            // The pod hint is an empty list, so a restricted policy rejects the pod.
            assert_eq!(cm.pod_hints(&p)["cpu"], Some(vec![]), "row {n}");
        }
    }
}

/// TestSMTAlignmentErrorText.
#[test]
fn smt_alignment_error_text() {
    let e = |r, c, a, p| AdmissionError::SmtAlignment {
        requested_cpus: r,
        cpus_per_core: c,
        available_physical_cpus: a,
        caused_by_physical_cpus: p,
    };
    assert_eq!(
        e(15, 4, 0, false).to_string(),
        "SMT Alignment Error: requested 15 cpus not multiple cpus per core = 4"
    );
    assert_eq!(
        e(4, 2, 0, false).to_string(),
        "SMT Alignment Error: requested 4 cpus not multiple cpus per core = 2"
    );
    assert_eq!(
        e(4, 2, 0, true).to_string(),
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 0, requested CPUs = 4, CPUs per core = 2"
    );
    assert_eq!(e(4, 2, 0, true).reason(), "SMTAlignmentError");
}

/// full-pcpus-only applies to the pod total in pod scope.
#[test]
fn allocate_pod_enforces_smt_alignment() {
    let opts = CpuPolicyOptions {
        full_pcpus_only: true,
        ..Default::default()
    };
    let cfg = config(ReservedCpus::Explicit(set("0,6")), opts);
    let mut cm = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    let p = test_pods::pod("p", vec![], vec![c("a", A, None)], Some((3 * 1000, GI)));
    let err = cm
        .allocate_pod(
            &p,
            &TopologyHint {
                affinity: None,
                preferred: true,
            },
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    );
    let p = test_pods::pod("q", vec![], vec![c("a", A, None)], Some((4 * 1000, GI)));
    cm.allocate_pod(
        &p,
        &TopologyHint {
            affinity: None,
            preferred: true,
        },
    )
    .unwrap();
    assert_eq!(cm.pod_cpus("q"), Some(&set("2,4,8,10")));
}

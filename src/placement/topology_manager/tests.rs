//! Merge rows of kubelet's topologymanager/policy_test.go (spec §6.6) and the policy rules.

use super::*;
use crate::placement::NumaMask;
use crate::topology::{NumaNode, Topology};

fn machine(n: u32) -> Topology {
    Topology {
        cpus: vec![],
        numa: (0..n)
            .map(|id| NumaNode {
                id,
                distances: (0..n).map(|j| if j == id { 10 } else { 20 }).collect(),
                ..NumaNode::default()
            })
            .collect(),
    }
}

fn tm(n: u32, policy: TopologyPolicy) -> TopologyManager {
    TopologyManager::new(&machine(n), policy, TopologyOptions::default()).unwrap()
}

fn h(ids: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(NumaMask::from_ids(ids.iter().copied())),
        preferred,
    }
}

/// One provider per resource list given.
fn providers(lists: Vec<Option<Vec<TopologyHint>>>) -> Vec<ResourceHints> {
    lists
        .into_iter()
        .enumerate()
        .map(|(i, l)| ResourceHints::from([(format!("resource{i}"), l)]))
        .collect()
}

fn merge(n: u32, policy: TopologyPolicy, lists: Vec<Vec<TopologyHint>>) -> (TopologyHint, bool) {
    tm(n, policy)
        .merge(&providers(lists.into_iter().map(Some).collect()))
        .unwrap()
}

#[test]
fn m1_matching_narrower_preferred_hint() {
    let got = merge(
        2,
        TopologyPolicy::BestEffort,
        vec![
            vec![h(&[0], true), h(&[1], true)],
            vec![h(&[0], true), h(&[0, 1], false)],
        ],
    );
    assert_eq!(got, (h(&[0], true), true));
}

#[test]
fn m2_less_narrow_preferred_beats_narrower_non_preferred() {
    let got = merge(
        2,
        TopologyPolicy::BestEffort,
        vec![
            vec![h(&[1], true), h(&[0, 1], false)],
            vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)],
        ],
    );
    assert_eq!(got.0, h(&[1], true));
}

#[test]
fn m3_no_providers_gives_all_preferred() {
    assert_eq!(
        tm(2, TopologyPolicy::BestEffort).merge(&[]).unwrap().0,
        h(&[0, 1], true)
    );
    // A provider with an empty map counts as "no preference" too.
    assert_eq!(
        tm(2, TopologyPolicy::Restricted)
            .merge(&[ResourceHints::new()])
            .unwrap(),
        (h(&[0, 1], true), true)
    );
}

#[test]
fn m4_empty_hint_list_gives_all_not_preferred() {
    let got = merge(2, TopologyPolicy::BestEffort, vec![vec![]]);
    assert_eq!(got, (h(&[0, 1], false), true));
    let restricted = merge(2, TopologyPolicy::Restricted, vec![vec![]]);
    assert_eq!(restricted, (h(&[0, 1], false), false));
}

#[test]
fn m5_no_common_mask() {
    let got = merge(
        2,
        TopologyPolicy::BestEffort,
        vec![vec![h(&[0], true)], vec![h(&[1], true)]],
    );
    assert_eq!(got.0, h(&[0, 1], false));
}

#[test]
fn m6_wider_mask_makes_merge_non_preferred() {
    let got = merge(
        2,
        TopologyPolicy::BestEffort,
        vec![vec![h(&[0], true)], vec![h(&[0, 1], true)]],
    );
    assert_eq!(got.0, h(&[0], false));
}

#[test]
fn m7_single_non_preferred_hint_matching() {
    let got = merge(
        2,
        TopologyPolicy::BestEffort,
        vec![vec![h(&[0], true), h(&[1], true)], vec![h(&[0, 1], false)]],
    );
    assert_eq!(got.0, h(&[0], false));
}

#[test]
fn m8_best_non_preferred_affinity_count_2() {
    let got = merge(
        4,
        TopologyPolicy::BestEffort,
        vec![
            vec![h(&[0, 1, 2, 3], false), h(&[0, 1], false)],
            vec![h(&[0, 3], false)],
        ],
    );
    assert_eq!(got.0, h(&[0, 3], false));
}

#[test]
fn m9_best_non_preferred_affinity_count_3() {
    let got = merge(
        4,
        TopologyPolicy::BestEffort,
        vec![
            vec![h(&[0, 1, 2, 3], false), h(&[0, 1], false)],
            vec![h(&[1, 2], false)],
        ],
    );
    assert_eq!(got.0, h(&[1, 2], false));
}

#[test]
fn restricted_admits_only_preferred() {
    assert!(merge(2, TopologyPolicy::Restricted, vec![vec![h(&[0], true)]]).1);
    assert!(
        !merge(
            2,
            TopologyPolicy::Restricted,
            vec![vec![h(&[0], true)], vec![h(&[0, 1], true)]]
        )
        .1
    );
}

#[test]
fn single_numa_node_filters_multi_node_hints() {
    // Only a two-node hint: filtered away, no permutation, all-nodes non-preferred → nil, reject.
    let got = merge(
        2,
        TopologyPolicy::SingleNumaNode,
        vec![vec![h(&[0, 1], true)]],
    );
    assert_eq!(
        got,
        (
            TopologyHint {
                affinity: None,
                preferred: false
            },
            false
        )
    );
    // M1 under single-numa-node: {0} preferred.
    let got = merge(
        2,
        TopologyPolicy::SingleNumaNode,
        vec![
            vec![h(&[0], true), h(&[1], true)],
            vec![h(&[0], true), h(&[0, 1], false)],
        ],
    );
    assert_eq!(got, (h(&[0], true), true));
    // No preference at all: all nodes preferred → nil affinity, admitted.
    let got = tm(2, TopologyPolicy::SingleNumaNode).merge(&[]).unwrap();
    assert_eq!(
        got,
        (
            TopologyHint {
                affinity: None,
                preferred: true
            },
            true
        )
    );
}

#[test]
fn none_policy_admits_with_empty_hint() {
    let got = merge(2, TopologyPolicy::None, vec![vec![]]);
    assert_eq!(
        got,
        (
            TopologyHint {
                affinity: None,
                preferred: false
            },
            true
        )
    );
}

#[test]
fn prefer_closest_picks_smaller_distance_among_same_size() {
    // 4 nodes: 0-2 far (30), 1-3 close (11); everything else 20.
    let mut topo = machine(4);
    let d = |a: usize, b: usize| -> u32 {
        match (a.min(b), a.max(b)) {
            (x, y) if x == y => 10,
            (0, 2) => 30,
            (1, 3) => 11,
            _ => 20,
        }
    };
    for (i, n) in topo.numa.iter_mut().enumerate() {
        n.distances = (0..4).map(|j| d(i, j)).collect();
    }
    let lists = vec![vec![h(&[0, 2], true), h(&[1, 3], true)]];
    let plain = TopologyManager::new(
        &topo,
        TopologyPolicy::BestEffort,
        TopologyOptions::default(),
    )
    .unwrap();
    assert_eq!(
        plain
            .merge(&providers(lists.clone().into_iter().map(Some).collect()))
            .unwrap()
            .0,
        h(&[0, 2], true)
    );
    let opts = TopologyOptions {
        prefer_closest_numa_nodes: true,
        ..TopologyOptions::default()
    };
    let closest = TopologyManager::new(&topo, TopologyPolicy::BestEffort, opts).unwrap();
    assert_eq!(
        closest
            .merge(&providers(lists.into_iter().map(Some).collect()))
            .unwrap()
            .0,
        h(&[1, 3], true)
    );
}

#[test]
fn too_many_numa_nodes_refused_unless_policy_none() {
    let err = TopologyManager::new(
        &machine(9),
        TopologyPolicy::Restricted,
        TopologyOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        TopologyManagerError::TooManyNumaNodes { max: 8, found: 9 }
    );
    assert!(TopologyManager::new(
        &machine(9),
        TopologyPolicy::None,
        TopologyOptions::default()
    )
    .is_ok());
    let small = TopologyOptions {
        max_allowable_numa_nodes: 4,
        ..TopologyOptions::default()
    };
    assert!(TopologyManager::new(&machine(2), TopologyPolicy::None, small).is_err());
}

/// A CPU-like family (9 CPUs, 4 free per node, none on node 0) and a memory-like one (multi-node
/// masks only of unused nodes, node 1 used; single nodes listed) on 24 nodes: no preferred
/// merge; the best non-preferred one is {0,2,3}, the intersection of CPU hint {0,2,3,4} and
/// memory hint {0,2,3,5}, though {0,2,3} itself is no CPU hint (kubelet's quirk: a merged mask
/// narrower than the provider's hints).
#[test]
fn wide_machine_merged_mask_narrower_than_the_cpu_hints() {
    let n = 24u32;
    let all = NumaMask::from_ids(0..n);
    let mut free = [0u64; 64];
    for i in 1..n {
        free[i as usize] = 4;
    }
    let cpu = HintFamily {
        nodes: (0..n).collect(),
        up: Some(Upward {
            within: all,
            required: NumaMask::default(),
            min_count: 1,
            amounts: vec![free],
            need: vec![9],
        }),
        listed: vec![],
        preferred_size: 3,
        sockets: None,
    };
    let memory = HintFamily {
        nodes: (0..n).collect(),
        up: Some(Upward {
            within: NumaMask(all.0 & !2),
            required: NumaMask::default(),
            min_count: 2,
            amounts: vec![[1; 64]],
            need: vec![1],
        }),
        listed: (0..n).map(|i| NumaMask::from_ids([i])).collect(),
        preferred_size: 1,
        sockets: None,
    };
    let options = TopologyOptions {
        max_allowable_numa_nodes: n,
        ..TopologyOptions::default()
    };
    let tm = TopologyManager::new(&machine(n), TopologyPolicy::BestEffort, options).unwrap();
    let sets = [
        HintSets::from([("cpu".to_string(), Some(HintSet::Family(cpu)))]),
        HintSets::from([("memory".to_string(), Some(HintSet::Family(memory)))]),
    ];
    assert_eq!(tm.merge_sets(&sets).unwrap(), (h(&[0, 2, 3], false), true));
}

/// On a machine too wide to enumerate, a search that runs out of budget is a refusal, never a
/// guess.
#[test]
fn wide_machine_out_of_budget_is_refused() {
    let n = 32u32;
    let options = TopologyOptions {
        max_allowable_numa_nodes: n,
        ..TopologyOptions::default()
    };
    let tm = TopologyManager::new(&machine(n), TopologyPolicy::Restricted, options).unwrap();
    let lists = providers(vec![
        Some(vec![h(&[5, 6], false)]),
        Some(vec![h(&[6, 7], true)]),
    ]);
    let sets: Vec<HintSets> = lists.iter().map(listed).collect();
    assert_eq!(
        tm.merge_with(&sets, &Budget::new(3)),
        Err(TopologyManagerError::SearchBudget { nodes: 32 })
    );
    assert_eq!(
        tm.merge_with(&sets, &Budget::new(Budget::DEFAULT)).unwrap(),
        (h(&[6], false), false)
    );
}

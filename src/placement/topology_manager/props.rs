//! The searched merge against the kubelet's enumeration (`merge_reference`) on random small
//! machines: random spelled-out lists (nil, preferred and not, overlapping), random families
//! (upward parts over one or two dimensions, required nodes, single masks, socket rules), every
//! policy, with and without prefer-closest-numa-nodes on random distances.

use proptest::prelude::*;

use super::*;
use crate::topology::{NumaNode, Topology};

fn machine(n: u32, dist: &[u32]) -> Topology {
    Topology {
        cpus: vec![],
        numa: (0..n)
            .map(|id| NumaNode {
                id,
                distances: (0..n)
                    .map(|j| {
                        if j == id {
                            10
                        } else {
                            dist[((id.min(j) * 8 + id.max(j)) as usize) % dist.len()]
                        }
                    })
                    .collect(),
                ..NumaNode::default()
            })
            .collect(),
    }
}

fn mask(n: u32) -> impl Strategy<Value = NumaMask> {
    (1u64..(1 << n)).prop_map(NumaMask)
}

fn listed(n: u32) -> impl Strategy<Value = HintSet> {
    prop::collection::vec(
        (prop::option::weighted(0.9, mask(n)), any::<bool>()).prop_map(|(affinity, preferred)| {
            TopologyHint {
                affinity,
                preferred,
            }
        }),
        0..5,
    )
    .prop_map(HintSet::Listed)
}

fn family(n: u32) -> impl Strategy<Value = HintSet> {
    let amounts = prop::collection::vec(0u64..5, 64);
    (
        prop::option::weighted(0.9, (mask(n), 0u32..3, 1usize..3, amounts.clone(), amounts)),
        prop::collection::vec(mask(n), 0..4),
        prop::option::of(mask(n)),
        1u32..=n,
        prop::option::weighted(0.2, (1usize..3, 1usize..3)),
        0u64..12,
        0u64..8,
    )
        .prop_map(
            move |(up, mut listed, required, preferred_size, sockets, need0, need1)| {
                listed.sort_unstable();
                listed.dedup();
                let up = up.map(|(within, min_count, dims, a0, a1)| {
                    let to = |a: Vec<u64>| {
                        let mut t = [0u64; 64];
                        t.copy_from_slice(&a);
                        t
                    };
                    let mut amounts = vec![to(a0)];
                    let mut need = vec![need0];
                    if dims == 2 {
                        amounts.push(to(a1));
                        need.push(need1);
                    }
                    Upward {
                        within,
                        required: required.unwrap_or_default().and(within),
                        min_count,
                        amounts,
                        need,
                    }
                });
                let sockets = sockets.map(|(per, min_sockets)| SocketRule {
                    sockets_of: (0..n).map(|i| (i, vec![(i as usize) / per])).collect(),
                    socket_count: (n as usize).div_ceil(per),
                    min_sockets,
                });
                HintSet::Family(HintFamily {
                    nodes: (0..n).collect(),
                    up,
                    listed,
                    preferred_size,
                    sockets,
                })
            },
        )
}

fn set(n: u32) -> impl Strategy<Value = Option<HintSet>> {
    prop::option::weighted(0.9, prop_oneof![listed(n), family(n)])
}

fn providers(n: u32) -> impl Strategy<Value = Vec<HintSets>> {
    prop::collection::vec(
        prop::collection::btree_map(
            prop::sample::select(vec!["cpu", "memory", "hugepages-2Mi"]),
            set(n),
            0..3,
        )
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        0..3,
    )
}

fn case() -> impl Strategy<Value = (u32, Vec<u32>, Vec<HintSets>, TopologyPolicy, bool)> {
    (1u32..=7).prop_flat_map(|n| {
        (
            Just(n),
            prop::collection::vec(11u32..40, 1..6),
            providers(n),
            prop::sample::select(vec![
                TopologyPolicy::BestEffort,
                TopologyPolicy::Restricted,
                TopologyPolicy::SingleNumaNode,
            ]),
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn searched_merge_is_the_enumerated_one((n, dist, providers, policy, closest) in case()) {
        let options = TopologyOptions {
            prefer_closest_numa_nodes: closest,
            ..TopologyOptions::default()
        };
        let tm = TopologyManager::new(&machine(n, &dist), policy, options).unwrap();
        let got = tm.merge_sets(&providers).unwrap();
        prop_assert_eq!(got, tm.merge_reference(&providers));
    }

    #[test]
    fn best_member_is_find_best_of_the_enumeration(
        (n, _d, providers, _p, _c) in case(),
        within in 0u64..128,
    ) {
        for set in providers.iter().flat_map(|p| p.values()).flatten() {
            let HintSet::Family(f) = set else { continue };
            let within = NumaMask(within & ((1 << n) - 1));
            let members: Vec<TopologyHint> = f
                .members()
                .into_iter()
                .filter(|h| h.affinity.is_some_and(|m| m.and(within) == within))
                .collect();
            let mut want: Option<TopologyHint> = None;
            for h in members {
                let better = match want {
                    None => true,
                    Some(b) => (h.preferred && !b.preferred)
                        || (h.preferred == b.preferred
                            && is_narrower_than(h.affinity.unwrap(), b.affinity.unwrap())),
                };
                if better {
                    want = Some(h);
                }
            }
            let got = TopologyManager::best_member(f, within, &Budget::new(Budget::DEFAULT)).unwrap();
            prop_assert_eq!(got, want);
        }
    }
}

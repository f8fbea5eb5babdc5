//! The Topology Manager: merges the hint providers' NUMA hints into one affinity per pod or
//! container and decides admission by policy (none, best-effort, restricted, single-numa-node).
//!
//! It owns only the merge and the admit rule. It never allocates; the `node` module drives the
//! scopes (container / pod) and calls the providers' allocate functions with the chosen hint.

mod best;
mod family;
mod mask;
mod merge;
mod search;

pub use family::{HintFamily, HintSet, SocketRule, Upward};
pub use mask::{is_less_than, is_narrower_than, iterate_masks};
pub use merge::{filter_providers_hints, filter_single_numa_hints, HintMerger, NumaInfo};
pub use search::{Budget, Exhausted};

use super::config::{TopologyOptions, TopologyPolicy};
use super::{HintSets, NumaMask, ResourceHints, TopologyHint};
use search::{Distances, Order, Space};

/// Machines up to this many NUMA nodes may fall back to the kubelet's enumeration when the
/// search runs out of budget, if the cross product is small too (`REFERENCE_MAX_PERMUTATIONS`).
pub const REFERENCE_MAX_NODES: usize = 10;
/// The largest cross product the enumeration fallback walks.
pub const REFERENCE_MAX_PERMUTATIONS: u64 = 1 << 20;
use crate::topology::Topology;

/// Why the Topology Manager cannot run on this machine / with these options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyManagerError {
    #[error("the minimum value of \"max-allowable-numa-nodes\" should not be less than 8")]
    MaxAllowableTooSmall(u32),
    #[error("unsupported on machines with more than {max} NUMA Nodes")]
    TooManyNumaNodes { max: u32, found: usize },
    /// The exact search for the merged hint ran out of its work budget on a machine too wide to
    /// enumerate: refused rather than approximated (docs/PERFORMANCE.md, "Wide machines").
    #[error("topology manager: the exact hint merge on this {nodes}-NUMA-node machine exceeds the search budget of one decision; refused rather than approximated")]
    SearchBudget { nodes: usize },
}

/// Policy, options and the machine's NUMA facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyManager {
    policy: TopologyPolicy,
    options: TopologyOptions,
    info: NumaInfo,
}

impl TopologyManager {
    /// Builds the manager; fails like kubelet start on too many NUMA nodes or a too-small limit.
    pub fn new(
        topology: &Topology,
        policy: TopologyPolicy,
        options: TopologyOptions,
    ) -> Result<Self, TopologyManagerError> {
        if options.max_allowable_numa_nodes < 8 {
            return Err(TopologyManagerError::MaxAllowableTooSmall(
                options.max_allowable_numa_nodes,
            ));
        }
        let mut nodes: Vec<u32> = topology.numa.iter().map(|n| n.id).collect();
        if nodes.is_empty() {
            nodes = topology.cpus.iter().map(|c| c.numa).collect();
            nodes.sort_unstable();
            nodes.dedup();
        }
        if policy != TopologyPolicy::None && nodes.len() > options.max_allowable_numa_nodes as usize
        {
            return Err(TopologyManagerError::TooManyNumaNodes {
                max: options.max_allowable_numa_nodes,
                found: nodes.len(),
            });
        }
        let distances = nodes
            .iter()
            .map(|&id| {
                let node = topology.numa.iter().find(|n| n.id == id);
                nodes
                    .iter()
                    .enumerate()
                    .map(|(j, _)| node.and_then(|n| n.distances.get(j).copied()).unwrap_or(0))
                    .collect()
            })
            .collect();
        Ok(Self {
            policy,
            options,
            info: NumaInfo { nodes, distances },
        })
    }

    /// The machine's NUMA node ids, ascending (cAdvisor's nodes).
    pub fn numa_nodes(&self) -> &[u32] {
        &self.info.nodes
    }

    /// kubelet `Policy.Merge` over spelled-out lists (see `merge_sets`).
    pub fn merge(
        &self,
        providers: &[ResourceHints],
    ) -> Result<(TopologyHint, bool), TopologyManagerError> {
        let sets: Vec<HintSets> = providers.iter().map(listed).collect();
        self.merge_sets(&sets)
    }

    /// kubelet `Policy.Merge`: the best hint and whether the pod may be admitted with it,
    /// computed from the lists' rules (`best::merge`), in bounded work.
    pub fn merge_sets(
        &self,
        providers: &[HintSets],
    ) -> Result<(TopologyHint, bool), TopologyManagerError> {
        self.merge_with(providers, &Budget::new(Budget::DEFAULT))
    }

    /// `merge_sets` with a given work budget.
    pub fn merge_with(
        &self,
        providers: &[HintSets],
        budget: &Budget,
    ) -> Result<(TopologyHint, bool), TopologyManagerError> {
        let filtered = filter_sets(providers);
        let prefer_closest = self.options.prefer_closest_numa_nodes;
        match self.policy {
            TopologyPolicy::None => Ok((
                TopologyHint {
                    affinity: None,
                    preferred: false,
                },
                true,
            )),
            TopologyPolicy::BestEffort | TopologyPolicy::Restricted => {
                let (mask, preferred) = self.best(&filtered, prefer_closest, budget)?;
                let hint = TopologyHint {
                    affinity: Some(mask),
                    preferred,
                };
                Ok((hint, self.policy == TopologyPolicy::BestEffort || preferred))
            }
            TopologyPolicy::SingleNumaNode => {
                let single: Vec<HintSet> = filtered.iter().map(single_numa).collect();
                let (mask, preferred) = self.best(&single, false, budget)?;
                let affinity = (mask != self.info.default_mask()).then_some(mask);
                Ok((
                    TopologyHint {
                        affinity,
                        preferred,
                    },
                    preferred,
                ))
            }
        }
    }

    /// The kubelet's own enumeration (every permutation of every list's members): the reference
    /// the search is tested against; 2^N work per family.
    pub fn merge_reference(&self, providers: &[HintSets]) -> (TopologyHint, bool) {
        let lists: Vec<ResourceHints> = providers.iter().map(materialise).collect();
        let filtered = filter_providers_hints(&lists);
        let prefer_closest = self.options.prefer_closest_numa_nodes;
        match self.policy {
            TopologyPolicy::None => (
                TopologyHint {
                    affinity: None,
                    preferred: false,
                },
                true,
            ),
            TopologyPolicy::BestEffort | TopologyPolicy::Restricted => {
                let (mask, preferred) =
                    HintMerger::new(&self.info, filtered, prefer_closest).merge();
                let hint = TopologyHint {
                    affinity: Some(mask),
                    preferred,
                };
                (hint, self.policy == TopologyPolicy::BestEffort || preferred)
            }
            TopologyPolicy::SingleNumaNode => {
                let single = filter_single_numa_hints(filtered);
                let (mask, preferred) = HintMerger::new(&self.info, single, false).merge();
                let affinity = (mask != self.info.default_mask()).then_some(mask);
                (
                    TopologyHint {
                        affinity,
                        preferred,
                    },
                    preferred,
                )
            }
        }
    }

    /// The search, or on a small machine with a small cross product the enumeration when the
    /// search runs out of budget; otherwise a refusal.
    fn best(
        &self,
        lists: &[HintSet],
        prefer_closest: bool,
        budget: &Budget,
    ) -> Result<(NumaMask, bool), TopologyManagerError> {
        let nodes = self.search_nodes();
        let distances = prefer_closest.then(|| Distances::new(&self.info));
        match best::merge(&nodes, distances.as_ref(), lists, budget) {
            Ok(found) => Ok(found),
            Err(Exhausted) => {
                let refused = TopologyManagerError::SearchBudget {
                    nodes: self.info.nodes.len(),
                };
                if nodes.len() > REFERENCE_MAX_NODES {
                    tracing::warn!(nodes = nodes.len(), "hint merge search budget exhausted");
                    return Err(refused);
                }
                let lists: Vec<Vec<TopologyHint>> =
                    lists.iter().map(HintSet::materialise).collect();
                let permutations = lists
                    .iter()
                    .try_fold(1u64, |p, l| p.checked_mul(l.len() as u64))
                    .unwrap_or(u64::MAX);
                if permutations > REFERENCE_MAX_PERMUTATIONS {
                    tracing::warn!(
                        nodes = nodes.len(),
                        permutations,
                        "hint merge too wide to enumerate"
                    );
                    return Err(refused);
                }
                Ok(HintMerger::new(&self.info, lists, prefer_closest).merge())
            }
        }
    }

    /// Tests: on machines small enough to enumerate, the search's answer is the reference's.
    #[cfg(test)]
    pub fn assert_reference(&self, providers: &[HintSets], got: (TopologyHint, bool)) {
        if self.info.nodes.len() <= 8 {
            assert_eq!(
                got,
                self.merge_reference(providers),
                "search vs enumeration"
            );
        }
    }

    fn search_nodes(&self) -> Vec<u32> {
        let mut nodes: Vec<u32> = self
            .info
            .nodes
            .iter()
            .copied()
            .filter(|&n| n < 64)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// kubelet `findBestHint` over one family's members containing `within`: preferred first,
    /// then the narrowest (the Static Memory Manager's default and extended hints).
    pub fn best_member(
        family: &HintFamily,
        within: NumaMask,
        budget: &Budget,
    ) -> Result<Option<TopologyHint>, Exhausted> {
        let space = Space {
            nodes: &family.nodes,
            order: Order::Narrowest,
            budget,
        };
        for want_preferred in [true, false] {
            for class in 1..=family.nodes.len() as u32 {
                let mut partial = |lo: NumaMask, hi: NumaMask| {
                    let lo = lo.or(within);
                    if want_preferred {
                        family.preferred_between(lo, hi, class)
                    } else {
                        family.between(lo, hi, Some(class))
                    }
                };
                let mut leaf = |x: NumaMask| {
                    Ok(x.and(within) == within
                        && family.hint(x).is_some_and(|p| p || !want_preferred))
                };
                if let Some(x) = space.best(class, &mut partial, &mut leaf)? {
                    return Ok(Some(TopologyHint {
                        affinity: Some(x),
                        preferred: family.preferred(x),
                    }));
                }
            }
        }
        Ok(None)
    }
}

/// The fewest nodes of a member of `up` (kubelet's minimal hint size), by search.
pub fn fewest_nodes(nodes: &[u32], up: &Upward, budget: &Budget) -> Result<Option<u32>, Exhausted> {
    let space = Space {
        nodes,
        order: Order::Narrowest,
        budget,
    };
    for class in 1..=nodes.len() as u32 {
        let mut partial = |lo, hi| up.between(lo, hi, Some(class));
        let mut leaf = |x| Ok(up.contains(x));
        if space.best(class, &mut partial, &mut leaf)?.is_some() {
            return Ok(Some(class));
        }
    }
    Ok(None)
}

fn listed(hints: &ResourceHints) -> HintSets {
    hints
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().map(HintSet::Listed)))
        .collect()
}

fn materialise(sets: &HintSets) -> ResourceHints {
    sets.iter()
        .map(|(k, v)| (k.clone(), v.as_ref().map(HintSet::materialise)))
        .collect()
}

/// kubelet `filterProvidersHints` over hint sets: nil lists become `{any, preferred}`, lists
/// without members `{any, not preferred}`.
fn filter_sets(providers: &[HintSets]) -> Vec<HintSet> {
    let any = |preferred| {
        HintSet::Listed(vec![TopologyHint {
            affinity: None,
            preferred,
        }])
    };
    let mut all = Vec::new();
    for hints in providers {
        if hints.is_empty() {
            all.push(any(true));
            continue;
        }
        for set in hints.values() {
            match set {
                None => all.push(any(true)),
                Some(HintSet::Listed(l)) if l.is_empty() => all.push(any(false)),
                Some(HintSet::Family(f)) if f.is_empty() => all.push(any(false)),
                Some(s) => all.push(s.clone()),
            }
        }
    }
    all
}

/// kubelet `filterSingleNumaHints` over one set: `{any, preferred}` and preferred single nodes.
fn single_numa(set: &HintSet) -> HintSet {
    match set {
        HintSet::Listed(l) => HintSet::Listed(
            l.iter()
                .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                .copied()
                .collect(),
        ),
        HintSet::Family(f) => HintSet::Listed(
            f.nodes
                .iter()
                .map(|&n| NumaMask::from_ids([n]))
                .filter(|&m| f.hint(m) == Some(true))
                .map(|m| TopologyHint {
                    affinity: Some(m),
                    preferred: true,
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

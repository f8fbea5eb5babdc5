//! kubelet's `HintMerger`: normalise provider hints, walk the cross product, keep the best
//! merged hint by the kubelet's comparison rules.

use super::mask::{is_less_than, is_narrower_than};
use crate::placement::{NumaMask, ResourceHints, TopologyHint};

/// The NUMA facts the merger needs: node ids and (optionally) SLIT distances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaInfo {
    /// Node ids, ascending.
    pub nodes: Vec<u32>,
    /// `distances[i][j]`: distance from `nodes[i]` to `nodes[j]`, in `nodes` order.
    pub distances: Vec<Vec<u32>>,
}

impl NumaInfo {
    /// All nodes of the machine.
    pub fn default_mask(&self) -> NumaMask {
        NumaMask::from_ids(self.nodes.iter().copied())
    }

    /// kubelet `Narrowest`.
    pub fn narrowest(&self, a: NumaMask, b: NumaMask) -> NumaMask {
        if is_narrower_than(a, b) {
            a
        } else {
            b
        }
    }

    /// kubelet `Closest`: narrowest on different sizes, else the smaller average distance, else
    /// the numerically smaller mask. Same-size masks have the same pair count, so sums compare.
    pub fn closest(&self, a: NumaMask, b: NumaMask) -> NumaMask {
        if a.count() != b.count() {
            return self.narrowest(a, b);
        }
        let (da, db) = (self.distance_sum(a), self.distance_sum(b));
        if da == db {
            if is_less_than(a, b) {
                a
            } else {
                b
            }
        } else if da < db {
            a
        } else {
            b
        }
    }

    fn position(&self, id: u32) -> Option<usize> {
        self.nodes.iter().position(|&n| n == id)
    }

    fn distance_sum(&self, mask: NumaMask) -> u64 {
        let mut sum = 0u64;
        for i in mask.ids() {
            for j in mask.ids() {
                let d = self
                    .position(i)
                    .zip(self.position(j))
                    .and_then(|(pi, pj)| self.distances.get(pi)?.get(pj).copied())
                    .unwrap_or(0);
                sum += u64::from(d);
            }
        }
        sum
    }
}

/// kubelet `filterProvidersHints`: one hint list per (provider, resource), with nil and empty
/// lists turned into `{any, preferred}` and `{any, not preferred}`.
pub fn filter_providers_hints(providers: &[ResourceHints]) -> Vec<Vec<TopologyHint>> {
    let any = |preferred| TopologyHint {
        affinity: None,
        preferred,
    };
    let mut all = Vec::new();
    for hints in providers {
        if hints.is_empty() {
            all.push(vec![any(true)]);
            continue;
        }
        for list in hints.values() {
            match list {
                None => all.push(vec![any(true)]),
                Some(l) if l.is_empty() => all.push(vec![any(false)]),
                Some(l) => all.push(l.clone()),
            }
        }
    }
    all
}

/// kubelet `filterSingleNumaHints`: keep `{any, preferred}` and preferred single-node hints.
pub fn filter_single_numa_hints(all: Vec<Vec<TopologyHint>>) -> Vec<Vec<TopologyHint>> {
    all.into_iter()
        .map(|list| {
            list.into_iter()
                .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                .collect()
        })
        .collect()
}

/// The merger for one admission decision.
pub struct HintMerger<'a> {
    info: &'a NumaInfo,
    hints: Vec<Vec<TopologyHint>>,
    best_non_preferred_count: u32,
    prefer_closest: bool,
}

impl<'a> HintMerger<'a> {
    /// `prefer_closest` is the option already combined with "policy is not single-numa-node".
    pub fn new(info: &'a NumaInfo, hints: Vec<Vec<TopologyHint>>, prefer_closest: bool) -> Self {
        let best_non_preferred_count = hints
            .iter()
            .filter_map(|list| narrowest_hint(list))
            .map(NumaMask::count)
            .max()
            .unwrap_or(0);
        Self {
            info,
            hints,
            best_non_preferred_count,
            prefer_closest,
        }
    }

    /// The best merged hint; `{all nodes, not preferred}` when no permutation gives a non-empty mask.
    pub fn merge(&self) -> (NumaMask, bool) {
        let default = self.info.default_mask();
        let mut best: Option<(NumaMask, bool)> = None;
        let mut idx = vec![0usize; self.hints.len()];
        if self.hints.iter().all(|l| !l.is_empty()) {
            loop {
                let candidate =
                    merge_permutation(default, self.hints.iter().zip(&idx).map(|(l, &i)| l[i]));
                best = self.compare(best, candidate);
                if !advance(&mut idx, &self.hints) {
                    break;
                }
            }
        }
        best.unwrap_or((default, false))
    }

    fn compare_masks(
        &self,
        current: (NumaMask, bool),
        candidate: (NumaMask, bool),
    ) -> (NumaMask, bool) {
        if candidate.0 == current.0 {
            return current;
        }
        let best = if self.prefer_closest {
            self.info.closest(current.0, candidate.0)
        } else {
            self.info.narrowest(current.0, candidate.0)
        };
        if best == current.0 {
            current
        } else {
            candidate
        }
    }

    fn compare(
        &self,
        current: Option<(NumaMask, bool)>,
        candidate: (NumaMask, bool),
    ) -> Option<(NumaMask, bool)> {
        if candidate.0.count() == 0 {
            return current;
        }
        let Some(cur) = current else {
            return Some(candidate);
        };
        let target = self.best_non_preferred_count;
        let (cc, nc) = (cur.0.count(), candidate.0.count());
        let pick = match (cur.1, candidate.1) {
            (false, true) => candidate,
            (true, false) => cur,
            (true, true) => self.compare_masks(cur, candidate),
            (false, false) if cc > target => self.compare_masks(cur, candidate),
            (false, false) if cc == target => {
                if nc != target {
                    cur
                } else {
                    self.compare_masks(cur, candidate)
                }
            }
            (false, false) => {
                if nc > target {
                    cur
                } else if nc == target || nc > cc {
                    candidate
                } else if nc < cc {
                    cur
                } else {
                    self.compare_masks(cur, candidate)
                }
            }
        };
        Some(pick)
    }
}

/// kubelet `mergePermutation`: AND of all non-nil affinities; preferred iff every hint is
/// preferred and all non-nil affinities are equal.
fn merge_permutation(
    default: NumaMask,
    perm: impl Iterator<Item = TopologyHint>,
) -> (NumaMask, bool) {
    let mut preferred = true;
    let mut merged = default;
    let mut first: Option<NumaMask> = None;
    for hint in perm {
        if let Some(m) = hint.affinity {
            merged = merged.and(m);
            match first {
                None => first = Some(m),
                Some(f) if f != m => preferred = false,
                Some(_) => {}
            }
        }
        if !hint.preferred {
            preferred = false;
        }
    }
    (merged, preferred)
}

fn narrowest_hint(list: &[TopologyHint]) -> Option<NumaMask> {
    let mut best: Option<NumaMask> = None;
    for m in list.iter().filter_map(|h| h.affinity) {
        best = match best {
            Some(b) if !is_narrower_than(m, b) => Some(b),
            _ => Some(m),
        };
    }
    best
}

/// Odometer over the cross product, last list fastest (kubelet's recursion order).
fn advance(idx: &mut [usize], lists: &[Vec<TopologyHint>]) -> bool {
    for pos in (0..idx.len()).rev() {
        idx[pos] += 1;
        if idx[pos] < lists[pos].len() {
            return true;
        }
        idx[pos] = 0;
    }
    false
}

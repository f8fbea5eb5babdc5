//! A provider's hint list described by the rule that generates it instead of by its members.
//!
//! The CPU Manager's hints (`generateCPUTopologyHints`) are every NUMA mask holding enough
//! available CPUs (and the reusable ones' nodes): an upward-closed family. The Static Memory
//! Manager's (`calculateHints`) are the multi-node masks of unused nodes holding enough memory
//! (upward-closed among unused nodes), plus single nodes, existing groups and the masks an init
//! container left reusable memory on, each checked one by one. A `HintFamily` is that: an
//! optional upward part (`Upward`) and a short list of further members, with the provider's
//! preferred rule. `members` lists it the way the provider's enumeration would, for small
//! machines and tests.

use crate::placement::topology_manager::iterate_masks;
use crate::placement::{NumaMask, TopologyHint};

/// `{M : required ⊆ M ⊆ within, |M| ≥ min_count, Σ amounts[d] over M ≥ need[d] for every d}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upward {
    pub within: NumaMask,
    pub required: NumaMask,
    pub min_count: u32,
    /// Per dimension, per node id.
    pub amounts: Vec<[u64; 64]>,
    pub need: Vec<u64>,
}

impl Upward {
    fn sum(&self, d: usize, mask: NumaMask) -> u64 {
        mask.ids().map(|n| self.amounts[d][n as usize]).sum()
    }

    /// Exact membership.
    pub fn contains(&self, m: NumaMask) -> bool {
        m.and(self.within) == m
            && m.and(self.required) == self.required
            && m.count() >= self.min_count.max(1)
            && (0..self.need.len()).all(|d| self.sum(d, m) >= self.need[d])
    }

    /// Is there a member `M` with `lo ⊆ M ⊆ hi` (and `|M| = class` if given)? Exact without a
    /// class and with one dimension; otherwise a necessary condition (each dimension alone).
    pub fn between(&self, lo: NumaMask, hi: NumaMask, class: Option<u32>) -> bool {
        let lo = lo.or(self.required);
        let top = hi.and(self.within);
        if lo.and(top) != lo {
            return false;
        }
        let floor = self.min_count.max(1);
        let Some(c) = class else {
            return top.count() >= floor
                && (0..self.need.len()).all(|d| self.sum(d, top) >= self.need[d]);
        };
        if c < lo.count() || c > top.count() || c < floor {
            return false;
        }
        let free_slots = (c - lo.count()) as usize;
        let rest = NumaMask(top.0 & !lo.0);
        let mut vals: Vec<u64> = Vec::with_capacity(rest.count() as usize);
        (0..self.need.len()).all(|d| {
            let base = self.sum(d, lo);
            if base >= self.need[d] {
                return true;
            }
            vals.clear();
            vals.extend(rest.ids().map(|n| self.amounts[d][n as usize]));
            vals.sort_unstable_by(|a, b| b.cmp(a));
            base + vals.iter().take(free_slots).sum::<u64>() >= self.need[d]
        })
    }

    /// Exact for one dimension: is there a member of exactly `c` nodes?
    pub fn single_dimension(&self) -> bool {
        self.need.len() <= 1
    }
}

/// With align-by-socket, a hint is also preferred when it spans `min_sockets` sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketRule {
    /// Per node id: the sockets it has CPUs on (dense indices).
    pub sockets_of: Vec<(u32, Vec<usize>)>,
    pub socket_count: usize,
    pub min_sockets: usize,
}

impl SocketRule {
    fn spanned(&self, m: NumaMask) -> usize {
        let mut seen = vec![false; self.socket_count];
        for (n, ss) in &self.sockets_of {
            if m.is_set(*n) {
                for &s in ss {
                    seen[s] = true;
                }
            }
        }
        seen.iter().filter(|&&b| b).count()
    }
    pub fn aligned(&self, m: NumaMask) -> bool {
        self.spanned(m) == self.min_sockets
    }
    /// Necessary for a superset of `lo` to be aligned.
    pub fn possible(&self, lo: NumaMask) -> bool {
        self.spanned(lo) <= self.min_sockets
    }
}

/// A provider's hint list for one resource, as a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintFamily {
    /// The machine's NUMA node ids (< 64), ascending: the provider's enumeration universe.
    pub nodes: Vec<u32>,
    pub up: Option<Upward>,
    /// Further members (each already checked against the provider's full rule), ascending.
    pub listed: Vec<NumaMask>,
    /// A member is preferred when it has this many nodes ...
    pub preferred_size: u32,
    /// ... or, with align-by-socket, spans the minimal number of sockets.
    pub sockets: Option<SocketRule>,
}

impl HintFamily {
    pub fn universe(&self) -> NumaMask {
        NumaMask::from_ids(self.nodes.iter().copied())
    }

    pub fn contains(&self, m: NumaMask) -> bool {
        !m.is_empty()
            && m.and(self.universe()) == m
            && (self.listed.binary_search(&m).is_ok()
                || self.up.as_ref().is_some_and(|u| u.contains(m)))
    }

    pub fn preferred(&self, m: NumaMask) -> bool {
        m.count() == self.preferred_size || self.sockets.as_ref().is_some_and(|s| s.aligned(m))
    }

    /// `Some(preferred)` when `m` is a hint.
    pub fn hint(&self, m: NumaMask) -> Option<bool> {
        self.contains(m).then(|| self.preferred(m))
    }

    /// Is there a member `M`, `lo ⊆ M ⊆ hi` (of `class` nodes if given)? Exact without a class;
    /// with one, exact for one-dimensional upward parts and a necessary condition otherwise.
    pub fn between(&self, lo: NumaMask, hi: NumaMask, class: Option<u32>) -> bool {
        let hi = hi.and(self.universe());
        let fits =
            |m: NumaMask| m.and(lo) == lo && m.and(hi) == m && class.is_none_or(|c| m.count() == c);
        self.listed.iter().any(|&m| fits(m))
            || self.up.as_ref().is_some_and(|u| u.between(lo, hi, class))
    }

    /// Could a preferred member of `class` nodes lie between `lo` and `hi`? (Necessary.)
    pub fn preferred_between(&self, lo: NumaMask, hi: NumaMask, class: u32) -> bool {
        let size_ok =
            class == self.preferred_size || self.sockets.as_ref().is_some_and(|s| s.possible(lo));
        size_ok && self.between(lo, hi, Some(class))
    }

    pub fn is_empty(&self) -> bool {
        !self.between(NumaMask::default(), self.universe(), None)
    }

    /// Exact membership tests are cheap; `between` with a class is exact when this holds.
    pub fn exact_classes(&self) -> bool {
        self.up.as_ref().is_none_or(Upward::single_dimension)
    }

    /// The members in the provider's enumeration order (kubelet `IterateBitMasks`): 2^N work,
    /// for small machines and tests only.
    pub fn members(&self) -> Vec<TopologyHint> {
        iterate_masks(&self.nodes)
            .into_iter()
            .filter_map(|m| {
                self.hint(m).map(|preferred| TopologyHint {
                    affinity: Some(m),
                    preferred,
                })
            })
            .collect()
    }
}

/// One provider's list for one resource: spelled out, or as its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HintSet {
    Listed(Vec<TopologyHint>),
    Family(HintFamily),
}

impl HintSet {
    /// The list the provider would return (2^N work for a family).
    pub fn materialise(&self) -> Vec<TopologyHint> {
        match self {
            Self::Listed(l) => l.clone(),
            Self::Family(f) => f.members(),
        }
    }
}

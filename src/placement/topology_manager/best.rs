//! The merged best hint without walking the cross product.
//!
//! kubelet's `HintMerger` folds every permutation (one hint per list) into a best hint. The fold
//! does not depend on the order in which it meets the candidates (see docs/PERFORMANCE.md,
//! "Wide machines"), so its answer is determined by two sets of merged masks:
//! - P, the non-empty masks some permutation yields as *preferred* (every hint preferred, all
//!   non-nil affinities equal: `X` is preferred in every list without a preferred nil hint);
//! - A, the non-empty masks some permutation yields at all (`X` = the intersection of one
//!   member per list).
//!
//! If P is not empty the answer is `(min P, preferred)`; otherwise, with `T` the largest of the
//! lists' narrowest hint sizes (`best_non_preferred_count`), it is the minimum of A's masks of
//! size `T`; failing that, of A's largest size below `T`; failing that, of A's smallest size
//! above `T`. "Minimum" is kubelet `Narrowest` (numerically smallest) or, with
//! prefer-closest-numa-nodes, `Closest` (smallest distance sum, then numerically smallest).
//! Each size class is searched in that order (`search::Space`), stopping at the first hit.

use super::family::{HintFamily, HintSet};
use super::search::{Budget, Distances, Exhausted, Order, Space};
use crate::placement::{NumaMask, TopologyHint};

/// What the merge needs to know of one list.
struct List<'a> {
    set: &'a HintSet,
    all: NumaMask,
}

impl List<'_> {
    fn hints(&self) -> &[TopologyHint] {
        match self.set {
            HintSet::Listed(l) => l,
            HintSet::Family(_) => &[],
        }
    }

    fn family(&self) -> Option<&HintFamily> {
        match self.set {
            HintSet::Family(f) => Some(f),
            HintSet::Listed(_) => None,
        }
    }

    fn affinity(&self, h: &TopologyHint) -> NumaMask {
        h.affinity.unwrap_or(self.all)
    }

    fn nil_preferred(&self) -> bool {
        self.hints()
            .iter()
            .any(|h| h.affinity.is_none() && h.preferred)
    }

    fn preferred_member(&self, x: NumaMask) -> bool {
        match self.family() {
            Some(f) => f.hint(x) == Some(true),
            None => self
                .hints()
                .iter()
                .any(|h| h.preferred && h.affinity == Some(x)),
        }
    }

    fn preferred_between(&self, lo: NumaMask, hi: NumaMask, class: u32) -> bool {
        match self.family() {
            Some(f) => f.preferred_between(lo, hi, class),
            None => self.hints().iter().any(|h| {
                h.preferred
                    && h.affinity
                        .is_some_and(|m| m.and(lo) == lo && m.and(hi) == m && m.count() == class)
            }),
        }
    }

    fn member(&self, x: NumaMask) -> bool {
        match self.family() {
            Some(f) => f.contains(x),
            None => self.hints().iter().any(|h| self.affinity(h) == x),
        }
    }

    /// Exact: a member `M` with `lo ⊆ M ⊆ hi`.
    fn between(&self, lo: NumaMask, hi: NumaMask) -> bool {
        match self.family() {
            Some(f) => f.between(lo, hi, None),
            None => self.hints().iter().any(|h| {
                let m = self.affinity(h);
                m.and(lo) == lo && m.and(hi) == m
            }),
        }
    }
}

/// The merger's answer for `lists` (already filtered: no list is empty of members unless the
/// policy's filter made it so).
pub(super) fn merge(
    nodes: &[u32],
    distances: Option<&Distances>,
    lists: &[HintSet],
    budget: &Budget,
) -> Result<(NumaMask, bool), Exhausted> {
    let all = NumaMask::from_ids(nodes.iter().copied());
    if lists.is_empty() {
        return Ok((all, true));
    }
    let lists: Vec<List<'_>> = lists.iter().map(|set| List { set, all }).collect();
    for l in &lists {
        if let HintSet::Listed(hints) = l.set {
            if hints.is_empty() {
                return Ok((all, false));
            }
            if hints
                .iter()
                .any(|h| h.affinity.is_some_and(|m| m.and(all) != m))
            {
                // Affinities beyond the machine: not this search's model.
                return Err(Exhausted);
            }
        }
    }
    let order = distances.map_or(Order::Narrowest, Order::Closest);
    let space = Space {
        nodes,
        order,
        budget,
    };
    if let Some(x) = best_preferred(&space, &lists, all)? {
        return Ok((x, true));
    }
    let target = lists
        .iter()
        .map(|l| narrowest_count(&space, l))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
    let n = nodes.len() as u32;
    let below = (1..target.min(n + 1)).rev();
    let above = (target.max(1)..=n).filter(|&c| c != target);
    let classes = (target >= 1 && target <= n)
        .then_some(target)
        .into_iter()
        .chain(below)
        .chain(above);
    for class in classes {
        if let Some(x) = best_achievable(&space, &lists, all, class)? {
            return Ok((x, false));
        }
    }
    Ok((all, false))
}

fn best_preferred(
    space: &Space<'_>,
    lists: &[List<'_>],
    all: NumaMask,
) -> Result<Option<NumaMask>, Exhausted> {
    let all_nil = lists.iter().all(List::nil_preferred);
    for class in 1..=space.nodes.len() as u32 {
        let mut partial = |lo: NumaMask, hi: NumaMask| {
            let each = lists
                .iter()
                .all(|l| l.nil_preferred() || l.preferred_between(lo, hi, class));
            each && (!all_nil
                || hi == all
                || lists.iter().any(|l| l.preferred_between(lo, hi, class)))
        };
        let mut leaf = |x: NumaMask| {
            Ok(lists
                .iter()
                .all(|l| l.nil_preferred() || l.preferred_member(x))
                && (lists.iter().any(|l| l.preferred_member(x)) || (x == all && all_nil)))
        };
        if let Some(x) = space.best(class, &mut partial, &mut leaf)? {
            return Ok(Some(x));
        }
    }
    Ok(None)
}

/// The size of the list's narrowest hint (kubelet's `narrowestHint`), none without affinities.
fn narrowest_count(space: &Space<'_>, list: &List<'_>) -> Result<Option<u32>, Exhausted> {
    let Some(f) = list.family() else {
        return Ok(list
            .hints()
            .iter()
            .filter_map(|h| h.affinity)
            .map(NumaMask::count)
            .min());
    };
    let narrow = Space {
        nodes: space.nodes,
        order: Order::Narrowest,
        budget: space.budget,
    };
    for class in 1..=space.nodes.len() as u32 {
        let mut partial = |lo, hi| f.between(lo, hi, Some(class));
        let mut leaf = |x| Ok(f.contains(x));
        if narrow.best(class, &mut partial, &mut leaf)?.is_some() {
            return Ok(Some(class));
        }
    }
    Ok(None)
}

fn best_achievable(
    space: &Space<'_>,
    lists: &[List<'_>],
    all: NumaMask,
    class: u32,
) -> Result<Option<NumaMask>, Exhausted> {
    let mut partial = |lo: NumaMask, _hi: NumaMask| lists.iter().all(|l| l.between(lo, all));
    let mut leaf = |x: NumaMask| achievable(lists, all, x, space.budget);
    space.best(class, &mut partial, &mut leaf)
}

/// One way a list can take part in a permutation that yields `x`.
#[derive(Clone, Copy)]
enum Shape<'a> {
    /// A member mask.
    Fixed(NumaMask),
    /// A member of the family's upward part (as wide as the exclusions allow).
    Up(&'a super::family::Upward),
}

/// Is `x` the intersection of one member per list?
fn achievable(
    lists: &[List<'_>],
    all: NumaMask,
    x: NumaMask,
    budget: &Budget,
) -> Result<bool, Exhausted> {
    if !lists.iter().all(|l| l.between(x, all)) {
        return Ok(false);
    }
    if lists.iter().any(|l| l.member(x)) {
        return Ok(true);
    }
    let shapes: Vec<Vec<Shape<'_>>> = lists
        .iter()
        .map(|l| {
            let mut s: Vec<Shape<'_>> = match l.family() {
                Some(f) => f
                    .listed
                    .iter()
                    .filter(|&&m| m.and(x) == x)
                    .map(|&m| Shape::Fixed(m))
                    .collect(),
                None => l
                    .hints()
                    .iter()
                    .map(|h| l.affinity(h))
                    .filter(|m| m.and(x) == x)
                    .map(Shape::Fixed)
                    .collect(),
            };
            if let Some(up) = l.family().and_then(|f| f.up.as_ref()) {
                if up.between(x, all, None) {
                    s.push(Shape::Up(up));
                }
            }
            s
        })
        .collect();
    let mut chosen = Vec::with_capacity(lists.len());
    choose(&shapes, &mut chosen, all, x, budget)
}

fn choose<'a>(
    shapes: &[Vec<Shape<'a>>],
    chosen: &mut Vec<Shape<'a>>,
    all: NumaMask,
    x: NumaMask,
    budget: &Budget,
) -> Result<bool, Exhausted> {
    budget.spend()?;
    let Some(options) = shapes.get(chosen.len()) else {
        return cover(chosen, all, x, budget);
    };
    for &s in options {
        chosen.push(s);
        let ok = choose(shapes, chosen, all, x, budget)?;
        chosen.pop();
        if ok {
            return Ok(true);
        }
    }
    Ok(false)
}

/// With the shapes chosen, can every node outside `x` be left out by some list?
fn cover(
    chosen: &[Shape<'_>],
    all: NumaMask,
    x: NumaMask,
    budget: &Budget,
) -> Result<bool, Exhausted> {
    let mut left = NumaMask(all.0 & !x.0);
    let mut ups = Vec::new();
    for s in chosen {
        match *s {
            Shape::Fixed(m) => left = NumaMask(left.0 & m.0),
            Shape::Up(u) => {
                left = NumaMask(left.0 & u.within.0);
                ups.push(u);
            }
        }
    }
    let nodes: Vec<u32> = left.ids().collect();
    let mut dropped = vec![NumaMask::default(); ups.len()];
    assign(&nodes, &ups, &mut dropped, all, x, budget)
}

fn assign(
    nodes: &[u32],
    ups: &[&super::family::Upward],
    dropped: &mut [NumaMask],
    all: NumaMask,
    x: NumaMask,
    budget: &Budget,
) -> Result<bool, Exhausted> {
    budget.spend()?;
    let Some((&v, rest)) = nodes.split_first() else {
        return Ok(true);
    };
    let bit = NumaMask::from_ids([v]);
    for (i, up) in ups.iter().enumerate() {
        if up.required.is_set(v) {
            continue;
        }
        // Identical lists that have dropped the same nodes are interchangeable.
        if ups[..i]
            .iter()
            .zip(&dropped[..i])
            .any(|(u, d)| *d == dropped[i] && **u == **up)
        {
            continue;
        }
        let next = dropped[i].or(bit);
        if !up.between(x, NumaMask(all.0 & !next.0), None) {
            continue;
        }
        let before = dropped[i];
        dropped[i] = next;
        let ok = assign(rest, ups, dropped, all, x, budget)?;
        dropped[i] = before;
        if ok {
            return Ok(true);
        }
    }
    Ok(false)
}

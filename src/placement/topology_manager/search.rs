//! Search over the NUMA masks of one size, in the Topology Manager's order, with pruning and a
//! work budget: the numerically smallest first (kubelet `Narrowest` among equal sizes), or the
//! smallest distance sum, then the numerically smallest (`Closest`).

use std::cell::Cell;

use super::merge::NumaInfo;
use crate::placement::NumaMask;

/// The search ran out of its work budget: the decision is refused, never approximated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

/// Work allowance for one decision, in search steps.
#[derive(Debug)]
pub struct Budget(Cell<u64>);

impl Budget {
    /// About 0.1 s of search on one core; the common cases take a few thousand steps.
    pub const DEFAULT: u64 = 4_000_000;

    pub fn new(steps: u64) -> Self {
        Self(Cell::new(steps))
    }

    pub fn spend(&self) -> Result<(), Exhausted> {
        let left = self.0.get();
        if left == 0 {
            return Err(Exhausted);
        }
        self.0.set(left - 1);
        Ok(())
    }
}

/// Distances by node id (`NumaInfo::closest`'s sums).
pub(super) struct Distances(Box<[[u32; 64]; 64]>);

impl Distances {
    pub(super) fn new(info: &NumaInfo) -> Self {
        let mut t = Box::new([[0u32; 64]; 64]);
        for (i, &a) in info.nodes.iter().enumerate() {
            for (j, &b) in info.nodes.iter().enumerate() {
                if a < 64 && b < 64 {
                    t[a as usize][b as usize] = info
                        .distances
                        .get(i)
                        .and_then(|r| r.get(j))
                        .copied()
                        .unwrap_or(0);
                }
            }
        }
        Self(t)
    }

    pub(super) fn sum(&self, m: NumaMask) -> u64 {
        m.ids()
            .map(|a| {
                m.ids()
                    .map(|b| u64::from(self.0[a as usize][b as usize]))
                    .sum::<u64>()
            })
            .sum()
    }

    /// What adding `v` to `m` adds to `sum(m)`.
    fn added(&self, m: NumaMask, v: u32) -> u64 {
        let row = &self.0[v as usize];
        let col: u64 = m
            .ids()
            .map(|u| u64::from(self.0[u as usize][v as usize]))
            .sum();
        col + m.ids().map(|u| u64::from(row[u as usize])).sum::<u64>() + u64::from(row[v as usize])
    }
}

/// Which order a size class is searched in.
#[derive(Clone, Copy)]
pub(super) enum Order<'a> {
    Narrowest,
    Closest(&'a Distances),
}

/// The masks of the machine, searched one size class at a time.
pub(super) struct Space<'a> {
    /// Node ids (< 64), ascending.
    pub(super) nodes: &'a [u32],
    pub(super) order: Order<'a>,
    pub(super) budget: &'a Budget,
}

/// Accepts partial states `(lo, hi)`: the mask will hold `lo` and lie within `hi`.
pub(super) type Partial<'f> = dyn FnMut(NumaMask, NumaMask) -> bool + 'f;
/// Decides a complete mask.
pub(super) type Leaf<'f> = dyn FnMut(NumaMask) -> Result<bool, Exhausted> + 'f;

struct Found {
    mask: NumaMask,
    sum: u64,
}

impl Space<'_> {
    /// The best mask of `class` nodes that `leaf` accepts, in this space's order.
    pub(super) fn best(
        &self,
        class: u32,
        partial: &mut Partial<'_>,
        leaf: &mut Leaf<'_>,
    ) -> Result<Option<NumaMask>, Exhausted> {
        let all = NumaMask::from_ids(self.nodes.iter().copied());
        let mut found = None;
        self.walk(
            self.nodes.len(),
            NumaMask::default(),
            all,
            0,
            class,
            partial,
            leaf,
            &mut found,
        )?;
        Ok(found.map(|f: Found| f.mask))
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        undecided: usize,
        lo: NumaMask,
        hi: NumaMask,
        lo_sum: u64,
        class: u32,
        partial: &mut Partial<'_>,
        leaf: &mut Leaf<'_>,
        found: &mut Option<Found>,
    ) -> Result<(), Exhausted> {
        self.budget.spend()?;
        if lo.count() > class || hi.count() < class {
            return Ok(());
        }
        if let (Order::Closest(_), Some(f)) = (self.order, found.as_ref()) {
            // Distances are not negative: the sum only grows; an equal sum loses on the mask.
            if lo_sum >= f.sum {
                return Ok(());
            }
        }
        if !partial(lo, hi) {
            return Ok(());
        }
        if lo.count() == class || hi.count() == class {
            let x = if lo.count() == class { lo } else { hi };
            if !leaf(x)? {
                return Ok(());
            }
            let sum = match self.order {
                Order::Narrowest => 0,
                Order::Closest(d) => d.sum(x),
            };
            // Masks come in ascending numeric order: only a strictly smaller sum wins.
            if found.as_ref().is_none_or(|f| sum < f.sum) {
                *found = Some(Found { mask: x, sum });
            }
            return Ok(());
        }
        let v = self.nodes[undecided - 1];
        let bit = NumaMask::from_ids([v]);
        self.walk(
            undecided - 1,
            lo,
            NumaMask(hi.0 & !bit.0),
            lo_sum,
            class,
            partial,
            leaf,
            found,
        )?;
        if found.is_some() && matches!(self.order, Order::Narrowest) {
            return Ok(());
        }
        let add = match self.order {
            Order::Narrowest => 0,
            Order::Closest(d) => d.added(lo, v),
        };
        self.walk(
            undecided - 1,
            lo.or(bit),
            hi,
            lo_sum + add,
            class,
            partial,
            leaf,
            found,
        )
    }
}

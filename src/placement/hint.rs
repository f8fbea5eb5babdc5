//! NUMA affinity masks and topology hints, shared by every hint provider and the Topology Manager.

use std::fmt;

/// A set of NUMA node ids (0..64), kubelet's `bitmask.BitMask`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct NumaMask(pub u64);

impl NumaMask {
    /// A mask of the given node ids. Ids of 64 and above are ignored (kubelet caps at 64).
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Self {
        Self(
            ids.into_iter()
                .filter(|&id| id < 64)
                .fold(0, |m, id| m | (1 << id)),
        )
    }
    pub fn is_set(self, id: u32) -> bool {
        id < 64 && self.0 & (1 << id) != 0
    }
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }
    pub fn or(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    /// Node ids, ascending.
    pub fn ids(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |&i| self.is_set(i))
    }
}

impl fmt::Debug for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.ids()).finish()
    }
}

/// A hint from one provider for one resource: a NUMA affinity (None = any) and whether it is preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyHint {
    pub affinity: Option<NumaMask>,
    pub preferred: bool,
}

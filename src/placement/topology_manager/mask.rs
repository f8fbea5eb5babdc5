//! Bitmask facts the Topology Manager relies on (kubelet's `bitmask` package): ordering by
//! narrowness, subset iteration order, and the all-nodes default mask.

use crate::placement::NumaMask;

/// kubelet `IsNarrowerThan`: fewer bits, on a tie the numerically smaller mask.
pub fn is_narrower_than(a: NumaMask, b: NumaMask) -> bool {
    if a.count() == b.count() {
        is_less_than(a, b)
    } else {
        a.count() < b.count()
    }
}

/// kubelet `IsLessThan`: the numerically smaller mask (lower NUMA ids win).
pub fn is_less_than(a: NumaMask, b: NumaMask) -> bool {
    a.0 < b.0
}

/// Every non-empty subset of `ids` in kubelet's `IterateBitMasks` order: by size 1..n, and
/// lexicographically (by position in the sorted id list) within one size.
pub fn iterate_masks(ids: &[u32]) -> Vec<NumaMask> {
    let mut sorted: Vec<u32> = ids.iter().copied().filter(|&i| i < 64).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = Vec::new();
    for size in 1..=sorted.len() {
        let mut pick = Vec::with_capacity(size);
        combinations(&sorted, size, 0, &mut pick, &mut out);
    }
    out
}

fn combinations(
    ids: &[u32],
    size: usize,
    start: usize,
    pick: &mut Vec<u32>,
    out: &mut Vec<NumaMask>,
) {
    if pick.len() == size {
        out.push(NumaMask::from_ids(pick.iter().copied()));
        return;
    }
    for i in start..ids.len() {
        pick.push(ids[i]);
        combinations(ids, size, i + 1, pick, out);
        pick.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrower_prefers_fewer_bits_then_lower_ids() {
        let m = |ids: &[u32]| NumaMask::from_ids(ids.iter().copied());
        assert!(is_narrower_than(m(&[3]), m(&[0, 1])));
        assert!(is_narrower_than(m(&[0, 3]), m(&[1, 2])) == (m(&[0, 3]).0 < m(&[1, 2]).0));
        assert!(is_narrower_than(m(&[0]), m(&[1])));
        assert!(!is_narrower_than(m(&[1]), m(&[0])));
    }

    #[test]
    fn subsets_come_by_size_then_lexicographic() {
        let got: Vec<Vec<u32>> = iterate_masks(&[2, 0, 1])
            .iter()
            .map(|m| m.ids().collect())
            .collect();
        let want: Vec<Vec<u32>> = vec![
            vec![0],
            vec![1],
            vec![2],
            vec![0, 1],
            vec![0, 2],
            vec![1, 2],
            vec![0, 1, 2],
        ];
        assert_eq!(got, want);
    }
}

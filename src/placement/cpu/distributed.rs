//! kubelet's `takeByTopologyNUMADistributed` (`distribute-cpus-across-numa`): spread a request
//! evenly over the fewest NUMA nodes that can hold it, in groups of `cpuGroupSize`, choosing the
//! combination (and the nodes for the remainder) with the lowest standard deviation of free CPUs.
//!
//! Mirrors `cpu_assignment.go` @08715a58, including the `alignBySocket` argument.

use std::collections::BTreeMap;

use super::accumulator::{take_packed, Accumulator, SortingStrategy};
use super::details::CpuTopology;
use super::CpuError;
use crate::cpuset::CpuSet;

/// `takeByTopologyNUMADistributed`.
pub fn take_distributed(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
    group: usize,
    strategy: SortingStrategy,
    align_by_socket: bool,
) -> Result<CpuSet, CpuError> {
    let group = group.max(1);
    if !n.is_multiple_of(group) {
        return take_packed(topo, available, n, strategy, false);
    }
    let mut acc = Accumulator::new(topo, available, n, strategy);
    if acc.is_satisfied() {
        return Ok(acc.result);
    }
    if acc.is_failed() {
        return Err(CpuError::NotEnoughCpus {
            requested: n,
            available: available.len(),
        });
    }
    let numas = acc.sort_numa_nodes();
    let (min_k, max_k) = range_numa_nodes(&acc, group);
    let free_in = |acc: &Accumulator<'_>, numa: u32| acc.free.cpus_in_numa_nodes(&[numa]).len();

    for k in min_k..=max_k {
        let mut best: Option<Choice> = None;
        for_each_combination(&numas, k, &mut |combo| {
            if let Some(b) = &best {
                if b.balance == 0.0 && (!align_by_socket || b.in_one_socket) {
                    return false;
                }
            }
            let Some(mut choice) = evaluate(&acc, &numas, combo, n, group, align_by_socket) else {
                return true;
            };
            if align_by_socket {
                choice.in_one_socket = topo.details().are_numa_nodes_in_same_socket(combo);
            }
            let better = match &best {
                None => choice.balance < f64::MAX || (align_by_socket && choice.in_one_socket),
                Some(b) if align_by_socket && choice.in_one_socket != b.in_one_socket => {
                    choice.in_one_socket
                }
                Some(b) => choice.balance < b.balance,
            };
            if better {
                best = Some(choice);
            }
            true
        });
        let Some(best) = best else { continue };

        let mut distribution = (n / best.combo.len() / group) * group;
        for &numa in &best.combo {
            distribution = distribution.min(free_in(&acc, numa) / group * group);
        }
        for &numa in &best.combo {
            let cpus = acc.free.cpus_in_numa_nodes(&[numa]);
            let taken = take_packed(topo, &cpus, distribution, strategy, false).unwrap_or_default();
            acc.take(&taken);
        }
        let mut remainder = n as isize - (distribution * best.combo.len()) as isize;
        while remainder > 0 {
            let mut progressed = false;
            for &numa in &best.remainder {
                if remainder == 0 {
                    break;
                }
                let cpus = acc.free.cpus_in_numa_nodes(&[numa]);
                if cpus.len() < group {
                    continue;
                }
                let taken = take_packed(topo, &cpus, group, strategy, false).unwrap_or_default();
                acc.take(&taken);
                remainder -= group as isize;
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        if acc.needed > 0 {
            return Err(CpuError::AccountingNotEnough {
                remaining: acc.needed,
            });
        }
        if acc.needed < 0 {
            return Err(CpuError::AccountingTooMany {
                remaining: acc.needed,
            });
        }
        return Ok(acc.result);
    }
    take_packed(topo, available, n, strategy, false)
}

/// One scored NUMA combination.
struct Choice {
    combo: Vec<u32>,
    remainder: Vec<u32>,
    balance: f64,
    in_one_socket: bool,
}

/// Scores `combo`, or `None` when it cannot hold the request.
fn evaluate(
    acc: &Accumulator<'_>,
    numas: &[u32],
    combo: &[u32],
    n: usize,
    group: usize,
    align_by_socket: bool,
) -> Option<Choice> {
    let free = |numa: u32| acc.free.cpus_in_numa_nodes(&[numa]).len();
    if acc.free.cpus_in_numa_nodes(combo).len() < n {
        return None;
    }
    let groups: usize = combo.iter().map(|&m| free(m) / group).sum();
    if groups * group < n {
        return None;
    }
    let mut distribution = (n / combo.len() / group) * group;
    if align_by_socket {
        for &numa in combo {
            distribution = distribution.min(free(numa) / group * group);
        }
    }
    if combo.iter().any(|&m| free(m) < distribution) {
        return None;
    }
    let mut after: BTreeMap<u32, isize> = numas.iter().map(|&m| (m, free(m) as isize)).collect();
    for numa in combo {
        if let Some(v) = after.get_mut(numa) {
            *v -= distribution as isize;
        }
    }
    let remainder = n as isize - (distribution * combo.len()) as isize;
    let remainder_combo: Vec<u32> = combo
        .iter()
        .copied()
        .filter(|m| after.get(m).copied().unwrap_or(0) >= group as isize)
        .collect();
    let mut best_balance = f64::MAX;
    let mut best_remainder = Vec::new();
    if remainder == 0 {
        best_balance = standard_deviation(after.values().copied());
    }
    let mut k = remainder_combo.len();
    while remainder > 0 && k >= 1 {
        for_each_combination(&remainder_combo, k, &mut |subset| {
            let mut left = remainder;
            let mut local = after.clone();
            let sum: isize = subset.iter().map(|m| local[m]).sum();
            if sum < left {
                return true;
            }
            while left > 0 {
                let mut progressed = false;
                for m in subset {
                    if left == 0 {
                        break;
                    }
                    let v = local.entry(*m).or_default();
                    if *v < group as isize {
                        continue;
                    }
                    *v -= group as isize;
                    left -= group as isize;
                    progressed = true;
                }
                if !progressed {
                    break;
                }
            }
            let balance = standard_deviation(local.values().copied());
            if balance < best_balance {
                best_balance = balance;
                best_remainder = subset.to_vec();
            }
            true
        });
        k -= 1;
    }
    Some(Choice {
        combo: combo.to_vec(),
        remainder: best_remainder,
        balance: best_balance,
        in_one_socket: false,
    })
}

/// `rangeNUMANodesNeededToSatisfy`.
fn range_numa_nodes(acc: &Accumulator<'_>, group: usize) -> (usize, usize) {
    let details = acc.topo.details();
    let num_numa = details.numa_nodes().len().max(1);
    let available_numa = acc.free.numa_nodes().len();
    let num_cpus = details.cpus().len();
    let groups = (num_cpus.saturating_sub(1)) / group + 1;
    let groups_per_numa = (groups - 1) / num_numa + 1;
    let needed = acc.needed.max(1) as usize;
    let groups_needed = (needed - 1) / group + 1;
    let min = (groups_needed - 1) / groups_per_numa + 1;
    (min, groups_needed.min(available_numa))
}

/// Visits the k-subsets of `items` in lexicographic index order; `f` returns false to stop.
pub(crate) fn for_each_combination(items: &[u32], k: usize, f: &mut dyn FnMut(&[u32]) -> bool) {
    fn helper(
        items: &[u32],
        k: usize,
        start: usize,
        acc: &mut Vec<u32>,
        f: &mut dyn FnMut(&[u32]) -> bool,
    ) -> bool {
        if k == 0 {
            return f(acc);
        }
        let mut i = start;
        while i + k <= items.len() {
            acc.push(items[i]);
            let go_on = helper(items, k - 1, i + 1, acc, f);
            acc.pop();
            if !go_on {
                return false;
            }
            i += 1;
        }
        true
    }
    if k >= 1 {
        helper(items, k, 0, &mut Vec::with_capacity(k), f);
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Population standard deviation, mean and result rounded to 3 decimals (kubelet's).
fn standard_deviation(xs: impl Iterator<Item = isize> + Clone) -> f64 {
    let len = xs.clone().count() as f64;
    let mean = round3(xs.clone().map(|x| x as f64).sum::<f64>() / len);
    let sum: f64 = xs.map(|x| (x as f64 - mean) * (x as f64 - mean)).sum();
    round3((sum / len).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_in_lexicographic_order() {
        let mut seen = Vec::new();
        for_each_combination(&[0, 1, 2, 3], 2, &mut |c| {
            seen.push(c.to_vec());
            true
        });
        assert_eq!(
            seen,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
    }

    #[test]
    fn standard_deviation_rounds_like_kubelet() {
        assert_eq!(
            standard_deviation([2isize, 4, 4, 4, 5, 5, 7, 9].into_iter()),
            2.0
        );
        assert_eq!(standard_deviation([1isize, 2].into_iter()), 0.5);
        assert_eq!(standard_deviation([0isize, 0, 1].into_iter()), 0.471);
    }
}

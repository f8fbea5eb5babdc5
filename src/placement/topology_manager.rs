//! The Topology Manager: merges the hint providers' NUMA hints into one affinity per pod or
//! container and decides admission by policy (none, best-effort, restricted, single-numa-node).
//!
//! It owns only the merge and the admit rule. It never allocates; the `node` module drives the
//! scopes (container / pod) and calls the providers' allocate functions with the chosen hint.

mod mask;
mod merge;

pub use mask::{is_less_than, is_narrower_than, iterate_masks};
pub use merge::{filter_providers_hints, filter_single_numa_hints, HintMerger, NumaInfo};

use super::config::{TopologyOptions, TopologyPolicy};
use super::{ResourceHints, TopologyHint};
use crate::topology::Topology;

/// Why the Topology Manager cannot run on this machine / with these options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyManagerError {
    #[error("the minimum value of \"max-allowable-numa-nodes\" should not be less than 8")]
    MaxAllowableTooSmall(u32),
    #[error("unsupported on machines with more than {max} NUMA Nodes")]
    TooManyNumaNodes { max: u32, found: usize },
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

    /// kubelet `Policy.Merge`: the best hint and whether the pod may be admitted with it.
    pub fn merge(&self, providers: &[ResourceHints]) -> (TopologyHint, bool) {
        let filtered = filter_providers_hints(providers);
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
}

#[cfg(test)]
mod tests;

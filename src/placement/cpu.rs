//! The CPU Manager `static` policy, decision for decision as kubelet 1.37 with Pod-Level Resource
//! Managers: CPU topology queries (`details`), the allocator (`accumulator`, `distributed`),
//! reserved CPUs (`reserved`), and the [`CpuManager`] state machine (`manager`, `hints`, `pod`,
//! `state`) that implements [`HintProvider`](super::HintProvider).
//!
//! Owns CPU placement state (shared pool, container assignments, pod bubbles). Never does I/O,
//! never reads a clock; the same inputs always give the same CPUs.
//!
//! Sources: `cpu_assignment.go` and `topology/topology.go` at kubernetes 08715a58 (the allocator,
//! verified against every row of `cpu_assignment_test.go` there), a PLRM-era `policy_static.go`,
//! and the restore tests of kubernetes#141041 for pod-level re-admission.
//!
//! Header counters: [`CpuTopology::new`] derives them from the CPU map as kubelet's `Discover`
//! does; [`CpuTopology::with_counts`] sets them by hand, which only kubelet's test fixtures need
//! (two fixtures have headers that disagree with their CPU maps).
//!
//! Deliberate differences from kubelet, all in failure handling, never in which CPUs are chosen:
//! * an empty reservation is accepted (kubelet refuses to start the static policy); callers warn;
//! * `allocate` honours an existing assignment before the `full-pcpus-only` check, so replaying
//!   admission after a restore cannot fail on CPUs the container already holds;
//! * `allocate_pod` is all-or-nothing (kubelet could keep a bubble if partitioning failed, which
//!   validation makes impossible);
//! * the distributed allocator stops a remainder loop that makes no progress (kubelet would spin);
//! * a stale bubble that overlaps the shared pool is dropped without touching the shared pool.
//!
//! Uncertain: which release passes `align-by-socket` into the distributed allocator (here: passed,
//! as the 08715a58 signature allows). kubelet falls back to the socket id as the uncore id when a
//! core has no split L3; `Topology::cpus[].uncore` must follow that convention for
//! `prefer-align-cpus-by-uncorecache` to choose as kubelet does on real machines.

mod accumulator;
mod adopt;
mod details;
mod distributed;
mod hints;
mod manager;
mod pod;
mod reserved;
mod state;

pub use accumulator::{take_packed, SortingStrategy};
pub use adopt::AdoptCpuError;
pub use details::{CpuDetails, CpuTopology, HeaderCounts, Level};
pub use distributed::take_distributed;
pub use manager::{CpuManager, CpuUndo};
pub use reserved::reserve_cpus;
pub use state::{ContainerAssignment, CpuState};

use super::config::{CpuPolicyOptions, TopologyPolicy};

/// Why the CPU manager could not start, restore or allocate. Messages are kubelet's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available}")]
    NotEnoughCpus { requested: usize, available: usize },
    #[error("failed to allocate cpus")]
    FailedToAllocate,
    #[error("accounting error, not enough CPUs allocated, remaining: {remaining}")]
    AccountingNotEnough { remaining: isize },
    #[error("accounting error, too many CPUs allocated, remaining: {remaining}")]
    AccountingTooMany { remaining: isize },
    #[error("[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal {wanted})")]
    ReserveMismatch { reserved: String, wanted: usize },
    #[error("[cpumanager] unable to build the reserved physical CPUs from the reserved set: unknown CPU ID: {cpu}")]
    UnknownReservedCpu { cpu: u32 },
    #[error("static policy options {0} and {1} can not be used at the same time")]
    IncompatibleOptions(&'static str, &'static str),
    #[error("Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option")]
    AlignBySocketSingleNuma,
    #[error("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA")]
    AlignBySocketHardware,
    #[error("default cpuset cannot be empty")]
    EmptyDefaultSet,
    #[error(
        "some of strictly reserved cpus: {reserved:?} are present in defaultCpuSet: {default:?}"
    )]
    StrictReservedInDefault { reserved: String, default: String },
    #[error("not all reserved cpus: {reserved:?} are present in defaultCpuSet: {default:?}")]
    ReservedNotInDefault { reserved: String, default: String },
    #[error("pod: {pod}, container: {container} cpuset: {cpus:?} overlaps with default cpuset {default:?}")]
    Overlap {
        pod: String,
        container: String,
        cpus: String,
        default: String,
    },
    #[error("current set of available CPUs {all:?} doesn't match with CPUs in state {known:?}")]
    StateMismatch { all: String, known: String },
}

/// `NewStaticPolicyOptions` pair checks and `ValidateStaticPolicyOptions`, in kubelet's order.
pub fn validate_options(
    opts: &CpuPolicyOptions,
    topo: &CpuTopology,
    topology_policy: TopologyPolicy,
) -> Result<(), CpuError> {
    const FULL: &str = "full-pcpus-only";
    const NUMA: &str = "distribute-cpus-across-numa";
    const CORES: &str = "distribute-cpus-across-cores";
    const UNCORE: &str = "prefer-align-cpus-by-uncorecache";
    let pairs = [
        (
            opts.full_pcpus_only,
            opts.distribute_cpus_across_cores,
            FULL,
            CORES,
        ),
        (
            opts.distribute_cpus_across_numa,
            opts.distribute_cpus_across_cores,
            NUMA,
            CORES,
        ),
        (
            opts.prefer_align_cpus_by_uncore_cache,
            opts.distribute_cpus_across_cores,
            UNCORE,
            CORES,
        ),
        (
            opts.prefer_align_cpus_by_uncore_cache,
            opts.distribute_cpus_across_numa,
            UNCORE,
            NUMA,
        ),
    ];
    if let Some(&(_, _, a, b)) = pairs.iter().find(|(x, y, _, _)| *x && *y) {
        return Err(CpuError::IncompatibleOptions(a, b));
    }
    if opts.align_by_socket {
        if topology_policy == TopologyPolicy::SingleNumaNode {
            return Err(CpuError::AlignBySocketSingleNuma);
        }
        let c = topo.counts();
        if c.num_sockets > c.num_numa_nodes {
            return Err(CpuError::AlignBySocketHardware);
        }
    }
    Ok(())
}

/// The policy's `takeByTopology`: distributed with `distribute-cpus-across-numa` (group size
/// `CPUsPerCore` with `full-pcpus-only`, else 1), packed otherwise; spread order with
/// `distribute-cpus-across-cores`; uncore step only for packed.
pub fn take_by_topology(
    topo: &CpuTopology,
    opts: &CpuPolicyOptions,
    available: &crate::cpuset::CpuSet,
    n: usize,
) -> Result<crate::cpuset::CpuSet, CpuError> {
    let strategy = if opts.distribute_cpus_across_cores {
        SortingStrategy::Spread
    } else {
        SortingStrategy::Packed
    };
    if opts.distribute_cpus_across_numa {
        let group = if opts.full_pcpus_only {
            topo.cpus_per_core()
        } else {
            1
        };
        return take_distributed(topo, available, n, group, strategy, opts.align_by_socket);
    }
    take_packed(
        topo,
        available,
        n,
        strategy,
        opts.prefer_align_cpus_by_uncore_cache,
    )
}

#[cfg(test)]
mod tests;

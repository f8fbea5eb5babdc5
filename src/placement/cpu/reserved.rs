//! The reserved CPUs: `reservedSystemCPUs` verbatim, or `ceil(milli / 1000)` CPUs picked with the
//! policy's own `takeByTopology` on the whole machine (kubelet's `NewStaticPolicy`), and their
//! hyper-thread siblings (`reservedPhysicalCPUs`, used by `full-pcpus-only`).
//!
//! An empty reservation is accepted here (kubelet refuses it); callers warn.

use super::details::CpuTopology;
use super::{take_by_topology, CpuError};
use crate::cpuset::CpuSet;
use crate::placement::config::{CpuPolicyOptions, ReservedCpus};

/// Returns `(reserved, reserved_physical)`.
pub fn reserve_cpus(
    topo: &CpuTopology,
    opts: &CpuPolicyOptions,
    reserved: &ReservedCpus,
) -> Result<(CpuSet, CpuSet), CpuError> {
    let (set, wanted) = match reserved {
        ReservedCpus::Explicit(list) if !list.is_empty() => (list.clone(), list.len()),
        ReservedCpus::Explicit(_) => (CpuSet::new(), 0),
        ReservedCpus::Count { milli } => {
            let wanted = milli.div_ceil(1000) as usize;
            let all = topo.details().cpus();
            let set = take_by_topology(topo, opts, &all, wanted).unwrap_or_default();
            (set, wanted)
        }
    };
    if set.len() != wanted {
        return Err(CpuError::ReserveMismatch {
            reserved: set.to_string(),
            wanted,
        });
    }
    let mut physical = CpuSet::new();
    for cpu in set.iter() {
        let info = topo
            .details()
            .info(cpu)
            .ok_or(CpuError::UnknownReservedCpu { cpu })?;
        physical = physical.union(&topo.details().cpus_in_cores(&[info.core]));
    }
    Ok((set, physical))
}

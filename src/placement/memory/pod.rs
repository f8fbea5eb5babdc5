//! The PLRM pod bubble for memory (kubelet static policy `AllocatePod` and
//! `validatePodScopeResources`): one mask for the pod, blocks per container, the shared remainder.

use std::collections::BTreeMap;

use super::alloc::{blocks_of, charge, choose_mask};
use super::hints::{self, Requests};
use super::{qos, Block, MemoryManager};
use crate::placement::config::FeatureGates;
use crate::placement::{AdmissionError, ContainerRole, PodSpec, TopologyHint};

/// kubelet `validatePodScopeResources` (memory): the "empty shared pool" rules.
pub(super) fn validate_pod_scope(pod: &PodSpec, gates: FeatureGates) -> Result<(), String> {
    let total = hints::pod_requests(pod, gates);
    let mut shared_long_running = false;
    let mut long_running = Requests::new();
    for c in &pod.init_containers {
        let reqs = hints::container_requests(pod, c, gates);
        if c.role != ContainerRole::Sidecar {
            if !reqs.is_empty() {
                for (name, &pod_total) in &total {
                    let pool = pod_total.wrapping_sub(long_running.get(name).copied().unwrap_or(0));
                    let want = reqs.get(name).copied().unwrap_or(0);
                    if want > pool {
                        return Err(format!(
                            "pod rejected, largest exclusive init container requests {want} of {name}, but only {pool} available"
                        ));
                    }
                }
            } else {
                for (name, &pool) in &total {
                    if long_running.get(name).copied().unwrap_or(0) >= pool {
                        return Err(format!(
                            "pod rejected, pod has shared init containers but no {name} available for them"
                        ));
                    }
                }
            }
            continue;
        }
        if reqs.is_empty() {
            shared_long_running = true;
            continue;
        }
        for (name, v) in reqs {
            *long_running.entry(name).or_insert(0) += v;
        }
    }
    for c in &pod.containers {
        let reqs = hints::container_requests(pod, c, gates);
        if reqs.is_empty() {
            shared_long_running = true;
            continue;
        }
        for (name, v) in reqs {
            *long_running.entry(name).or_insert(0) += v;
        }
    }
    if shared_long_running {
        for (name, &pool) in &total {
            if long_running.get(name).copied().unwrap_or(0) >= pool {
                return Err(format!(
                    "pod rejected, sum of exclusive container {name} requests equals pod budget, leaving no memory for shared containers"
                ));
            }
        }
    }
    Ok(())
}

/// kubelet static policy `AllocatePod` (PLRM): one bubble, blocks per container.
pub(super) fn allocate_pod(
    mm: &mut MemoryManager,
    pod: &PodSpec,
    hint: &TopologyHint,
) -> Result<(), AdmissionError> {
    if !qos::is_guaranteed(pod, mm.gates) {
        return Ok(());
    }
    let total = hints::pod_requests(pod, mm.gates);
    validate_pod_scope(pod, mm.gates)
        .map_err(|message| AdmissionError::EmptyPodSharedPool { message })?;
    let mask = choose_mask(mm, &pod.uid, &total, hint)?;
    let mut exclusive: BTreeMap<&str, Vec<Block>> = BTreeMap::new();
    let mut sidecar = Requests::new();
    let pool_minus = |total: &Requests, used: &Requests| -> Requests {
        total
            .iter()
            .map(|(k, &v)| (k.clone(), v.wrapping_sub(used.get(k).copied().unwrap_or(0))))
            .collect()
    };
    for c in &pod.init_containers {
        let reqs = hints::container_requests(pod, c, mm.gates);
        if reqs.is_empty() {
            if c.role == ContainerRole::Sidecar {
                continue;
            }
            let mut runnable = pool_minus(&total, &sidecar);
            runnable.retain(|_, v| *v > 0);
            exclusive.insert(&c.name, blocks_of(mask, &runnable));
            continue;
        }
        let mut nonzero = reqs.clone();
        nonzero.retain(|_, v| *v > 0);
        exclusive.insert(&c.name, blocks_of(mask, &nonzero));
        if c.role == ContainerRole::Sidecar {
            for (k, v) in reqs {
                *sidecar.entry(k).or_insert(0) += v;
            }
        }
    }
    let mut app_pool = pool_minus(&total, &sidecar);
    for c in &pod.containers {
        let mut reqs = hints::container_requests(pod, c, mm.gates);
        if reqs.is_empty() {
            continue;
        }
        reqs.retain(|_, v| *v > 0);
        for (k, v) in &reqs {
            if let Some(p) = app_pool.get_mut(k) {
                *p = p.wrapping_sub(*v);
            }
        }
        exclusive.insert(&c.name, blocks_of(mask, &reqs));
    }
    app_pool.retain(|_, v| *v > 0);
    let shared = blocks_of(mask, &app_pool);
    mm.state
        .pods
        .insert(pod.uid.clone(), blocks_of(mask, &total));
    for (name, &size) in &total {
        charge(&mut mm.state.machine, mask, name, size);
    }
    let entry = mm.state.containers.entry(pod.uid.clone()).or_default();
    for c in pod.init_containers.iter().chain(&pod.containers) {
        let blocks = exclusive
            .get(c.name.as_str())
            .cloned()
            .unwrap_or_else(|| shared.clone());
        entry.insert(c.name.clone(), blocks);
    }
    Ok(())
}

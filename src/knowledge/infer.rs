//! Inference from CRI requests alone (no pod spec available). Pure functions; the rules and the
//! cases they cannot tell apart are written down in docs/pod-knowledge.md.

use crate::placement::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};

/// The CFS/memory part of CRI `LinuxContainerResources` that inference reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CriResources {
    pub cpu_period: i64,
    pub cpu_quota: i64,
    pub cpu_shares: i64,
    pub memory_limit_in_bytes: i64,
}

/// Milli-CPU request behind `cpu_shares` (inverse of kubelet's `MilliCPUToShares`): the smallest
/// milli value that maps to these shares. `None` for the "no request" value 2 (and below).
pub fn request_milli_from_shares(shares: i64) -> Option<u64> {
    if shares <= 2 {
        return None;
    }
    let shares = shares as u64;
    Some((shares * 1000).div_ceil(1024))
}

/// Milli-CPU limit behind `cpu_quota`/`cpu_period` (inverse of `MilliCPUToQuota`).
/// `None` when there is no quota (0 or -1) or no period.
pub fn limit_milli_from_quota(quota: i64, period: i64) -> Option<u64> {
    (quota > 0 && period > 0).then(|| (quota as u64 * 1000) / period as u64)
}

/// Requests and limits as far as CRI reveals them. CRI carries no memory request: the memory
/// limit stands in for it (rule M1 in docs/pod-knowledge.md).
pub fn resources(cri: &CriResources) -> Resources {
    let memory = (cri.memory_limit_in_bytes > 0).then_some(cri.memory_limit_in_bytes as u64);
    Resources {
        requests: ResourceList {
            cpu_milli: request_milli_from_shares(cri.cpu_shares),
            memory,
            ..Default::default()
        },
        limits: ResourceList {
            cpu_milli: limit_milli_from_quota(cri.cpu_quota, cri.cpu_period),
            memory,
            ..Default::default()
        },
    }
}

/// A pod as RunPodSandbox shows it: the sandbox's `linux.resources` become the pod budget
/// (rule P1); the container list is filled in as CreateContainer calls arrive.
pub fn pod_from_sandbox(uid: &str, namespace: &str, name: &str, sandbox: &CriResources) -> PodSpec {
    let budget = resources(sandbox);
    let has_budget = budget.requests.cpu_milli.is_some() || budget.limits.memory.is_some();
    PodSpec {
        uid: uid.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        resources: has_budget.then_some(budget),
        init_containers: Vec::new(),
        containers: Vec::new(),
    }
}

/// A container as CreateContainer shows it (rule C1: every container is an app container;
/// rule C2: a container whose resources are exactly the pod budget's limits declared none of
/// its own, since the kubelet fills in the pod limits for such containers).
pub fn container(pod: &PodSpec, name: &str, cri: &CriResources) -> ContainerSpec {
    let mut own = resources(cri);
    if let Some(budget) = &pod.resources {
        if own.limits.cpu_milli == budget.limits.cpu_milli
            && own.limits.memory == budget.limits.memory
        {
            own = Resources::default();
        }
    }
    ContainerSpec {
        name: name.to_string(),
        role: ContainerRole::App,
        resources: own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cri(shares: i64, quota: i64, mem: i64) -> CriResources {
        CriResources {
            cpu_period: 100_000,
            cpu_quota: quota,
            cpu_shares: shares,
            memory_limit_in_bytes: mem,
        }
    }

    #[test]
    fn shares_invert_kubelet_formula_for_every_milli_value() {
        for milli in 3u64..20_000 {
            let shares = (milli * 1024 / 1000).max(2) as i64;
            let back = request_milli_from_shares(shares).unwrap();
            assert_eq!(back * 1024 / 1000, shares as u64, "milli {milli}");
            assert!(back <= milli, "milli {milli} came back as {back}");
        }
        assert_eq!(request_milli_from_shares(2048), Some(2000));
        assert_eq!(request_milli_from_shares(2), None);
    }

    #[test]
    fn quota_to_limit() {
        assert_eq!(limit_milli_from_quota(400_000, 100_000), Some(4000));
        assert_eq!(limit_milli_from_quota(150_000, 100_000), Some(1500));
        assert_eq!(limit_milli_from_quota(-1, 100_000), None);
        assert_eq!(limit_milli_from_quota(0, 100_000), None);
    }

    #[test]
    fn spec_case_b_container_without_resources_is_shared() {
        // Guaranteed PLR pod 4 CPU / 4Gi; a container with no resources arrives with the pod limit.
        let pod = pod_from_sandbox("u", "ns", "p", &cri(4096, 400_000, 4 << 30));
        assert_eq!(
            pod.resources.as_ref().unwrap().requests.cpu_milli,
            Some(4000)
        );
        let c = container(&pod, "helper", &cri(4096, 400_000, 4 << 30));
        assert_eq!(c.resources, Resources::default());
        let main = container(&pod, "main", &cri(2048, 200_000, 2 << 30));
        assert_eq!(main.resources.requests.cpu_milli, Some(2000));
        assert_eq!(main.resources.limits.cpu_milli, Some(2000));
        assert_eq!(main.resources.requests.memory, Some(2 << 30));
    }

    #[test]
    fn best_effort_sandbox_has_no_budget() {
        let pod = pod_from_sandbox("u", "ns", "p", &cri(2, 0, 0));
        assert!(pod.resources.is_none());
    }
}

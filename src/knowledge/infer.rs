//! Inference from CRI requests alone (no pod spec available). Pure functions; the rules and the
//! cases they cannot tell apart are written down in docs/pod-knowledge.md.

use crate::placement::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};

/// The largest `cpu_shares` the kernel takes (`MAX_SHARES`, 2^18) and the kubelet sends.
pub const MAX_SHARES: i64 = 1 << 18;
/// The longest CFS period the kernel takes: 1 s, in microseconds.
pub const MAX_PERIOD: i64 = 1_000_000;
/// The largest CFS quota the kernel takes (`max_cfs_runtime`, 2^44 − 1 µs).
pub const MAX_QUOTA: i64 = (1 << 44) - 1;
/// The largest memory limit inference reads: 2^52 bytes (4 PiB, the x86-64 and arm64
/// physical address limit), so that sums over any pod's containers cannot overflow.
pub const MAX_MEMORY: i64 = 1 << 52;

/// The CFS/memory part of CRI `LinuxContainerResources` that inference reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CriResources {
    pub cpu_period: i64,
    pub cpu_quota: i64,
    pub cpu_shares: i64,
    pub memory_limit_in_bytes: i64,
}

/// CRI values inference refuses to read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferError {
    /// A value no kubelet sends and no kernel accepts.
    #[error("{at}.{field}: {value} is out of range: at most {max} ({why})")]
    OutOfRange {
        /// Where the resources are in the request, e.g. `config.linux.resources`.
        at: &'static str,
        field: &'static str,
        value: i64,
        max: i64,
        why: &'static str,
    },
}

impl CriResources {
    /// Refuses values beyond what the kernel accepts (inference would overflow on them);
    /// `at` names where the resources sit in the request.
    pub fn check(&self, at: &'static str) -> Result<(), InferError> {
        let limits: [(&'static str, i64, i64, &'static str); 4] = [
            (
                "cpu_shares",
                self.cpu_shares,
                MAX_SHARES,
                "the kernel's MAX_SHARES",
            ),
            (
                "cpu_period",
                self.cpu_period,
                MAX_PERIOD,
                "1s, the kernel's longest CFS period",
            ),
            (
                "cpu_quota",
                self.cpu_quota,
                MAX_QUOTA,
                "the kernel's max_cfs_runtime in microseconds",
            ),
            (
                "memory_limit_in_bytes",
                self.memory_limit_in_bytes,
                MAX_MEMORY,
                "4 PiB, more than any machine can address",
            ),
        ];
        for (field, value, max, why) in limits {
            if value > max {
                return Err(InferError::OutOfRange {
                    at,
                    field,
                    value,
                    max,
                    why,
                });
            }
        }
        Ok(())
    }
}

/// Milli-CPU request behind `cpu_shares` (inverse of kubelet's `MilliCPUToShares`): the smallest
/// milli value that maps to these shares. `None` for the "no request" value 2 (and below).
pub fn request_milli_from_shares(shares: i64) -> Option<u64> {
    if shares <= 2 {
        return None;
    }
    let shares = shares.min(MAX_SHARES) as u64;
    Some((shares * 1000).div_ceil(1024))
}

/// Milli-CPU limit behind `cpu_quota`/`cpu_period` (inverse of `MilliCPUToQuota`).
/// `None` when there is no quota (0 or -1) or no period.
pub fn limit_milli_from_quota(quota: i64, period: i64) -> Option<u64> {
    (quota > 0 && period > 0).then(|| {
        // Checked values (see `CriResources::check`) never saturate.
        (quota.min(MAX_QUOTA) as u64).saturating_mul(1000) / period as u64
    })
}

/// Requests and limits as far as CRI reveals them. CRI carries no memory request: the memory
/// limit stands in for it (rule M1 in docs/pod-knowledge.md).
pub fn resources(cri: &CriResources) -> Resources {
    let memory =
        (cri.memory_limit_in_bytes > 0).then_some(cri.memory_limit_in_bytes.min(MAX_MEMORY) as u64);
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

/// `MilliCPUToShares`: the `cpu_shares` the kubelet sends for a CPU request (2 without one).
pub fn shares_from_milli(milli: Option<u64>) -> i64 {
    milli.map_or(2, |m| {
        ((m.min(u64::MAX / 1024) * 1024 / 1000) as i64).clamp(2, MAX_SHARES)
    })
}

/// `MilliCPUToQuota`: the `cpu_quota` the kubelet sends for a CPU limit and period.
pub fn quota_from_milli(milli: u64, period: i64) -> i64 {
    ((milli.min(MAX_QUOTA as u64) as i64).saturating_mul(period) / 1000).max(1000)
}

/// The `cpu_shares` the kubelet reads back from a cgroup v2 pod cgroup it wrote `shares` to:
/// it writes `cpu.weight` = `getCPUWeight(shares)` and reads `cpuWeightToCPUShares(weight)`
/// (v1.37.2 pkg/kubelet/cm/cgroup_manager_linux.go:269-277, cgroup_v2_manager_linux.go:174-176),
/// which loses up to ~26 shares (2048 comes back as 2046). `UpdatePodSandboxResources` carries
/// that value for the part of the pod cgroup a call does not change (`doPodResizeAction` merges
/// the new values over what it read from the cgroup).
pub fn shares_through_cgroup_v2(shares: i64) -> i64 {
    let shares = shares.clamp(2, MAX_SHARES);
    let weight = if shares >= 262_144 {
        10_000
    } else {
        1 + ((shares - 2) * 9_999) / 262_142
    };
    ((weight - 1) * 262_142) / 9_999 + 2
}

/// `current` resources with what an UpdateContainerResources (or UpdatePodSandboxResources)
/// says differently (in-place resize). A field the request leaves unset (0) or sends as the
/// kubelet would for `current` keeps its value, so a request that only restates the resources
/// changes nothing and CRI's rounding never moves a request: the CPU request from `cpu_shares`
/// (the current request's shares, or those shares as the kubelet reads them back from a cgroup
/// v2 pod cgroup, [`shares_through_cgroup_v2`], say it did not move), the CPU limit from
/// `cpu_quota`/`cpu_period` (no quota: the limit stays), the memory limit from
/// `memory_limit_in_bytes`, and with it the memory request where it equalled the limit (CRI
/// carries no memory request; Guaranteed containers have them equal).
pub fn resized(current: &Resources, cri: &CriResources) -> Resources {
    let mut new = current.clone();
    let shares = shares_from_milli(current.requests.cpu_milli);
    if cri.cpu_shares > 0
        && cri.cpu_shares != shares
        && cri.cpu_shares != shares_through_cgroup_v2(shares)
    {
        new.requests.cpu_milli = request_milli_from_shares(cri.cpu_shares);
    }
    if cri.cpu_quota > 0 && cri.cpu_period > 0 {
        let same = current
            .limits
            .cpu_milli
            .is_some_and(|m| quota_from_milli(m, cri.cpu_period) == cri.cpu_quota);
        if !same {
            new.limits.cpu_milli = limit_milli_from_quota(cri.cpu_quota, cri.cpu_period);
        }
    }
    if cri.memory_limit_in_bytes > 0 {
        let limit = cri.memory_limit_in_bytes.min(MAX_MEMORY) as u64;
        if current.limits.memory != Some(limit) {
            if current.requests.memory == current.limits.memory {
                new.requests.memory = Some(limit);
            }
            new.limits.memory = Some(limit);
        }
    }
    new
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
/// its own, since the kubelet fills in the pod limits for such containers; rule C4: unless it
/// holds devices (`holds_devices`: device plugin devices in CRI or the kubelet's PodResources),
/// which only a container's own resources can ask for, so it declared them).
pub fn container(
    pod: &PodSpec,
    name: &str,
    cri: &CriResources,
    holds_devices: bool,
) -> ContainerSpec {
    let mut own = resources(cri);
    if let Some(budget) = pod.resources.as_ref().filter(|_| !holds_devices) {
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
        let c = container(&pod, "helper", &cri(4096, 400_000, 4 << 30), false);
        assert_eq!(c.resources, Resources::default());
        let main = container(&pod, "main", &cri(2048, 200_000, 2 << 30), false);
        assert_eq!(main.resources.requests.cpu_milli, Some(2000));
        assert_eq!(main.resources.limits.cpu_milli, Some(2000));
        assert_eq!(main.resources.requests.memory, Some(2 << 30));
    }

    /// Kubelet v1.34.4 without the Pods API, sample device plugin: a classic Guaranteed pod
    /// with one container of 1 CPU, 128Mi and one `example.com/gpu`. The sandbox's resources
    /// (the sum of the containers) equal the container's, so C2 alone took it for a container
    /// without resources of its own and put it in the pod shared pool, without its exclusive
    /// CPU. A container holding devices asked for them itself (device requests exist only in a
    /// container's own resources): it declared its own resources (C4), and C3 makes it eligible
    /// for an exclusive slice.
    #[test]
    fn rule_c4_a_container_holding_devices_declared_its_own_resources() {
        let sandbox = cri(1024, 100_000, 128 << 20);
        let pod = pod_from_sandbox("u", "default", "gpu", &sandbox);
        let app = container(&pod, "app", &sandbox, true);
        assert_eq!(app.resources.requests.cpu_milli, Some(1000));
        assert_eq!(app.resources.limits.cpu_milli, Some(1000));
        assert_eq!(app.resources.requests.memory, Some(128 << 20));
        // The same container without devices is still read by C2.
        let plain = container(&pod, "app", &sandbox, false);
        assert_eq!(plain.resources, Resources::default());
    }

    #[test]
    fn values_beyond_the_kernel_are_refused_naming_the_field() {
        let ok = cri(262_144, 100_000_000, 1 << 40);
        assert_eq!(ok.check("config.linux.resources"), Ok(()));
        for (edit, field) in [
            (
                (|c: &mut CriResources| c.cpu_shares = 1 << 62) as fn(&mut CriResources),
                "cpu_shares",
            ),
            (|c| c.cpu_quota = i64::MAX, "cpu_quota"),
            (|c| c.cpu_period = 1 << 62, "cpu_period"),
            (
                |c| c.memory_limit_in_bytes = i64::MAX,
                "memory_limit_in_bytes",
            ),
        ] {
            let mut c = ok;
            edit(&mut c);
            let err = c.check("config.linux.resources").unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("config.linux.resources.{field}: ")),
                "{err}"
            );
            // Unchecked values still never overflow.
            let _ = resources(&c);
        }
    }

    #[test]
    fn resized_changes_only_what_the_request_says_differently() {
        let two = resources(&cri(2048, 200_000, 2 << 30));
        // The same values, or nothing set: no change.
        assert_eq!(resized(&two, &cri(2048, 200_000, 2 << 30)), two);
        assert_eq!(resized(&two, &CriResources::default()), two);
        // A grow to 4 CPUs and 4Gi.
        let four = resized(&two, &cri(4096, 400_000, 4 << 30));
        assert_eq!(four.requests.cpu_milli, Some(4000));
        assert_eq!(four.limits.cpu_milli, Some(4000));
        assert_eq!(four.requests.memory, Some(4 << 30));
        assert_eq!(four.limits.memory, Some(4 << 30));
        // The memory pass: new memory, the CPU values as they are.
        let mem = resized(&two, &cri(2048, 200_000, 3 << 30));
        assert_eq!(mem.requests.cpu_milli, Some(2000));
        assert_eq!(mem.requests.memory, Some(3 << 30));
        // A request the shares round down (1500m → 1536 shares) stays as the spec has it.
        let mut odd = two.clone();
        odd.requests.cpu_milli = Some(1501);
        assert_eq!(
            resized(&odd, &cri(shares_from_milli(Some(1501)), 200_000, 2 << 30)),
            odd
        );
        // A burstable memory request is not the limit: only the limit moves.
        let mut burst = two.clone();
        burst.requests.memory = Some(1 << 30);
        let b = resized(&burst, &cri(2048, 200_000, 3 << 30));
        assert_eq!(
            (b.requests.memory, b.limits.memory),
            (Some(1 << 30), Some(3 << 30))
        );
        // No quota in the request: the limit stays.
        assert_eq!(resized(&two, &cri(2048, -1, 2 << 30)), two);
    }

    #[test]
    fn shares_read_back_from_a_cgroup_v2_pod_cgroup_do_not_move_the_request() {
        // The kubelet's cgroup v2 round trip (weight 79 for 2048 shares, read back as 2046;
        // seen in the 2s guest: the limit pass of a pod-level grow 2 -> 3 CPUs carried 2046).
        assert_eq!(shares_through_cgroup_v2(2048), 2046);
        assert_eq!(shares_through_cgroup_v2(3072), 3069);
        assert_eq!(shares_through_cgroup_v2(2), 2);
        assert_eq!(shares_through_cgroup_v2(262_144), 262_144);
        for milli in (10u64..64_000).step_by(7) {
            let s = shares_from_milli(Some(milli));
            let back = shares_through_cgroup_v2(s);
            assert!(back <= s && s - back <= 27, "{milli}m: {s} -> {back}");
        }
        let two = resources(&cri(2048, 200_000, 128 << 20));
        // The limit pass of a grow to 3 CPUs: new quota, the shares read back from cpu.weight.
        let limit_pass = resized(&two, &cri(2046, 300_000, 128 << 20));
        assert_eq!(
            limit_pass.requests.cpu_milli,
            Some(2000),
            "the request did not move"
        );
        assert_eq!(limit_pass.limits.cpu_milli, Some(3000));
        // The memory pass: new memory, the CPU as read back.
        let mem = resized(&two, &cri(2046, 200_000, 192 << 20));
        assert_eq!(mem.requests.cpu_milli, Some(2000));
        assert_eq!(mem.limits.cpu_milli, Some(2000));
        assert_eq!(mem.limits.memory, Some(192 << 20));
        // The request pass of a shrink carries the new shares exactly: they move the request.
        let three = resources(&cri(3072, 300_000, 128 << 20));
        let shrink = resized(&three, &cri(2048, 300_000, 128 << 20));
        assert_eq!(shrink.requests.cpu_milli, Some(2000));
    }

    #[test]
    fn kubelet_formulas_round_trip_through_inference() {
        for milli in [1000u64, 1500, 2000, 4000, 64_000] {
            assert_eq!(
                request_milli_from_shares(shares_from_milli(Some(milli))),
                Some(milli)
            );
            assert_eq!(
                limit_milli_from_quota(quota_from_milli(milli, 100_000), 100_000),
                Some(milli)
            );
        }
        assert_eq!(shares_from_milli(None), 2);
    }

    #[test]
    fn best_effort_sandbox_has_no_budget() {
        let pod = pod_from_sandbox("u", "ns", "p", &cri(2, 0, 0));
        assert!(pod.resources.is_none());
    }
}

use std::path::PathBuf;

use super::*;
use crate::cgroup::Version;
use crate::cpuset::CpuSet;

fn set(list: &str) -> CpuSet {
    CpuSet::parse(list).unwrap()
}

/// numa-shim's decision for an exclusive slice on node 1: CPUs 2-3, mems 1, quota lifted.
fn want() -> CpusetUpdate {
    CpusetUpdate {
        container_id: "c1".into(),
        cpus: set("2-3"),
        mems: Some("1".into()),
        cpu_quota: Some(-1),
    }
}

/// The kernel applied exactly that.
fn applied() -> Reading {
    Reading {
        version: Version::V1,
        cpuset_dir: PathBuf::from("/sys/fs/cgroup/cpuset/kubepods/pod1/c1"),
        cpus: set("2-3"),
        mems: set("1"),
        cfs_quota: -1,
        cpus_allowed: set("2-3"),
    }
}

#[test]
fn nothing_drifted_when_the_kernel_has_the_decision() {
    assert_eq!(drifts(&want(), &applied()), []);
}

#[test]
fn changed_cpus_drift() {
    let found = Reading {
        cpus: set("0-3"),
        ..applied()
    };
    assert_eq!(drifts(&want(), &found), [Drift::Cpus]);
}

#[test]
fn changed_mems_drift() {
    let found = Reading {
        mems: set("0"),
        ..applied()
    };
    assert_eq!(drifts(&want(), &found), [Drift::Mems]);
    let found = Reading {
        mems: set("0-1"),
        ..applied()
    };
    assert_eq!(drifts(&want(), &found), [Drift::Mems]);
}

#[test]
fn mems_are_compared_as_sets_not_as_text() {
    // The kubelet's way of writing them ("0,1") and the kernel's ("0-1") are the same nodes.
    let want = CpusetUpdate {
        mems: Some("0,1".into()),
        ..want()
    };
    let found = Reading {
        mems: set("0-1"),
        ..applied()
    };
    assert_eq!(drifts(&want, &found), []);
}

#[test]
fn mems_numa_shim_did_not_set_are_not_its_to_restore() {
    let want = CpusetUpdate {
        mems: None,
        ..want()
    };
    let found = Reading {
        mems: set("0-1"),
        ..applied()
    };
    assert_eq!(drifts(&want, &found), []);
}

#[test]
fn a_quota_put_on_a_lifted_slice_drifts() {
    for quota in [100_000, 1_000, 50_000_000] {
        let found = Reading {
            cfs_quota: quota,
            ..applied()
        };
        assert_eq!(drifts(&want(), &found), [Drift::Quota], "quota {quota}");
    }
}

#[test]
fn the_kubelets_quota_is_not_numa_shims_to_restore() {
    // A container in a shared pool keeps the kubelet's quota, whatever it becomes.
    let want = CpusetUpdate {
        cpu_quota: None,
        ..want()
    };
    for quota in [-1, 150_000] {
        let found = Reading {
            cfs_quota: quota,
            ..applied()
        };
        assert_eq!(drifts(&want, &found), [], "quota {quota}");
    }
}

#[test]
fn every_drift_is_named_in_order() {
    let found = Reading {
        cpus: set("0-7"),
        mems: set("0"),
        cfs_quota: 200_000,
        ..applied()
    };
    let drifted = drifts(&want(), &found);
    assert_eq!(drifted, [Drift::Cpus, Drift::Mems, Drift::Quota]);
    let fields: Vec<&str> = drifted.iter().map(|d| d.field()).collect();
    assert_eq!(fields, ["cpuset.cpus", "cpuset.mems", "cfs_quota"]);
    let resources: Vec<ResourceName> = drifted.iter().map(|d| d.resource()).collect();
    assert_eq!(
        resources,
        [ResourceName::Cpu, ResourceName::Memory, ResourceName::Cpu]
    );
}

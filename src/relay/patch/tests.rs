use std::collections::HashMap;

use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::proto::cri::v1 as cri;

fn resources() -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 200_000,
        cpu_shares: 2048,
        memory_limit_in_bytes: 1 << 30,
        oom_score_adj: -997,
        cpuset_cpus: "0-3".into(),
        cpuset_mems: "0".into(),
        unified: HashMap::from([("memory.oom.group".into(), "1".into())]),
        ..Default::default()
    }
}

fn create_request() -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: "sb1".into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 2,
            }),
            annotations: HashMap::from([("a".into(), "1".into())]),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(resources()),
                security_context: None,
            }),
            ..Default::default()
        }),
        sandbox_config: None,
    }
}

fn patch(cpus: &str) -> Patch {
    Patch {
        resources: ResourcesPatch {
            cpuset_cpus: Some(cpus.into()),
            cpu_quota: Some(-1),
            ..Default::default()
        },
        annotations: [("a".to_string(), "2".to_string()), ("b".into(), "3".into())].into(),
    }
}

fn apply(method: Method, original: &[u8], patch: &Patch) -> Vec<u8> {
    let mut bytes = original.to_vec();
    bytes.extend(encode(method, patch));
    bytes
}

#[test]
fn create_container_patch_changes_only_patched_fields() {
    let original = create_request().encode_to_vec();
    let patched = cri::CreateContainerRequest::decode(
        &apply(Method::CreateContainer, &original, &patch("4-5"))[..],
    )
    .unwrap();
    let mut expected = create_request();
    let config = expected.config.as_mut().unwrap();
    config.annotations.insert("a".into(), "2".into());
    config.annotations.insert("b".into(), "3".into());
    let res = config.linux.as_mut().unwrap().resources.as_mut().unwrap();
    res.cpuset_cpus = "4-5".into();
    res.cpu_quota = -1;
    assert_eq!(patched, expected);
}

#[test]
fn run_pod_sandbox_patch_lands_in_sandbox_resources() {
    let original = cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            hostname: "h".into(),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: "kubepods".into(),
                resources: Some(resources()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: "runc".into(),
    };
    let bytes = apply(
        Method::RunPodSandbox,
        &original.encode_to_vec(),
        &patch("7"),
    );
    let patched = cri::RunPodSandboxRequest::decode(&bytes[..]).unwrap();
    let config = patched.config.unwrap();
    let linux = config.linux.unwrap();
    assert_eq!(linux.cgroup_parent, "kubepods");
    let res = linux.resources.unwrap();
    assert_eq!(
        (res.cpuset_cpus.as_str(), res.cpu_quota, res.cpu_shares),
        ("7", -1, 2048)
    );
    assert_eq!(config.annotations.get("b").map(String::as_str), Some("3"));
    assert_eq!(patched.runtime_handler, "runc");
}

#[test]
fn update_patch_creates_linux_when_absent() {
    let original = cri::UpdateContainerResourcesRequest {
        container_id: "c1".into(),
        ..Default::default()
    };
    let p = Patch {
        resources: ResourcesPatch {
            cpuset_mems: Some("1".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let bytes = apply(
        Method::UpdateContainerResources,
        &original.encode_to_vec(),
        &p,
    );
    let patched = cri::UpdateContainerResourcesRequest::decode(&bytes[..]).unwrap();
    assert_eq!(patched.container_id, "c1");
    assert_eq!(patched.linux.unwrap().cpuset_mems, "1");
}

#[test]
fn explicit_empty_string_clears_a_field() {
    let p = Patch {
        resources: ResourcesPatch {
            cpuset_cpus: Some(String::new()),
            ..Default::default()
        },
        ..Default::default()
    };
    let bytes = apply(
        Method::CreateContainer,
        &create_request().encode_to_vec(),
        &p,
    );
    let patched = cri::CreateContainerRequest::decode(&bytes[..]).unwrap();
    let res = patched.config.unwrap().linux.unwrap().resources.unwrap();
    assert_eq!(res.cpuset_cpus, "");
    assert_eq!(res.cpuset_mems, "0");
}

#[test]
fn empty_patch_and_observed_methods_append_nothing() {
    for m in Method::ALL {
        assert!(encode(m, &Patch::default()).is_empty(), "{m:?}");
    }
    assert!(encode(Method::StopContainer, &patch("1")).is_empty());
    assert!(Patch::default().is_empty());
    assert!(!patch("1").is_empty());
}

#[test]
fn unknown_fields_survive_as_a_byte_prefix() {
    // An unknown top-level field 99 and an unknown field 50 inside ContainerConfig.
    let mut original = create_request().encode_to_vec();
    prost::encoding::string::encode(99, &"future".to_string(), &mut original);
    let mut inner = Vec::new();
    prost::encoding::int64::encode(50, &42, &mut inner);
    original.extend(nest(field::CREATE_CONFIG, &inner));
    let patched = apply(Method::CreateContainer, &original, &patch("1"));
    assert!(patched.starts_with(&original));
    let decoded = cri::CreateContainerRequest::decode(&patched[..]).unwrap();
    assert_eq!(
        decoded
            .config
            .unwrap()
            .linux
            .unwrap()
            .resources
            .unwrap()
            .cpuset_cpus,
        "1"
    );
}

proptest! {
    #[test]
    fn any_resources_patch_merges_as_last_wins(
        period in proptest::option::of(any::<i64>()),
        quota in proptest::option::of(any::<i64>()),
        shares in proptest::option::of(any::<i64>()),
        cpus in proptest::option::of("[0-9,-]{0,12}"),
        mems in proptest::option::of("[0-9,]{0,6}"),
    ) {
        let p = Patch {
            resources: ResourcesPatch {
                cpu_period: period,
                cpu_quota: quota,
                cpu_shares: shares,
                cpuset_cpus: cpus.clone(),
                cpuset_mems: mems.clone(),
            },
            annotations: Default::default(),
        };
        let bytes = apply(Method::UpdateContainerResources, &cri::UpdateContainerResourcesRequest {
            container_id: "c".into(),
            linux: Some(resources()),
            ..Default::default()
        }.encode_to_vec(), &p);
        let got = cri::UpdateContainerResourcesRequest::decode(&bytes[..]).unwrap().linux.unwrap();
        let base = resources();
        prop_assert_eq!(got.cpu_period, period.unwrap_or(base.cpu_period));
        prop_assert_eq!(got.cpu_quota, quota.unwrap_or(base.cpu_quota));
        prop_assert_eq!(got.cpu_shares, shares.unwrap_or(base.cpu_shares));
        prop_assert_eq!(got.cpuset_cpus, cpus.unwrap_or(base.cpuset_cpus));
        prop_assert_eq!(got.cpuset_mems, mems.unwrap_or(base.cpuset_mems));
        prop_assert_eq!(got.memory_limit_in_bytes, base.memory_limit_in_bytes);
        prop_assert_eq!(got.unified, base.unified);
    }
}

//! Devices and dynamic resources from the kubelet's own PodResources socket: a fake kubelet
//! (the real v1 protocol on a unix socket) answers devices, dynamic resources and its own —
//! wrong — CPU ids; numa-shim merges the first two per pod and container and keeps its CPUs and
//! memory. Without a kubelet, the answers come without devices.

use numa_shim::testing::podresources::kubelet;
use numa_shim::testing::podresources::registry as support;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubelet::{FakeKubelet, Running};
use numa_shim::proto::podresources::v1 as pr;
use support::*;

fn gpu() -> pr::ContainerDevices {
    pr::ContainerDevices {
        resource_name: "vendor.com/gpu".into(),
        device_ids: vec!["gpu-0".into(), "gpu-3".into()],
        topology: Some(pr::TopologyInfo {
            nodes: vec![pr::NumaNode { id: 1 }],
        }),
    }
}

fn claim() -> pr::DynamicResource {
    pr::DynamicResource {
        claim_name: "nic-claim".into(),
        claim_namespace: "ns".into(),
        claim_resources: vec![pr::ClaimResource {
            cdi_devices: vec![pr::CdiDevice {
                name: "vendor.com/nic=vf-7".into(),
            }],
            driver_name: "nic.vendor.com".into(),
            pool_name: "node-a".into(),
            device_name: "vf-7".into(),
            share_id: Some("share-1".into()),
        }],
    }
}

/// The kubelet's view: pod a's `excl` has a GPU, `pool` a claim; CPU ids and memory that numa-shim
/// must not take; a pod numa-shim does not know.
fn kubelet_pod_a() -> pr::PodResources {
    pr::PodResources {
        name: "name-a".into(),
        namespace: "ns".into(),
        containers: vec![
            pr::ContainerResources {
                name: "excl".into(),
                devices: vec![gpu()],
                cpu_ids: vec![99, 100],
                memory: vec![pr::ContainerMemory {
                    memory_type: "memory".into(),
                    size: 1,
                    topology: None,
                }],
                dynamic_resources: vec![],
            },
            pr::ContainerResources {
                name: "pool".into(),
                dynamic_resources: vec![claim()],
                ..Default::default()
            },
        ],
        cpu_ids: vec![98],
        memory: vec![],
    }
}

/// The fake kubelet's answers: List with a pod numa-shim does not know and pod a; its
/// allocatable GPU and a CPU id numa-shim must not take.
async fn start_kubelet(path: &Path) -> Running {
    let stranger = pr::PodResources {
        name: "kubelet-only".into(),
        namespace: "ns".into(),
        containers: vec![pr::ContainerResources {
            name: "x".into(),
            devices: vec![gpu()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let list = pr::ListPodResourcesResponse {
        pod_resources: vec![stranger, kubelet_pod_a()],
    };
    let allocatable = pr::AllocatableResourcesResponse {
        devices: vec![gpu()],
        cpu_ids: vec![1000],
        memory: vec![],
    };
    FakeKubelet::with(list, allocatable).serve(path)
}

fn shared() -> Shared {
    let mut r = registry();
    assert!(run(&mut r, plrm_pod("a", 3)));
    assert!(run(
        &mut r,
        pod_of("c", None, vec![app("web", burstable(500))])
    ));
    Arc::new(Mutex::new(r))
}

#[tokio::test]
async fn devices_and_dynamic_resources_merged_cpus_and_memory_kept() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_path = dir.path().join("kubelet.sock");
    let fake = start_kubelet(&kubelet_path).await;
    let mut o = options();
    o.kubelet_socket = Some(kubelet_path);
    let served = Served::start(dir.path(), shared(), o).await;
    let mut client = served.client();

    let list = client
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = list.pod_resources.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["name-a", "name-c"], "only pods numa-shim knows");
    let a = &list.pod_resources[0];
    assert_eq!(a.containers[0].devices, [gpu()]);
    assert!(a.containers[0].dynamic_resources.is_empty());
    assert_eq!(a.containers[1].dynamic_resources, [claim()]);
    assert!(a.containers[1].devices.is_empty());
    // CPUs and memory are numa-shim's.
    let bubble = ids(&a.cpu_ids);
    assert_eq!(bubble.len(), 3);
    assert!(bubble.is_subset(&numa_shim::cpuset::CpuSet::parse("0-15").unwrap()));
    assert_eq!(ids(&a.containers[0].cpu_ids).len(), 2);
    assert!(a.containers[0].memory.iter().all(|m| m.size > 1));
    assert!(list.pod_resources[1].containers[0].devices.is_empty());

    let got = client
        .get(pr::GetPodResourcesRequest {
            pod_name: "name-a".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_resources
        .unwrap();
    assert_eq!(&got, a);
    // A pod the kubelet does not know is still answered with numa-shim's part.
    let c = client
        .get(pr::GetPodResourcesRequest {
            pod_name: "name-c".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(c.pod_resources.unwrap().containers[0].name, "web");

    let alloc = client
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(alloc.devices, [gpu()]);
    assert_eq!(alloc.cpu_ids, (0..16).collect::<Vec<i64>>());
    assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    served.stop().await;
}

#[tokio::test]
async fn unreachable_kubelet_answers_without_devices_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options();
    o.kubelet_socket = Some(dir.path().join("no-kubelet.sock"));
    let served = Served::start(dir.path(), shared(), o).await;
    let mut client = served.client();
    let started = Instant::now();
    for _ in 0..3 {
        let list = client
            .list(pr::ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(list.pod_resources.len(), 2);
        assert!(list
            .pod_resources
            .iter()
            .flat_map(|p| &p.containers)
            .all(|c| c.devices.is_empty() && c.dynamic_resources.is_empty()));
        assert_eq!(ids(&list.pod_resources[0].cpu_ids).len(), 3);
    }
    let alloc = client
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(alloc.devices.is_empty() && !alloc.cpu_ids.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    served.stop().await;
}

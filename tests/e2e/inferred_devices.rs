//! Inference (no pod spec: kubelets before 1.37 without an API server) of a container that holds
//! devices: a classic Guaranteed pod with one container of 1 CPU and a device plugin's device.
//! The sandbox's resources (the sum of the containers) equal the container's, which rule C2 alone
//! reads as a container without resources of its own (pod shared pool, quota kept); rule C4 says
//! a container holding devices declared its own (device requests exist only in a container's own
//! resources), so it gets its exclusive CPU, as the kubelet gives it. The devices are seen in
//! CreateContainer (`devices`, the plugin's device nodes) or in the kubelet's PodResources.

use numa_shim::testing::e2e as support;

use std::collections::BTreeMap;
use std::sync::Arc;

use numa_shim::placement::device::{Device, DeviceFacts};
use numa_shim::testing::devices::FakeDevices;
use support::harness::{Setup, Shim};
use support::kubelet::{pod_def, PodDef, Res};
use support::received;

const TWO: &str = "topoDualSocketHT";
const GPU: &str = "example.com/gpu";

fn gpu_pod(name: &str) -> PodDef {
    pod_def(name).container("app", Res::guaranteed(1000, 128 << 20))
}

/// The kubelet's devices: g0 on node 0, allocated to container `app` of the pod asked about
/// when `held`.
fn facts(held: bool) -> DeviceFacts {
    let allocated = BTreeMap::from([(
        "app".to_string(),
        BTreeMap::from([(GPU.to_string(), vec!["g0".to_string()])]),
    )]);
    DeviceFacts {
        allocatable: BTreeMap::from([(
            GPU.to_string(),
            vec![Device {
                id: "g0".into(),
                numa_nodes: vec![0],
            }],
        )]),
        allocated: if held { allocated } else { BTreeMap::new() },
        ..DeviceFacts::default()
    }
}

#[tokio::test]
async fn a_container_with_device_nodes_gets_its_exclusive_cpu() {
    for scope in ["container", "pod"] {
        let dir = tempfile::tempdir().unwrap();
        let shim = Shim::start(dir.path(), &Setup::new(TWO, "single-numa-node", scope)).await;
        let kubelet = shim.kubelet().await;
        kubelet
            .start_pod(&gpu_pod("gpu").device("app", "/dev/fake-gpu0"))
            .await
            .unwrap();
        let app = received(&shim.fake().created("gpu", "app"));
        assert_eq!((app.cpus.len(), app.quota), (1, -1), "{scope}: {app:?}");
        assert!(
            shim.shared().is_disjoint(&app.cpus),
            "{scope}: the CPU left the shared pool"
        );
        // The same pod without the device is read by C2: no CPU of its own, the quota kept.
        kubelet.start_pod(&gpu_pod("plain")).await.unwrap();
        let plain = received(&shim.fake().created("plain", "app"));
        assert_ne!(plain.quota, -1, "{scope}: {plain:?}");
        shim.stop().await;
    }
}

#[tokio::test]
async fn devices_only_the_kubelets_podresources_lists_count_too() {
    let dir = tempfile::tempdir().unwrap();
    let source = Arc::new(FakeDevices::new(facts(true)));
    let setup = Setup::new(TWO, "single-numa-node", "container").devices(source.clone());
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    // A plugin that hands out only environment variables: nothing in CreateContainer's devices.
    kubelet.start_pod(&gpu_pod("gpu")).await.unwrap();
    let app = received(&shim.fake().created("gpu", "app"));
    assert_eq!((app.cpus.len(), app.quota), (1, -1), "{app:?}");
    assert!(source.asked().contains(&"uid-gpu".to_string()));
    // The kubelet lists no devices for the next pod's container: C2 reads it.
    source.set(facts(false));
    kubelet.start_pod(&gpu_pod("plain")).await.unwrap();
    let plain = received(&shim.fake().created("plain", "app"));
    assert_ne!(plain.quota, -1, "{plain:?}");
    shim.stop().await;
}

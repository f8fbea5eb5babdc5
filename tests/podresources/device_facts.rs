//! The decision's device facts from the kubelet's PodResources socket
//! (`KubeletSource::device_facts`): a fake kubelet (the real v1 protocol on a unix socket) with
//! devices on two NUMA nodes, one handed to the pod, others to other pods. Without an answer
//! (no socket, an error, a hang) there are no facts, quickly, with one clear warning, and the
//! kubelet answering again brings them back.

use numa_shim::testing::podresources::kubelet;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kubelet::{devices, Behaviour, FakeKubelet, LogCapture};
use numa_shim::placement::device::Device;
use numa_shim::podresources::KubeletSource;
use numa_shim::proto::podresources::v1 as pr;

const GPU: &str = "example.com/gpu";

fn pod_resources(name: &str, container: &str, ids: &[&str], node: i64) -> pr::PodResources {
    pr::PodResources {
        name: name.into(),
        namespace: "default".into(),
        containers: vec![pr::ContainerResources {
            name: container.into(),
            devices: vec![devices(GPU, ids, &[node])],
            cpu_ids: vec![7],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// gpu0, gpu1 on node 0, gpu2, gpu3 on node 1 (as the kubelet lists them: one entry per
/// device); pod `web` holds gpu2 in container `app`, pod `other` gpu0.
fn kubelet() -> FakeKubelet {
    let allocatable = pr::AllocatableResourcesResponse {
        devices: vec![
            devices(GPU, &["gpu2"], &[1]),
            devices(GPU, &["gpu0"], &[0]),
            devices(GPU, &["gpu3"], &[1]),
            devices(GPU, &["gpu1"], &[0]),
        ],
        cpu_ids: vec![0, 1, 2, 3],
        memory: vec![],
    };
    let list = pr::ListPodResourcesResponse {
        pod_resources: vec![
            pod_resources("web", "app", &["gpu2"], 1),
            pod_resources("other", "x", &["gpu0"], 0),
        ],
    };
    FakeKubelet::with(list, allocatable)
}

fn gpu(id: &str, node: u32) -> Device {
    Device {
        id: id.into(),
        numa_nodes: vec![node],
    }
}

#[tokio::test]
async fn allocatable_allocated_and_in_use_from_the_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.sock");
    let _kubelet = kubelet().serve(&path);
    let source = KubeletSource::new(&path, Duration::from_secs(1));
    let facts = source.device_facts("default", "web").await.expect("facts");
    assert_eq!(
        facts.allocatable[GPU],
        [
            gpu("gpu0", 0),
            gpu("gpu1", 0),
            gpu("gpu2", 1),
            gpu("gpu3", 1)
        ]
    );
    assert_eq!(
        facts.allocated,
        BTreeMap::from([(
            "app".to_string(),
            BTreeMap::from([(GPU.to_string(), vec!["gpu2".to_string()])])
        )])
    );
    assert_eq!(
        facts.in_use,
        BTreeMap::from([(GPU.to_string(), BTreeSet::from(["gpu0".to_string()]))])
    );
    // A pod the kubelet has not handed devices yet: nothing allocated, both others in use.
    let facts = source.device_facts("default", "new").await.unwrap();
    assert!(facts.allocated.is_empty());
    assert_eq!(facts.in_use[GPU].len(), 2);
}

/// No socket, an error, a hang: `None` within the timeout, one warning naming the fallback, and
/// an info line when the kubelet answers again.
#[tokio::test(flavor = "current_thread")]
async fn no_answer_no_facts_one_warning_then_back() {
    let (logs, _guard) = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.sock");
    let source = KubeletSource::new(&path, Duration::from_millis(300));

    let started = Instant::now();
    assert_eq!(
        source.device_facts("default", "web").await,
        None,
        "no socket"
    );
    let kubelet = kubelet().serve(&path);
    kubelet.set(Behaviour::Fail(tonic::Status::internal(
        "device manager broken",
    )));
    assert_eq!(source.device_facts("default", "web").await, None, "error");
    kubelet.set(Behaviour::Hang);
    assert_eq!(source.device_facts("default", "web").await, None, "hang");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let text = logs.text();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("deciding without device facts"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per WARN_EVERY:\n{text}");
    assert!(warnings[0].contains("WARN"), "{}", warnings[0]);
    assert!(
        warnings[0].contains("kubelet.sock"),
        "names the socket: {}",
        warnings[0]
    );
    assert!(
        warnings[0].contains("default/web"),
        "names the pod: {}",
        warnings[0]
    );

    kubelet.set(Behaviour::Answer);
    let facts = source
        .device_facts("default", "web")
        .await
        .expect("answering again");
    assert_eq!(facts.allocatable[GPU].len(), 4);
    assert!(
        logs.text().contains("device facts back in decisions"),
        "{}",
        logs.text()
    );
}

/// The device plugin gone: the kubelet lists none of its devices any more (it marks them
/// unhealthy). numa-shim still has facts (nothing free of that resource) and says so once.
#[tokio::test(flavor = "current_thread")]
async fn devices_gone_from_the_kubelet_are_logged_once() {
    let (logs, _guard) = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.sock");
    let kubelet = kubelet().serve(&path);
    let source = KubeletSource::new(&path, Duration::from_secs(1));
    assert_eq!(
        source
            .device_facts("default", "web")
            .await
            .unwrap()
            .allocatable[GPU]
            .len(),
        4
    );
    assert!(
        logs.text().contains("kubelet allocatable devices changed"),
        "{}",
        logs.text()
    );
    kubelet.allocatable.lock().unwrap().devices.clear();
    for _ in 0..2 {
        let facts = source
            .device_facts("default", "web")
            .await
            .expect("still facts");
        assert!(facts.allocatable.is_empty());
        // The pod keeps its device.
        assert_eq!(facts.allocated["app"][GPU], ["gpu2"]);
    }
    let gone: Vec<String> = logs
        .text()
        .lines()
        .filter(|l| l.contains("no allocatable devices of this resource any more"))
        .map(str::to_string)
        .collect();
    assert_eq!(gone.len(), 1, "{}", logs.text());
    assert!(
        gone[0].contains("WARN") && gone[0].contains(GPU),
        "{}",
        gone[0]
    );
}

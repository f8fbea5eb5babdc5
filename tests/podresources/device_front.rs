//! numa-shim's device plugin front in process, between a fake device plugin (gpu0 on NUMA node
//! 0, gpu1 on node 1) and a fake kubelet Registration service, over the real v1beta1 protocol on
//! unix sockets. The machine has one CPU per node; pod A holds node 0's CPU; pod B (1 CPU and 1
//! gpu, single-numa-node) is the pod the kubelet allocates for. The kubelet's own device
//! manager with topology visible would take gpu0 (first narrowest node, lowest id) — and
//! numa-shim would then refuse B. Through the front the kubelet sees the devices without
//! topology and numa-shim's GetPreferredAllocation answers gpu1, beside the free CPU. Allocate
//! reaches the plugin as sent; the plugin gone makes the devices Unhealthy to the kubelet, its
//! registration again makes them Healthy; a restarted kubelet gets the resource registered again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use numa_shim::deviceplugin::{self, Chooser, FrontOptions, KubeletSide};
use numa_shim::knowledge::PodMeta;
use numa_shim::lifecycle::devices::FrontedTopology;
use numa_shim::lifecycle::Source;
use numa_shim::placement::test_pods::{app, guaranteed, pod_of, GI};
use numa_shim::proto::deviceplugin::v1beta1 as dp;
use numa_shim::testing::deviceplugin::{
    device, kubelet_client, placer_knowing, FakeKubeletRegistration, FakePlugin,
};

const GPU: &str = "example.com/gpu";

fn pod_b() -> numa_shim::placement::PodSpec {
    let mut r = guaranteed(1000, GI);
    r.limits.extended.insert(GPU.into(), 1);
    r.requests.extended.insert(GPU.into(), 1);
    pod_of("b", None, vec![app("app", r)])
}

/// The next device list the kubelet's ListAndWatch stream gets that satisfies `ok`.
async fn next_devices(
    stream: &mut tonic::Streaming<dp::ListAndWatchResponse>,
    ok: impl Fn(&[dp::Device]) -> bool,
) -> Vec<dp::Device> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let msg = tokio::time::timeout_at(deadline, stream.message())
            .await
            .expect("a device list within 10s")
            .expect("stream ok")
            .expect("stream open");
        if ok(&msg.devices) {
            return msg.devices;
        }
    }
}

/// The chooser's answer to the kubelet asking one gpu with gpu0 (node 0) and gpu1 (node 1)
/// available.
async fn choose_one_gpu(
    chooser: &Chooser,
) -> (
    numa_shim::placement::device::alloc::Ids,
    deviceplugin::Answered,
) {
    let devices = [device("gpu0", Some(0)), device("gpu1", Some(1))]
        .map(|d| deviceplugin::front::to_core(&d));
    let wanted = deviceplugin::choice::Wanted {
        resource: GPU.into(),
        available: ["gpu0".to_string(), "gpu1".to_string()].into(),
        must: Default::default(),
        size: 1,
    };
    chooser.choose(&devices, &wanted).await
}

async fn wait_for(path: &Path) {
    for _ in 0..200 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test]
async fn the_front_hands_the_kubelet_numa_shims_device_and_forwards_the_rest() {
    let state = tempfile::tempdir().unwrap();
    let front_dir = tempfile::tempdir().unwrap();
    let kubelet_dir = tempfile::tempdir().unwrap();
    let meta = PodMeta {
        created: Some(1000),
        finished: false,
    };
    let (placer, _cache) = placer_knowing(state.path(), vec![(pod_b(), meta)]);
    // Pod A: one exclusive CPU, which the static policy takes from node 0.
    let a = pod_of("a", None, vec![app("app", guaranteed(1000, GI))]);
    placer.registry().admit(a, Source::Spec).unwrap();
    assert!(placer.registry().node().placement("a").is_some());

    let kubelet = FakeKubeletRegistration::default();
    let kubelet_served = kubelet.serve(kubelet_dir.path());
    let topology = Arc::new(FrontedTopology::default());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let front = deviceplugin::start(
        FrontOptions {
            dir: front_dir.path().to_path_buf(),
            kubelet: KubeletSide::Classic {
                dir: kubelet_dir.path().to_path_buf(),
            },
        },
        Chooser::new(Some(placer.clone())),
        topology.clone(),
        stop,
    )
    .await
    .unwrap();
    assert_eq!(front.socket, front_dir.path().join("kubelet.sock"));

    let plugin = FakePlugin::new(vec![device("gpu0", Some(0)), device("gpu1", Some(1))]);
    let plugin_served = plugin.serve(&front_dir.path().join("fake.sock"));
    FakePlugin::register(&front.socket, "fake.sock", GPU)
        .await
        .unwrap();

    // numa-shim registers its own endpoint for the resource with the kubelet.
    let seen = kubelet.wait(1, Duration::from_secs(10)).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].resource_name, GPU);
    assert_eq!(seen[0].version, "v1beta1");
    let options = seen[0].options.unwrap();
    assert!(options.get_preferred_allocation_available);
    assert!(!options.pre_start_required);
    let endpoint = seen[0].endpoint.clone();
    wait_for(&kubelet_dir.path().join(&endpoint)).await;

    // The kubelet sees both devices, healthy, without topology.
    let mut client = kubelet_client(kubelet_dir.path(), &endpoint);
    let mut stream = client
        .list_and_watch(dp::Empty {})
        .await
        .unwrap()
        .into_inner();
    let devices = next_devices(&mut stream, |d| d.len() == 2).await;
    assert!(
        devices
            .iter()
            .all(|d| d.topology.is_none() && d.health == "Healthy"),
        "{devices:?}"
    );
    // numa-shim keeps the true topology for PodResources readers.
    assert_eq!(topology.nodes(GPU, "gpu1"), Some(vec![1]));

    // The kubelet without hints offers every available device: numa-shim answers gpu1, the
    // device beside the CPU pod B can still get (node 1); the kubelet's own choice is gpu0.
    let answer = client
        .get_preferred_allocation(dp::PreferredAllocationRequest {
            container_requests: vec![dp::ContainerPreferredAllocationRequest {
                available_device_i_ds: vec!["gpu0".into(), "gpu1".into()],
                must_include_device_i_ds: vec![],
                allocation_size: 1,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.container_responses[0].device_i_ds, ["gpu1"]);
    assert_eq!(
        *plugin.preferred_calls.lock().unwrap(),
        0,
        "numa-shim answers itself"
    );
    // The dry run changed nothing: pod B is not admitted by it.
    assert!(placer.registry().pods().get("b").is_none());

    // A negative size is refused with the reason.
    let err = client
        .get_preferred_allocation(dp::PreferredAllocationRequest {
            container_requests: vec![dp::ContainerPreferredAllocationRequest {
                available_device_i_ds: vec!["gpu0".into()],
                must_include_device_i_ds: vec![],
                allocation_size: -1,
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("negative"), "{}", err.message());

    // Allocate goes to the plugin and its answer comes back as sent.
    let allocated = client
        .allocate(dp::AllocateRequest {
            container_requests: vec![dp::ContainerAllocateRequest {
                devices_ids: vec!["gpu1".into()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        allocated.container_responses[0].envs["FAKE_DEVICES"],
        "gpu1"
    );
    assert_eq!(
        *plugin.allocated.lock().unwrap(),
        [vec!["gpu1".to_string()]]
    );

    // The plugin goes: the kubelet gets the devices Unhealthy; Allocate has nowhere to go.
    plugin.stop(plugin_served).await;
    let devices = next_devices(&mut stream, |d| d.iter().all(|d| d.health == "Unhealthy")).await;
    assert_eq!(devices.len(), 2);
    let err = client
        .allocate(dp::AllocateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    // It comes back and registers again: healthy again, on the same kubelet stream.
    let plugin_served = plugin.serve(&front_dir.path().join("fake.sock"));
    FakePlugin::register(&front.socket, "fake.sock", GPU)
        .await
        .unwrap();
    next_devices(&mut stream, |d| {
        d.len() == 2 && d.iter().all(|d| d.health == "Healthy")
    })
    .await;

    // The kubelet restarts: new kubelet.sock, its directory's sockets removed; numa-shim serves
    // and registers its endpoint again.
    kubelet_served.stop().await;
    std::fs::remove_file(kubelet_dir.path().join(&endpoint)).unwrap();
    let restarted = FakeKubeletRegistration::default();
    let _restarted_served = restarted.serve(kubelet_dir.path());
    let seen = restarted.wait(1, Duration::from_secs(10)).await;
    assert_eq!(
        seen.len(),
        1,
        "registered again after the kubelet's restart"
    );
    assert_eq!(seen[0].resource_name, GPU);
    wait_for(&kubelet_dir.path().join(&endpoint)).await;

    let _ = stop_tx.send(true);
    plugin.stop(plugin_served).await;
}

/// Without numa-shim's decision (no placer: the front only relays the kubelet's own choice)
/// the answer is gpu0 — what the kubelet picks by itself, which numa-shim would refuse.
#[tokio::test]
async fn without_numa_shims_decision_the_answer_is_the_kubelets_own_gpu0() {
    let front_dir = tempfile::tempdir().unwrap();
    let kubelet_dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubeletRegistration::default();
    let _kubelet_served = kubelet.serve(kubelet_dir.path());
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let front = deviceplugin::start(
        FrontOptions {
            dir: front_dir.path().to_path_buf(),
            kubelet: KubeletSide::Classic {
                dir: kubelet_dir.path().to_path_buf(),
            },
        },
        Chooser::new(None),
        Arc::new(FrontedTopology::default()),
        stop,
    )
    .await
    .unwrap();
    let plugin = FakePlugin::new(vec![device("gpu0", Some(0)), device("gpu1", Some(1))]);
    let _plugin_served = plugin.serve(&front_dir.path().join("fake.sock"));
    FakePlugin::register(&front.socket, "fake.sock", GPU)
        .await
        .unwrap();
    let seen = kubelet.wait(1, Duration::from_secs(10)).await;
    let mut client = kubelet_client(kubelet_dir.path(), &seen[0].endpoint);
    wait_for(&kubelet_dir.path().join(&seen[0].endpoint)).await;
    let mut stream = client
        .list_and_watch(dp::Empty {})
        .await
        .unwrap()
        .into_inner();
    next_devices(&mut stream, |d| d.len() == 2).await;
    let answer = client
        .get_preferred_allocation(dp::PreferredAllocationRequest {
            container_requests: vec![dp::ContainerPreferredAllocationRequest {
                available_device_i_ds: vec!["gpu0".into(), "gpu1".into()],
                must_include_device_i_ds: vec![],
                allocation_size: 1,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.container_responses[0].device_i_ds, ["gpu0"]);
}

/// The pod being admitted is one the kubelet lists now: a pod numa-shim still knows but the
/// kubelet has deleted (its spec not yet dropped by the watch) is not it, though it is older
/// and asks the same device.
#[tokio::test]
async fn a_pod_the_kubelet_no_longer_lists_is_not_the_one_being_admitted() {
    use numa_shim::proto::podsapi::core_v1;
    use numa_shim::testing::pods_api::PodsApi;

    let state = tempfile::tempdir().unwrap();
    let meta = |created| PodMeta {
        created: Some(created),
        finished: false,
    };
    let mut gone = pod_b();
    gone.uid = "gone".into();
    gone.name = "gone".into();
    let (placer, _cache) = placer_knowing(state.path(), vec![(gone, meta(1000))]);

    // The kubelet's Pods API lists pod C only.
    let q = |v: &str| core_v1::Quantity {
        string: Some(v.into()),
    };
    let limits: std::collections::HashMap<String, core_v1::Quantity> = [
        ("cpu".to_string(), q("1")),
        ("memory".to_string(), q("1Gi")),
        (GPU.to_string(), q("1")),
    ]
    .into();
    let pod_c = core_v1::Pod {
        metadata: Some(core_v1::ObjectMeta {
            name: Some("c".into()),
            namespace: Some("ns".into()),
            uid: Some("c".into()),
            creation_timestamp: None,
        }),
        spec: Some(core_v1::PodSpec {
            containers: vec![core_v1::Container {
                name: Some("app".into()),
                resources: Some(core_v1::ResourceRequirements {
                    limits: limits.clone(),
                    requests: limits,
                }),
                restart_policy: None,
            }],
            node_name: Some("node".into()),
            init_containers: vec![],
            resources: None,
        }),
        status: Some(core_v1::PodStatus {
            phase: Some("Pending".into()),
        }),
    };
    let api = PodsApi::default();
    api.add(&pod_c);
    let socket = state.path().join("pods-api.sock");
    let served = api.serve(&socket);

    let chooser = Chooser::new(Some(placer))
        .with_pods_api(socket)
        .pod_wait(Duration::from_millis(300));
    let (_, answered) = choose_one_gpu(&chooser).await;
    assert_eq!(
        answered,
        deviceplugin::Answered::Decision {
            pod: "ns/c".into(),
            container: "app".into()
        }
    );
    served.abort();
}

/// A pod with pod-level resources under the pod scope: the kubelet (its Topology Manager off
/// behind numa-shim) allocates the container's gpu at admission, while numa-shim's decision,
/// like the kubelet's own pod-level resource managers, gives it at the container's start with
/// the pod's merged hint. The front answers that device: gpu1, beside the budget's CPU on node
/// 1 (pod A holds node 0's), not the kubelet's own choice gpu0.
#[tokio::test]
async fn a_pod_level_pod_under_the_pod_scope_gets_the_gpu_beside_its_budget() {
    use numa_shim::placement::config::TopologyScope;
    use numa_shim::placement::Resources;
    use numa_shim::testing::deviceplugin::placer_knowing_with;

    let state = tempfile::tempdir().unwrap();
    let mut gpu = Resources::default();
    gpu.limits.extended.insert(GPU.into(), 1);
    gpu.requests.extended.insert(GPU.into(), 1);
    let p = pod_of("p", Some(guaranteed(1000, GI)), vec![app("app", gpu)]);
    let meta = PodMeta {
        created: Some(1000),
        finished: false,
    };
    let (placer, _cache) = placer_knowing_with(state.path(), vec![(p, meta)], |c| {
        c.topology_scope = TopologyScope::Pod;
        c.gates.pod_level_resource_managers = true;
    });
    let a = pod_of("a", None, vec![app("app", guaranteed(1000, GI))]);
    placer.registry().admit(a, Source::Spec).unwrap();

    let chooser = Chooser::new(Some(placer)).pod_wait(Duration::from_millis(300));
    let (ids, answered) = choose_one_gpu(&chooser).await;
    assert_eq!(
        answered,
        deviceplugin::Answered::Decision {
            pod: "ns/name-p".into(),
            container: "app".into()
        }
    );
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), ["gpu1"]);
}

/// The plugin watcher's directory is the kubelet's: numa-shim serves its endpoint there while it
/// exists and, while it does not (the kubelet has not made it yet, or its root was wiped), waits
/// for the kubelet to make it rather than making it itself. A socket numa-shim left in a
/// directory it made is a stale plugin to the next kubelet there: registered twice, dropped a
/// second later (a pod admitted then is refused).
#[tokio::test]
async fn the_front_never_makes_the_kubelets_plugin_directory() {
    let front_dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let registry = root.path().join("plugins_registry");
    let endpoint = registry.join(deviceplugin::front::socket_name(GPU));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let front = deviceplugin::start(
        FrontOptions {
            dir: front_dir.path().to_path_buf(),
            kubelet: KubeletSide::PluginWatcher {
                dir: registry.clone(),
            },
        },
        Chooser::new(None),
        Arc::new(FrontedTopology::default()),
        stop,
    )
    .await
    .unwrap();
    let plugin = FakePlugin::new(vec![device("gpu0", Some(0))]);
    let plugin_served = plugin.serve(&front_dir.path().join("fake.sock"));
    FakePlugin::register(&front.socket, "fake.sock", GPU)
        .await
        .unwrap();
    let poll = deviceplugin::kubelet::POLL;
    tokio::time::sleep(poll * 2).await;
    assert!(!registry.exists(), "numa-shim made the kubelet's directory");

    // The kubelet makes it: numa-shim's endpoint appears there.
    std::fs::create_dir(&registry).unwrap();
    wait_for(&endpoint).await;

    // The kubelet's root is wiped: numa-shim does not make the directory again.
    std::fs::remove_dir_all(&registry).unwrap();
    tokio::time::sleep(poll * 3).await;
    assert!(
        !registry.exists(),
        "numa-shim made the kubelet's directory again"
    );

    let _ = stop_tx.send(true);
    plugin.stop(plugin_served).await;
}

//! Devices next to numa-shim's CPUs with a real device plugin: numa-shim's sample device plugin
//! (integration/device-plugin, registered through the kubelet's plugin watcher in the kubelet's
//! private root dir) advertises two `example.com/gpu` devices on NUMA node 0; a Guaranteed pod
//! asks for one. The kubelet (its managers off behind numa-shim) allocates it — gpu0, the
//! plugin's preferred (lowest) id — and the container gets the plugin's env var and device
//! node; numa-shim's PodResources lists the device beside the CPU and memory numa-shim chose,
//! all on node 0 (this machine's one node). The plugin killed: the kubelet marks its devices
//! unhealthy, numa-shim logs that the resource's devices are gone and keeps serving (the pod
//! keeps its device and CPU, a new pod runs). A kubelet restart in between finds the plugin
//! again.

use super::*;

const PLUGIN: &str = r#"{"resource": "example.com/gpu",
  "devices": [{"id": "gpu1", "numa": 0}, {"id": "gpu0", "numa": 0}]}"#;

fn gpu_pod(image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: gpu\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {image}\n    \
         imagePullPolicy: Never\n    \
         command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n    \
         resources:\n      limits: {{cpu: \"1\", memory: \"128Mi\", example.com/gpu: \"1\"}}\n"
    )
}

/// The NUMA node ids of a PodResources `topology`.
pub(crate) fn nodes(topology: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = topology["nodes"]
        .as_array()
        .map(|n| n.iter().map(numa_id).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A PodResources container's devices: (resource, ids, NUMA nodes) each.
pub(crate) type Devices = Vec<(String, Vec<String>, Vec<i64>)>;

/// The devices of a PodResources container.
pub(crate) fn devices(container: &Value) -> Devices {
    container["devices"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    let ids = d["device_ids"]
                        .as_array()
                        .map(|i| {
                            i.iter()
                                .map(|x| x.as_str().unwrap_or_default().to_string())
                                .collect()
                        })
                        .unwrap_or_default();
                    (
                        d["resource_name"].as_str().unwrap_or_default().to_string(),
                        ids,
                        nodes(&d["topology"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn cpu_ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| {
                    x.as_str()
                        .and_then(|s| s.parse().ok())
                        .or(x.as_u64().map(|n| n as u32))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kubelet's own allocatable `example.com/gpu` devices.
fn kubelet_gpus(kubelet: &Kubelet) -> usize {
    let alloc = podresources(&kubelet.path("pod_resources"), &["allocatable"]);
    devices(&alloc)
        .iter()
        .filter(|(r, _, _)| r == "example.com/gpu")
        .map(|(_, ids, _)| ids.len())
        .sum()
}

pub(crate) async fn wait_kubelet_gpus(kubelet: &Kubelet, want: usize, plugin: &DevicePlugin) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while kubelet_gpus(kubelet) != want {
        assert!(
            Instant::now() < deadline,
            "the kubelet does not list {want} example.com/gpu devices; plugin log:\n{}\nkubelet log:\n{}",
            plugin.log_text(),
            tail(&kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The CPUs of NUMA node `node` on this machine.
fn numa_cpus(node: i64) -> Vec<u32> {
    let text =
        std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).unwrap();
    numa_shim::cpuset::CpuSet::parse(text.trim())
        .unwrap()
        .iter()
        .collect()
}

#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn device_plugin_device_beside_numa_shims_cpus_and_the_plugin_killed() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let started = Instant::now();
    let mut rig = rig(&env, "devices", Mode::NumaShim, &settings("container")).await;
    assert_no_earlier_device_assignments();
    let mut plugin = DevicePlugin::start(&env, &rig.kubelet, "devices", PLUGIN);
    plugin.wait_log("registered with the kubelet").await;
    // Registered before the pod comes: the kubelet admits a pod only against devices it has.
    wait_kubelet_gpus(&rig.kubelet, 2, &plugin).await;

    rig.kubelet.add("gpu.yaml", &gpu_pod(&env.image));
    rig.kubelet.wait_running(&["gpu"], &[]).await;

    // The container has what the plugin's Allocate gave: the env var and the device node.
    let pid = container_pid(&env, &rig.kubelet, "gpu", "app").await;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.split('\0').any(|v| v == "EXAMPLE_DEVICE_IDS=gpu0"),
        "the plugin's env var naming the preferred (lowest) id: {environ:?}\nplugin log:\n{}",
        plugin.log_text()
    );
    let node = std::fs::metadata(format!("/proc/{pid}/root/dev/example-gpu0")).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(node.file_type().is_char_device(), "{node:?}");

    // numa-shim's PodResources: the device beside numa-shim's CPU and memory, one NUMA node.
    let name = rig.kubelet.full_name("gpu");
    let got = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
    let app = &got["pod_resources"]["containers"][0];
    assert_eq!(app["name"], "app", "{got}");
    let devs = devices(app);
    assert_eq!(
        devs,
        [(
            "example.com/gpu".to_string(),
            vec!["gpu0".to_string()],
            vec![0]
        )],
        "{got}"
    );
    let cpus = cpu_ids(&app["cpu_ids"]);
    assert_eq!(cpus, [1], "numa-shim's exclusive CPU: {got}");
    let memory: Vec<Vec<i64>> = app["memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| nodes(&m["topology"]))
        .collect();
    assert_eq!(memory, [vec![0]], "numa-shim's memory node: {got}");
    assert!(
        cpus.iter().all(|c| numa_cpus(0).contains(c)),
        "CPUs {cpus:?} on the device's node 0"
    );
    // What the kernel applied is what PodResources says.
    let seen = kernel(&env, &rig.kubelet).await;
    assert_eq!(seen["gpu"]["app"].cpus, "1", "{seen:?}");
    assert_eq!(seen["gpu"]["app"].mems, "0", "{seen:?}");
    // List says the same; the device is the kubelet's (its own Get names it too).
    let list = podresources(&rig.shim.pod_resources(), &["list"]);
    let listed = list["pod_resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name.as_str())
        .cloned()
        .unwrap();
    assert_eq!(devices(&listed["containers"][0]), devs, "{list}");
    assert_eq!(cpu_ids(&listed["containers"][0]["cpu_ids"]), cpus);
    let theirs = podresources(
        &rig.kubelet.path("pod_resources"),
        &["get", &name, "default"],
    );
    assert_eq!(devices(&theirs["pod_resources"]["containers"][0]), devs);
    // numa-shim's GetAllocatableResources: the kubelet's devices, numa-shim's CPUs.
    let alloc = podresources(&rig.shim.pod_resources(), &["allocatable"]);
    assert_eq!(devices(&alloc).len(), 2, "{alloc}");

    // `/placement` (what `numa-shim inspect` draws): the devices on NUMA node 0, gpu0 held by
    // the pod's container, which lists it beside numa-shim's CPU.
    let view = rig.shim.placement();
    let node0 = &view["numaNodes"][0];
    let devices_of_node: Vec<(String, String)> = node0["devices"]
        .as_array()
        .unwrap_or_else(|| panic!("no devices on node 0: {view}"))
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap_or_default().to_string(),
                d["holder"]["container"]
                    .as_str()
                    .unwrap_or("free")
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        devices_of_node,
        [
            ("gpu0".to_string(), "app".to_string()),
            ("gpu1".to_string(), "free".to_string())
        ],
        "{view}"
    );
    let pod_view = view["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        pod_view["containers"][0]["devices"][0], "example.com/gpu=gpu0",
        "{view}"
    );
    assert_eq!(pod_view["containers"][0]["cpus"], "1", "{view}");

    assert_no_plugin_flap(&rig.kubelet);

    // The kubelet restarts: it finds the plugin in its plugins_registry again, the pod keeps
    // its device and CPU.
    rig.kubelet.restart();
    wait_kubelet_gpus(&rig.kubelet, 2, &plugin).await;
    rig.kubelet.wait_running(&["gpu"], &[]).await;
    let got = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
    assert_eq!(
        devices(&got["pod_resources"]["containers"][0]),
        devs,
        "{got}"
    );

    // The plugin dies: the kubelet marks its devices unhealthy, numa-shim says so and serves on.
    plugin.kill9();
    wait_kubelet_gpus(&rig.kubelet, 0, &plugin).await;
    let alloc = podresources(&rig.shim.pod_resources(), &["allocatable"]);
    assert!(devices(&alloc).is_empty(), "{alloc}");
    assert!(!cpu_ids(&alloc["cpu_ids"]).is_empty(), "{alloc}");
    let log = rig.shim.log_text();
    assert!(
        log.lines().any(
            |l| l.contains("no allocatable devices of this resource any more")
                && l.contains("example.com/gpu")
        ),
        "numa-shim's log:\n{}",
        tail(&log, 30)
    );
    let got = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
    let app = &got["pod_resources"]["containers"][0];
    assert_eq!(devices(app), devs, "the pod keeps its device: {got}");
    assert_eq!(cpu_ids(&app["cpu_ids"]), cpus, "and its CPU: {got}");
    // numa-shim still places pods: a BestEffort pod runs on the shared pool.
    rig.kubelet
        .add("best-effort.yaml", &pods::best_effort(&env.image));
    rig.kubelet.wait_running(&["gpu", "best-effort"], &[]).await;
    let seen = wait_cpus(&env, &rig.kubelet, "best-effort", "0").await;
    assert_eq!(seen["app"].cpus, "0", "{seen:?}");
    drop(rig);
    forget_checkpoint();
    eprintln!("devices test: {:?}", started.elapsed());
}

/// The kubelet v1.37.2 keeps its device manager's checkpoint in the directory it hard-codes
/// (/var/lib/kubelet/device-plugins, whatever its --root-dir), shared by every kubelet of the
/// machine. A kubelet that starts later reads it (it only names this test's pod and resource:
/// no devices for it, the pod not one of its own), but the file is this test's: removed when
/// it names the test's resource.
fn forget_checkpoint() {
    let file = std::path::Path::new("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
    if std::fs::read_to_string(file).is_ok_and(|t| t.contains("example.com/gpu")) {
        let _ = std::fs::remove_file(file);
    }
}

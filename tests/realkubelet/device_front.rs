//! The split decision closed by numa-shim's device plugin front, on a real kubelet: numa-shim is
//! given a 2-node topology over this machine's two CPUs (cpu0 on node 0, cpu1 on node 1; its
//! memory policy None, so it writes no cpuset.mems the 1-node kernel would refuse; no CPUs
//! reserved, so both are allocatable: the kubelet's managers are off, its allocatable is both
//! CPUs), the sample device plugin advertises gpu0 on node 0 and gpu1 on node 1 and registers
//! with numa-shim's front, which registers `example.com/gpu` with the kubelet through its plugin
//! watcher. Pod A (1 exclusive CPU) takes node 0's CPU; pod B (1 exclusive CPU, 1 gpu,
//! single-numa-node) must run with gpu1 and CPU 1 — the kubelet with all its managers would put
//! it there. The kubelet's PodResources, numa-shim's PodResources, `/placement`, the container's
//! env and the kernel's cpuset agree. Then the kubelet restarts, numa-shim crashes and restarts
//! (the front and the plugin register again; pod B keeps gpu1 and CPU 1, and a new pod C gets
//! them from the restarted front once B is gone), and the plugin dies.
//!
//! Without the front (`NUMA_SHIM_IT_NO_FRONT=1`: the plugin registered with the kubelet
//! directly) the kubelet's device manager gives pod B gpu0, the first device, and numa-shim
//! refuses the pod (gpu0's node has no free CPU): the test fails there.
//!
//! On a kubelet without the Pods API (before 1.36) and without an API server numa-shim has no
//! pod spec when the kubelet asks the front (docs/devices.md, "The device plugin front"): the
//! test then shows the documented fallback instead. Pod A, one container asking exactly the
//! sandbox's resources, is read as a container without resources of its own (pod-knowledge.md,
//! rule C2) and runs in the shared pool; the front answers what the kubelet would choose with the
//! topology visible (gpu0, the first narrowest node), and pod B gets CPU 0 beside it.

use super::devices::{cpu_ids, devices, wait_kubelet_gpus, Devices};
use super::*;

const PLUGIN: &str = r#"{"resource": "example.com/gpu",
  "devices": [{"id": "gpu0", "numa": 0}, {"id": "gpu1", "numa": 1}]}"#;

/// This machine's two CPUs as two NUMA nodes of one CPU each, memory split in two.
const TOPOLOGY: &str = r#"{
  "cpus": [
    {"id":0,"core":0,"socket":0,"numa":0,"uncore":0},
    {"id":1,"core":1,"socket":1,"numa":1,"uncore":1}
  ],
  "numa": [
    {"id":0,"memory":"8Gi","hugepages":{},"distances":[10,20]},
    {"id":1,"memory":"8Gi","hugepages":{},"distances":[20,10]}
  ]
}"#;

/// Static CPU policy with nothing reserved, memory policy None, single-numa-node per container.
const SETTINGS: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
    cpuManagerPolicy: static\nmemoryManagerPolicy: None\n\
    topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n";

fn pod_yaml(name: &str, image: &str, gpus: u32) -> String {
    let gpu = if gpus > 0 {
        format!(", example.com/gpu: \"{gpus}\"")
    } else {
        String::new()
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {image}\n    \
         imagePullPolicy: Never\n    \
         command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n    \
         resources:\n      limits: {{cpu: \"1\", memory: \"64Mi\"{gpu}}}\n"
    )
}

#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn the_front_gives_pod_b_the_gpu_beside_the_free_cpu() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let started = Instant::now();
    let front = std::env::var_os("NUMA_SHIM_IT_NO_FRONT").is_none();
    let (rig, plugin) = front_rig(&env, "front-split", SETTINGS, front).await;
    // Through the front the kubelet sees no topology: its own PodResources says so.
    let theirs = podresources(&rig.kubelet.path("pod_resources"), &["allocatable"]);
    let kubelet_nodes: Vec<Vec<i64>> = devices(&theirs).into_iter().map(|d| d.2).collect();
    if front {
        assert!(kubelet_nodes.iter().all(Vec::is_empty), "{theirs}");
    }

    if !env.has_pods_api() {
        return without_pod_specs(&env, rig, plugin, front).await;
    }

    // Pod A: node 0's CPU.
    pod_a_on_node0(&env, &rig).await;

    // Pod B: one CPU and one gpu; only node 1 can hold both.
    rig.kubelet.add("b.yaml", &pod_yaml("b", &env.image, 1));
    wait_device_pod(&rig, "b", front, &plugin).await;
    let name = rig.kubelet.full_name("b");

    // The kubelet gave it gpu1 (its PodResources, without topology behind the front).
    let (theirs, kubelet_devs) = kubelet_devices(&rig, &name);
    assert_eq!(kubelet_devs.len(), 1, "{theirs}");
    assert_eq!(
        kubelet_devs[0].1,
        ["gpu1"],
        "the kubelet's device: {theirs}"
    );
    // numa-shim's PodResources: gpu1 on node 1 beside CPU 1.
    let ours = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
    let app = &ours["pod_resources"]["containers"][0];
    assert_eq!(devices(app), one_gpu("gpu1", 1), "{ours}");
    assert_eq!(cpu_ids(&app["cpu_ids"]), [1], "{ours}");
    // `/placement`: the pod's container on CPU 1 with gpu1, gpu1 listed on node 1.
    let view = rig.shim.placement();
    let pod_view = view["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{view}"));
    assert_eq!(pod_view["containers"][0]["cpus"], "1", "{view}");
    assert_eq!(
        pod_view["containers"][0]["devices"][0], "example.com/gpu=gpu1",
        "{view}"
    );
    let node1: Vec<String> = view["numaNodes"][1]["devices"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|d| d["id"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(node1, ["gpu1"], "{view}");
    // The kernel and the plugin's Allocate agree.
    let seen = kernel(&env, &rig.kubelet).await;
    assert_eq!(seen["b"]["app"].cpus, "1", "{seen:?}");
    let pid = container_pid(&env, &rig.kubelet, "b", "app").await;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        String::from_utf8_lossy(&environ)
            .split('\0')
            .any(|v| v == "EXAMPLE_DEVICE_IDS=gpu1"),
        "plugin log:\n{}",
        plugin.log_text()
    );
    let log = rig.shim.log_text();
    assert!(
        log.lines().any(
            |l| l.contains("preferred allocation from numa-shim's decision") && l.contains("gpu1")
        ),
        "{}",
        tail(&log, 30)
    );
    assert_no_plugin_flap(&rig.kubelet);
    if front {
        // The kubelet restarts: it finds numa-shim's endpoint in its plugin watcher directory
        // again; pod B keeps gpu1 and CPU 1.
        let mut rig = rig;
        rig.kubelet.restart();
        wait_kubelet_gpus(&rig.kubelet, 2, &plugin).await;
        rig.kubelet.wait_running(&["a", "b"], &[]).await;
        let ours = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
        let app = &ours["pod_resources"]["containers"][0];
        assert_eq!(devices(app)[0].1, ["gpu1"], "{ours}");
        assert_eq!(cpu_ids(&app["cpu_ids"]), [1], "{ours}");

        // numa-shim crashes and starts again: the front comes back in the kubelet's plugin
        // watcher directory, the plugin (its socket removed by the new front) registers with it
        // again, and pod B keeps gpu1 and CPU 1.
        const TO_KUBELET: &str = "fronted resource registered with the kubelet";
        const FROM_PLUGIN: &str = "device plugin registered with numa-shim's front";
        let log = rig.shim.log_text();
        let (to_kubelet, from_plugin) = (
            log.matches(TO_KUBELET).count(),
            log.matches(FROM_PLUGIN).count(),
        );
        rig.shim.restart().await;
        wait_log_count(&rig.shim, TO_KUBELET, to_kubelet + 1).await;
        wait_log_count(&rig.shim, FROM_PLUGIN, from_plugin + 1).await;
        wait_kubelet_gpus(&rig.kubelet, 2, &plugin).await;
        let ours = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
        let app = &ours["pod_resources"]["containers"][0];
        assert_eq!(devices(app), one_gpu("gpu1", 1), "{ours}");
        assert_eq!(cpu_ids(&app["cpu_ids"]), [1], "{ours}");
        // The restarted front decides a new pod's device as the first one did: pod B goes, pod
        // C (one CPU, one gpu) gets gpu1 beside CPU 1 again.
        rig.kubelet.remove("b.yaml");
        rig.kubelet.wait_running(&["a"], &["b"]).await;
        // The kubelet lists a deleted pod as gone while it still terminates; pod C asked now
        // would meet B's CPU and gpu still held (the kubelet's own managers would refuse it then
        // too). Wait until both numa-shim and the kubelet's PodResources let them go.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ours = rig.shim.placement();
            let theirs = podresources(&rig.kubelet.path("pod_resources"), &["list"]);
            let held =
                ours["pods"].to_string().contains(&name) || theirs.to_string().contains(&name);
            if !held {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "pod B still held after its deletion: numa-shim {ours}\nkubelet {theirs}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        rig.kubelet.add("c.yaml", &pod_yaml("c", &env.image, 1));
        wait_device_pod(&rig, "c", front, &plugin).await;
        let name = rig.kubelet.full_name("c");
        let ours = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
        let app = &ours["pod_resources"]["containers"][0];
        assert_eq!(devices(app), one_gpu("gpu1", 1), "{ours}");
        assert_eq!(cpu_ids(&app["cpu_ids"]), [1], "{ours}");
        let log = rig.shim.log_text();
        assert!(
            log.lines().any(
                |l| l.contains("preferred allocation from numa-shim's decision")
                    && l.contains(&name)
            ),
            "{}",
            tail(&log, 30)
        );

        // The plugin dies: numa-shim reports its devices Unhealthy, the kubelet lists none.
        let mut plugin = plugin;
        plugin.kill9();
        wait_kubelet_gpus(&rig.kubelet, 0, &plugin).await;
        assert!(
            rig.shim
                .log_text()
                .lines()
                .any(|l| l.contains("device plugin gone from numa-shim's front")),
            "{}",
            tail(&rig.shim.log_text(), 20)
        );
        let seen = kernel(&env, &rig.kubelet).await;
        assert_eq!(seen["c"]["app"].cpus, "1", "pod C keeps its CPU: {seen:?}");
        drop(plugin);
        drop(rig);
    } else {
        drop(plugin);
        drop(rig);
    }
    eprintln!("device front test: {:?}", started.elapsed());
}

/// numa-shim (the fake 2-node topology; with its device plugin front unless `front` is false)
/// and a kubelet with `settings`, and the sample plugin registered with the front (or the
/// kubelet), both gpus seen by the kubelet.
async fn front_rig(env: &Env, name: &str, settings: &str, front: bool) -> (Rig, DevicePlugin) {
    let dir = env.fresh(&format!("{name}-files"));
    let topology = dir.join("topology.json");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let front_dir = dir.join("device-plugins");
    let rig = rig_with(env, name, Mode::NumaShim, settings, |kubelet| {
        let mut flags = vec!["--topology".into(), topology.display().to_string()];
        if front {
            flags.extend([
                "--device-plugin-front".into(),
                front_dir.display().to_string(),
                "--device-plugin-registry".into(),
                kubelet
                    .path("root")
                    .join("plugins_registry")
                    .display()
                    .to_string(),
            ]);
        }
        flags
    })
    .await;
    assert_no_earlier_device_assignments();
    let plugin = if front {
        // numa-shim made the directory and its kubelet.sock before serving.
        DevicePlugin::start_with(
            env,
            name,
            PLUGIN,
            &["-device-plugin-dir".into(), front_dir.display().to_string()],
        )
    } else {
        DevicePlugin::start(env, &rig.kubelet, name, PLUGIN)
    };
    wait_kubelet_gpus(&rig.kubelet, 2, &plugin).await;
    (rig, plugin)
}

/// Pod-level resources under the pod scope (docs/devices.md): pod P's budget is one CPU and
/// 64Mi, its container asks only a gpu. Behind numa-shim the kubelet (its Topology Manager off)
/// asks the front at admission; numa-shim's decision gives the container its gpu at start with
/// the pod's hint, node 1 (pod A holds node 0's CPU): gpu1, beside the budget's CPU 1. Without
/// the front (`NUMA_SHIM_IT_NO_FRONT=1`) the kubelet gives gpu0 and numa-shim refuses the pod.
#[tokio::test]
#[ignore = "needs the real-kubelet harness (integration/test-all.sh)"]
async fn the_front_gives_a_pod_level_pod_the_gpu_beside_its_budget() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    if !env.has_pods_api() {
        // numa-shim has no pod spec when this kubelet asks: the test above shows the fallback.
        eprintln!("not applicable to kubelet {}: no Pods API", env.version);
        return;
    }
    let front = std::env::var_os("NUMA_SHIM_IT_NO_FRONT").is_none();
    let settings = SETTINGS.replace(
        "topologyManagerScope: container",
        "topologyManagerScope: pod",
    );
    let (rig, plugin) = front_rig(&env, "front-pod-level", &settings, front).await;
    pod_a_on_node0(&env, &rig).await;

    rig.kubelet.add("p.yaml", &pod_level_pod("p", &env.image));
    wait_device_pod(&rig, "p", front, &plugin).await;
    let name = rig.kubelet.full_name("p");
    let (theirs, kubelet_devs) = kubelet_devices(&rig, &name);
    assert_eq!(
        kubelet_devs.iter().map(|d| d.1.clone()).collect::<Vec<_>>(),
        [["gpu1"]],
        "the kubelet's device: {theirs}"
    );
    let ours = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
    let app = &ours["pod_resources"]["containers"][0];
    assert_eq!(devices(app), one_gpu("gpu1", 1), "{ours}");
    assert_eq!(cpu_ids(&ours["pod_resources"]["cpu_ids"]), [1], "{ours}");
    let seen = wait_cpus(&env, &rig.kubelet, "p", "1").await;
    assert_eq!(seen["app"].cpus, "1", "{seen:?}");
    let log = rig.shim.log_text();
    assert!(
        log.lines().any(
            |l| l.contains("preferred allocation from numa-shim's decision") && l.contains(&name)
        ),
        "{}",
        tail(&log, 30)
    );
    assert_no_plugin_flap(&rig.kubelet);
    drop(plugin);
    drop(rig);
}

/// Pod A (1 exclusive CPU) running on node 0's CPU.
async fn pod_a_on_node0(env: &Env, rig: &Rig) {
    rig.kubelet.add("a.yaml", &pod_yaml("a", &env.image, 0));
    rig.kubelet.wait_running(&["a"], &[]).await;
    let seen = wait_cpus(env, &rig.kubelet, "a", "0").await;
    assert_eq!(seen["app"].cpus, "0", "{seen:?}");
}

/// The kubelet's PodResources `Get` of pod `name` and its first container's devices.
fn kubelet_devices(rig: &Rig, name: &str) -> (Value, Devices) {
    let theirs = podresources(
        &rig.kubelet.path("pod_resources"),
        &["get", name, "default"],
    );
    let devs = devices(&theirs["pod_resources"]["containers"][0]);
    (theirs, devs)
}

/// A pod whose budget (`spec.resources`) is one CPU and 64Mi, its container asking one gpu.
fn pod_level_pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  resources:\n    limits: {{cpu: \"1\", memory: \"64Mi\"}}\n  \
         containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Never\n    \
         command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n    \
         resources:\n      limits: {{example.com/gpu: \"1\"}}\n"
    )
}

/// The fallback on a kubelet whose pod specs numa-shim infers from CRI (see the module doc).
async fn without_pod_specs(env: &Env, rig: Rig, plugin: DevicePlugin, front: bool) {
    rig.kubelet.add("a.yaml", &pod_yaml("a", &env.image, 0));
    rig.kubelet.wait_running(&["a"], &[]).await;
    let seen = wait_cpus(env, &rig.kubelet, "a", "0-1").await;
    assert_eq!(
        seen["app"].cpus, "0-1",
        "rule C2, the shared pool: {seen:?}"
    );
    rig.kubelet.add("b.yaml", &pod_yaml("b", &env.image, 1));
    rig.kubelet.wait_running(&["a", "b"], &[]).await;
    let name = rig.kubelet.full_name("b");
    let ours = podresources(&rig.shim.pod_resources(), &["get", &name, "default"]);
    let app = &ours["pod_resources"]["containers"][0];
    assert_eq!(devices(app), one_gpu("gpu0", 0), "{ours}");
    assert_eq!(cpu_ids(&app["cpu_ids"]), [0], "{ours}");
    let seen = wait_cpus(env, &rig.kubelet, "b", "0").await;
    assert_eq!(seen["app"].cpus, "0", "{seen:?}");
    let seen = wait_cpus(env, &rig.kubelet, "a", "1").await;
    assert_eq!(
        seen["app"].cpus, "1",
        "pod A's shared pool without CPU 0: {seen:?}"
    );
    assert_no_plugin_flap(&rig.kubelet);
    if front {
        let log = rig.shim.log_text();
        assert!(
            log.lines()
                .any(|l| l.contains("preferred allocation is the kubelet's own choice")),
            "{}",
            tail(&log, 30)
        );
    }
    drop(plugin);
    drop(rig);
}

/// Waits until pod `name` (asking a gpu) runs; else panics with numa-shim's device lines and
/// refusals beside the pod.
async fn wait_device_pod(rig: &Rig, name: &str, front: bool, plugin: &DevicePlugin) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let pod = rig.kubelet.pod_named(name);
        if pod
            .as_ref()
            .is_some_and(|p| p["status"]["phase"] == "Running")
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not running (front: {front}): {}\nnuma-shim's placement: {}\nnuma-shim log:\n{}\nplugin log:\n{}",
            serde_json::to_string_pretty(&pod).unwrap_or_default(),
            rig.shim.placement(),
            rig.shim
                .log_text()
                .lines()
                .filter(|l| l.contains("device") || l.contains("refused"))
                .collect::<Vec<_>>()
                .join("\n"),
            tail(&plugin.log_text(), 10)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until numa-shim has logged `text` at least `count` times (across its restarts).
async fn wait_log_count(shim: &Shim, text: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while shim.log_text().matches(text).count() < count {
        assert!(
            Instant::now() < deadline,
            "numa-shim did not log {text:?} {count} times:\n{}",
            tail(&shim.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `devices()` of a container holding one `example.com/gpu`, `id` on NUMA node `numa`.
fn one_gpu(id: &str, numa: i64) -> Devices {
    vec![(
        "example.com/gpu".to_string(),
        vec![id.to_string()],
        vec![numa],
    )]
}

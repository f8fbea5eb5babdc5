//! DRA claims in numa-shim's decisions, end to end on the loopback control plane: the sample DRA
//! driver (integration/dra-driver) publishes its ResourceSlice for the test's Node (gpu0 on NUMA
//! node 0, gpu1 on node 1, gpu2 without a NUMA attribute); each ResourceClaim's allocation is
//! written through the API's status subresource as the scheduler writes it (no kubelet here, so
//! the pods are bound by `nodeName`, not scheduled); `numa-shim serve` (`podKnowledge:
//! apiserver`, the packaged RBAC's ServiceAccount, `single-numa-node`) reads pod → claim → slice
//! at RunPodSandbox, which crictl sends as the kubelet would. On this one-node host the claim on
//! node 1 is refused with the claim in the message, the claim on node 0 is admitted with an
//! exclusive CPU of node 0, and the device without a NUMA attribute is admitted with a log line.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use numa_shim::inspect::PlacementView;

use super::serve::serve;
use super::support::*;

struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// A ResourceClaim for one gpu.example.com device, then its allocation written as the
/// scheduler writes it (status.allocation.devices.results).
fn claim(cp: &Cp, ns: &str, pool: &str, name: &str, device: &str) {
    let object = format!(
        r#"{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{{"name":"{name}","namespace":"{ns}"}},
          "spec":{{"devices":{{"requests":[{{"name":"gpu","exactly":{{"deviceClassName":"gpu.example.com"}}}}]}}}}}}"#
    );
    cp.kubectl_in(&["create", "-f", "-"], &object);
    let mut with_status: serde_json::Value =
        serde_json::from_str(&cp.kubectl(&["-n", ns, "get", "resourceclaim", name, "-o", "json"]))
            .unwrap();
    with_status["status"] = serde_json::json!({"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": pool, "device": device}]}}});
    cp.kubectl_in(
        &["replace", "--subresource=status", "-f", "-"],
        &with_status.to_string(),
    );
}

/// A Guaranteed pod of `cpu` CPUs (1: an exclusive CPU) whose container uses `claim`; returns
/// its UID.
fn create_claiming_pod(cp: &Cp, node: &TestNode, name: &str, claim: &str, cpu: &str) -> String {
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}"}},
          "spec":{{"nodeName":"{node}","resourceClaims":[{{"name":"gpu","resourceClaimName":"{claim}"}}],
            "containers":[{{"name":"app","image":"busybox",
              "resources":{{"requests":{{"cpu":"{cpu}","memory":"64Mi"}},"limits":{{"cpu":"{cpu}","memory":"64Mi"}},
                           "claims":[{{"name":"gpu"}}]}}}}]}}}}"#,
        ns = node.namespace,
        node = node.name
    );
    cp.create(&pod)
}

/// crictl runp of the pod's sandbox through numa-shim: (admitted, crictl's output).
fn runp(
    crictl: &str,
    socket: &Path,
    dir: &Path,
    ns: &str,
    name: &str,
    uid: &str,
) -> (bool, String) {
    let sandbox = dir.join(format!("{name}.json"));
    std::fs::write(
        &sandbox,
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","attempt":0}},
              "linux":{{"security_context":{{"namespace_options":{{"network":2}}}},
                "resources":{{"cpu_period":100000,"cpu_quota":100000,"cpu_shares":1024,"memory_limit_in_bytes":67108864}}}}}}"#
        ),
    )
    .unwrap();
    let out = Command::new(crictl)
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", socket.display()))
        .args(["--timeout", "30s", "runp"])
        .arg(&sandbox)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn crictl_rm(crictl: &str, socket: &Path, id: &str) {
    for verb in ["stopp", "rmp"] {
        let _ = Command::new(crictl)
            .arg("--runtime-endpoint")
            .arg(format!("unix://{}", socket.display()))
            .args([verb, id])
            .output();
    }
}

fn placement(metrics: &str) -> PlacementView {
    let out = Command::new("curl")
        .args(["-sf", &format!("http://{metrics}/placement")])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("/placement: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn dra_claims_place_and_refuse_by_their_devices_numa_node() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let (containerd, crictl, run) = (
        var("NUMA_SHIM_IT_CONTAINERD"),
        var("NUMA_SHIM_IT_CRICTL"),
        PathBuf::from(var("NUMA_SHIM_IT_RUN")),
    );
    let bin = Path::new(&crictl).parent().unwrap().to_path_buf();
    let node = TestNode::new(&cp, "dra");
    let ns = node.namespace.clone();
    let dir = run.join("serve-dra");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The driver's ResourceSlice for the test's Node.
    cp.kubectl_in(
        &["apply", "-f", "-"],
        r#"{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"gpu.example.com"},
            "spec":{"selectors":[{"cel":{"expression":"device.driver == \"gpu.example.com\""}}]}}"#,
    );
    let config = dir.join("driver.json");
    std::fs::write(
        &config,
        r#"{"driver": "gpu.example.com", "devices": [
            {"name": "gpu0", "numa": 0, "pcieRoot": "pci0000:00"},
            {"name": "gpu1", "numa": 1, "pcieRoot": "pci0000:80"},
            {"name": "gpu2", "pcieRoot": "pci0000:40"}]}"#,
    )
    .unwrap();
    let _driver = Driver(
        Command::new(bin.join("dra-driver"))
            .arg("-kubeconfig")
            .arg(cp.dir.join("admin.kubeconfig"))
            .args(["-node", &node.name, "-config"])
            .arg(&config)
            .arg("-registrar-dir")
            .arg(dir.join("plugins_registry"))
            .arg("-plugin-dir")
            .arg(dir.join("plugins/gpu.example.com"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("driver.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let selector = format!("spec.nodeName={}", node.name);
    eventually("the driver's ResourceSlice", 60, || {
        cp.try_kubectl(
            &[
                "get",
                "resourceslices",
                "--field-selector",
                &selector,
                "-o",
                "jsonpath={.items[*].spec.devices[*].name}",
            ],
            None,
        )
        .is_ok_and(|names| names.split_whitespace().count() == 3)
    })
    .await;

    for (name, device) in [
        ("claim-node1", "gpu1"),
        ("claim-node0", "gpu0"),
        ("claim-nonuma", "gpu2"),
    ] {
        claim(&cp, &ns, &node.name, name, device);
    }
    let on_node1 = create_claiming_pod(&cp, &node, "on-node1", "claim-node1", "1");
    let on_node0 = create_claiming_pod(&cp, &node, "on-node0", "claim-node0", "1");
    // 500m: the shared pool (the host's one free CPU goes to on-node0).
    let no_numa = create_claiming_pod(&cp, &node, "no-numa", "claim-nonuma", "500m");

    let socket = dir.join("cri.sock");
    let metrics = format!("127.0.0.1:{}", numa_shim::testing::free_port());
    let shim_config = dir.join("config.yaml");
    std::fs::write(
        &shim_config,
        format!(
            "listen: unix://{sock}\nruntime: unix://{containerd}\nstateDir: {state}\n\
             podResourcesSocket: none\npodKnowledge: apiserver\nkubeconfig: {kubeconfig}\n\
             nodeName: {node}\nmetricsAddress: {metrics}\nlogLevel: info,numa_shim=debug\n\
             cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
             topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n\
             memoryManagerPolicy: None\n",
            sock = socket.display(),
            state = dir.join("state").display(),
            kubeconfig = cp.dir.join("numa-shim.kubeconfig").display(),
            node = node.name,
        ),
    )
    .unwrap();
    let log = dir.join("numa-shim.log");
    let _shim = serve(&shim_config, &log, &socket).await;
    // numa-shim's pod watch has the pods before the kubelet would run them.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sandboxes = Vec::new();

    // The device on NUMA node 1, which this one-node host lacks: refused, naming the claim.
    let (admitted, out) = loop {
        let (admitted, out) = runp(&crictl, &socket, &dir, &ns, "on-node1", &on_node1);
        if admitted || out.contains("TopologyAffinityError") || Instant::now() > deadline {
            break (admitted, out);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if admitted {
        sandboxes.push(out.trim().to_string());
    }
    let want = format!(
        "TopologyAffinityError: Resources cannot be allocated with Topology locality: ResourceClaim {ns}/claim-node1 (devices on NUMA node 1)"
    );
    assert!(
        !admitted && out.contains("FailedPrecondition") && out.contains(&want),
        "{out}"
    );
    // The user sees it on the pod (refusal reports, the default with a kubeconfig).
    let status = || {
        cp.kubectl(&[
            "-n",
            &ns,
            "get",
            "pod",
            "on-node1",
            "-o",
            "jsonpath={.status.phase}/{.status.reason}/{.status.message}",
        ])
    };
    eventually("on-node1 Failed with the claim in its message", 30, || {
        status().starts_with("Failed/TopologyAffinityError/") && status().contains("claim-node1")
    })
    .await;

    // The device on node 0: admitted, its exclusive CPU on node 0.
    let (admitted, out) = runp(&crictl, &socket, &dir, &ns, "on-node0", &on_node0);
    assert!(admitted, "{out}");
    sandboxes.push(out.trim().to_string());
    // The device without a NUMA attribute: admitted, and said so.
    let (admitted, out) = runp(&crictl, &socket, &dir, &ns, "no-numa", &no_numa);
    assert!(admitted, "{out}");
    sandboxes.push(out.trim().to_string());

    let view = placement(&metrics);
    let app = |uid: &str| {
        let p = view
            .pods
            .iter()
            .find(|p| p.uid == uid)
            .unwrap_or_else(|| panic!("{uid} not placed: {view:?}"));
        p.containers
            .iter()
            .find(|c| c.name == "app")
            .unwrap()
            .clone()
    };
    let c = app(&on_node0);
    assert_eq!(c.cpus, "1", "on-node0's exclusive CPU: {c:?}");
    let node0 = view.numa_nodes.iter().find(|n| n.id == 0).unwrap();
    assert!(
        node0.cpus.iter().any(|cpu| cpu.id == 1),
        "CPU 1 is on node 0"
    );
    assert!(
        view.pods.iter().all(|p| p.uid != on_node1),
        "the refused pod holds nothing"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("DRA device without a NUMA node attribute")
                && l.contains("claim-nonuma")
                && l.contains("gpu.example.com/it-dra/gpu2")),
        "no log line for the device without a NUMA node:\n{text}"
    );
    for id in &sandboxes {
        crictl_rm(&crictl, &socket, id);
    }
    let _ = cp.try_kubectl(
        &[
            "delete",
            "deviceclass",
            "gpu.example.com",
            "--ignore-not-found",
        ],
        None,
    );
}

//! DRA claims end to end on real parts: the real kube-scheduler allocates each pod's
//! ResourceClaim (made by the controller-manager from a ResourceClaimTemplate whose CEL selector
//! asks for a device on one NUMA node) from the ResourceSlice of numa-shim's sample DRA driver
//! (integration/dra-driver, registered with the real kubelet v1.37.2 through
//! `<root-dir>/plugins_registry`); the kubelet calls the driver's NodePrepareResources and then
//! RunPodSandbox on numa-shim, which reads pod → claim → slice through the API server and places
//! the pod (`single-numa-node`, container scope).
//!
//! This host has one NUMA node with two CPUs, so numa-shim is given a two-node machine
//! (`--topology`: CPU 0 on node 0, CPU 1 on node 1) and the driver gpu0 on node 0, gpu1 and gpu2
//! on node 1. numa-shim's memory manager is `None`: it writes no `cpuset.mems`, which the host
//! kernel would refuse for node 1. Neither numa-shim nor the kubelet reserves a CPU (numa-shim
//! warns that the static policy then has none; the kubelet's own static policy would refuse
//! it): both CPUs can be granted, and the scheduler fits two 1-CPU pods. What it shows:
//!
//! * a pod whose claim got a node-1 device runs with CPU 1 (without the claim: CPU 0, the
//!   lowest free one): the kernel's cpuset, numa-shim's `/placement` and numa-shim's
//!   PodResources (with the kubelet's dynamic resources: claim, device, CDI name) agree;
//! * a pod whose claim got the other node-1 device while CPU 1 is taken (CPU 0 free) is refused
//!   with `TopologyAffinityError` and a message naming its claim, in its status and a Warning
//!   Event (`kubectl describe pod`);
//! * a pod whose claim got gpu0 (node 0) then runs with CPU 0: the refusal lost no CPU;
//! * with numa-shim's ClusterRole stripped of its DRA rule, a pod whose claim got a node-1
//!   device runs on the free CPU 0 (placed without the claim, as documented), with numa-shim's
//!   log line naming the pod and the 403.
//!
//! `NUMA_SHIM_IT_DRA_CLAIMS=false` runs it with `--dra-claims false` (it must fail).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use numa_shim::inspect::Owner;
use serde_json::Value;

use super::rig::*;
use super::rk::{self, podresources, SERIAL};

const DRIVER: &str = "gpu.example.com";
const REASON: &str = "TopologyAffinityError";

/// The sample driver for the cluster's kubelet, killed when dropped; its slices and the
/// DeviceClass go too.
struct Driver {
    child: Child,
    log: std::path::PathBuf,
}

impl Driver {
    fn start(c: &Cluster) -> Self {
        let dir = c.env.fresh("cl-dra-driver");
        let config = dir.join("driver.json");
        std::fs::write(
            &config,
            r#"{"driver": "gpu.example.com", "devices": [
                {"name": "gpu0", "numa": 0, "pcieRoot": "pci0000:00"},
                {"name": "gpu1", "numa": 1, "pcieRoot": "pci0000:80"},
                {"name": "gpu2", "numa": 1, "pcieRoot": "pci0000:80"}]}"#,
        )
        .unwrap();
        let root = c.kubelet.path("root");
        let log = dir.join("driver.log");
        let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("integration/.work/bin/dra-driver");
        let child = Command::new(&bin)
            .arg("-kubeconfig")
            .arg(c.cp.dir.join("admin.kubeconfig"))
            .args(["-node", &c.node, "-config"])
            .arg(&config)
            .arg("-registrar-dir")
            .arg(root.join("plugins_registry"))
            .arg("-plugin-dir")
            .arg(root.join("plugins").join(DRIVER))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (integration/install-deps.sh)", bin.display()));
        Self { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The DeviceClass of the driver's devices and one ResourceClaimTemplate per NUMA node
/// (`gpu-node0`, `gpu-node1`), selecting by the driver's `numaNode` attribute.
fn classes() -> Vec<String> {
    let mut out = vec![format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: {DRIVER}\n\
         spec:\n  selectors:\n  - cel:\n      expression: device.driver == \"{DRIVER}\"\n"
    )];
    for numa in [0, 1] {
        out.push(format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  \
             name: gpu-node{numa}\nspec:\n  spec:\n    devices:\n      requests:\n      \
             - name: gpu\n        exactly:\n          deviceClassName: {DRIVER}\n          \
             selectors:\n          - cel:\n              expression: \
             device.attributes[\"{DRIVER}\"].numaNode == {numa}\n"
        ));
    }
    out
}

/// A Guaranteed pod with one exclusive CPU whose container uses a claim from `template`.
fn pod_yaml(image: &str, name: &str, template: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  resourceClaims:\n  - name: gpu\n    \
         resourceClaimTemplateName: {template}\n  containers:\n  - name: app\n    \
         image: {image}\n    imagePullPolicy: Never\n    \
         command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n    \
         resources:\n      limits: {{cpu: \"1\", memory: \"64Mi\"}}\n      \
         claims:\n      - name: gpu\n"
    )
}

/// The claim the controller-manager made for the pod (its `status.resourceClaimStatuses`) and
/// the device the kubelet had the driver prepare for it (the driver's log line
/// `prepared claim NS/NAME: 1 devices [gpuN]`; the claim of a refused pod is deleted at once).
async fn claim_of(c: &Cluster, driver: &Driver, pod: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let fail = |what: &str| -> ! {
        panic!(
            "{pod}: {what}:\n{}\ndriver log:\n{}",
            c.kubectl(&["describe", "pod", pod]),
            driver.log_text()
        )
    };
    let claim = loop {
        // Set by the controller-manager before the scheduler allocates (and so before the
        // kubelet runs the pod).
        let claim = c.kubectl(&[
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}",
        ]);
        if !claim.is_empty() {
            break claim;
        }
        if Instant::now() > deadline {
            fail("no claim made");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let prepared = format!("prepared claim {NAMESPACE}/{claim}: 1 devices [");
    loop {
        let device = driver.log_text().lines().find_map(|l| {
            let (_, rest) = l.split_once(&prepared)?;
            Some(rest.trim_end_matches(']').to_string())
        });
        if let Some(device) = device {
            return (claim, device);
        }
        if Instant::now() > deadline {
            fail("the driver prepared no device for its claim");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until `pod` ended Failed with the refusal naming `claim` (devices on `numa`), and
/// shows that `kubectl describe pod` carries it: status and numa-shim's Warning Event.
async fn wait_refused(c: &Cluster, driver: &Driver, pod: &str, claim: &str, numa: u32) {
    let message = format!(
        "Resources cannot be allocated with Topology locality: ResourceClaim {NAMESPACE}/{claim} \
         (devices on NUMA node {numa})"
    );
    let want = format!("Failed/{REASON}/Pod was rejected: {message}");
    let phase = || {
        c.kubectl(&[
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.phase}/{.status.reason}/{.status.message}",
        ])
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while phase() != want {
        assert!(
            Instant::now() < deadline,
            "{pod} is {:?}, want {want:?}\nkubectl get pod -o wide:\n{}\nkubelet log:\n{}\n\
             driver log:\n{}",
            phase(),
            c.kubectl(&["get", "pod", "-o", "wide"]),
            rk::tail(&c.kubelet.log_text(), 30),
            driver.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let describe = c.kubectl(&["describe", "pod", pod]);
    eprintln!("kubectl describe pod {pod}:\n{describe}");
    assert!(
        describe.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.first() == Some(&"Warning")
                && cols.get(1) == Some(&REASON)
                && l.contains("numa-shim")
                && l.ends_with(&message)
        }),
        "no Warning {REASON} Event from numa-shim naming {claim}:\n{describe}"
    );
}

/// Waits until `pod` shows `want` as `{.status.phase}/{ready}`.
async fn wait_phase(c: &Cluster, pod: &str, want: &str) {
    let get = || {
        c.kubectl(&[
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.phase}/{.status.containerStatuses[0].ready}",
        ])
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while get() != want {
        assert!(
            Instant::now() < deadline,
            "{pod} is {}, want {want}:\n{}\nkubelet log:\n{}",
            get(),
            c.kubectl(&["describe", "pod", pod]),
            rk::tail(&c.kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The CPU ids of a PodResources container (protojson writes int64 as strings).
fn cpu_ids(container: &Value) -> Vec<u64> {
    container["cpu_ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().or_else(|| x.as_str()?.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// numa-shim's settings for this test: a two-node machine of this host's two CPUs.
fn shim_settings(c_dir: &std::path::Path, dra_claims: bool) -> Vec<String> {
    let topology = c_dir.join("topology.json");
    std::fs::write(
        &topology,
        r#"{"cpus": [{"id": 0, "core": 0, "socket": 0, "numa": 0},
                     {"id": 1, "core": 1, "socket": 0, "numa": 1}],
            "numa": [{"id": 0, "memory": "4Gi", "distances": [10, 21]},
                     {"id": 1, "memory": "4Gi", "distances": [21, 10]}]}"#,
    )
    .unwrap();
    let config = c_dir.join("numa-shim.yaml");
    std::fs::write(
        &config,
        "cpuManagerPolicy: static\nmemoryManagerPolicy: None\n\
         topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n\
         logLevel: info,numa_shim=debug\n",
    )
    .unwrap();
    vec![
        "--config".into(),
        config.display().to_string(),
        "--topology".into(),
        topology.display().to_string(),
        "--dra-claims".into(),
        dra_claims.to_string(),
    ]
}

/// The scenario; with `dra_claims: false` numa-shim does not read claims and it fails.
async fn scenario(dra_claims: bool) {
    let env = rk::Env::get();
    let dir = env.fresh("cl-dra-settings");
    // The kubelet's main file: no resource managers of its own and no reserved CPUs (the
    // harness's drop-in turns its managers off and points it at numa-shim).
    let main = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let c = Cluster::start_with("cl-dra", main, &shim_settings(&dir, dra_claims)).await;
    let image = c.env.image.clone();
    let driver = Driver::start(&c);
    let cleanup = Cleanup(&c);
    // The kubelet registered the driver and the driver published its slice.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names = c.cp.try_kubectl(
            &[
                "get",
                "resourceslices",
                "--field-selector",
                &format!("spec.driver={DRIVER},spec.nodeName={}", c.node),
                "-o",
                "jsonpath={.items[*].spec.devices[*].name}",
            ],
            None,
        );
        if names.as_deref().map(|n| n.split_whitespace().count()) == Ok(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "driver not registered or slice not published: {names:?}\ndriver log:\n{}\n\
             kubelet log:\n{}",
            driver.log_text(),
            rk::tail(&c.kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    c.apply(&classes());

    // (1) a node-1 device: CPU 1 (the lowest free CPU, 0, without the claim) in the kernel,
    // in /placement and in numa-shim's PodResources, beside the kubelet's dynamic resources.
    c.apply(&[pod_yaml(&image, "on-node1", "gpu-node1")]);
    let (claim1, device1) = claim_of(&c, &driver, "on-node1").await;
    assert!(["gpu1", "gpu2"].contains(&device1.as_str()), "{device1}");
    wait_phase(&c, "on-node1", "Running/true").await;
    eprintln!(
        "kubectl get pod -o wide:\n{}\non-node1's claim {claim1}: {device1}",
        c.kubectl(&["get", "pod", "-o", "wide"])
    );
    let seen = c.wait_kernel(&[("on-node1", "app", "1")]).await;
    // No cpuset.mems from numa-shim: the container keeps the host's (node 0 only).
    assert_eq!(seen["on-node1"]["app"].mems, "0", "{seen:?}");
    let view = c.placement();
    let pod_view = view
        .pods
        .iter()
        .find(|p| p.name == "on-node1")
        .unwrap_or_else(|| panic!("on-node1 not placed: {view:?}"));
    assert_eq!(pod_view.containers[0].cpus, "1", "{pod_view:?}");
    let node1 = view.numa_nodes.iter().find(|n| n.id == 1).unwrap();
    assert!(
        node1.cpus.iter().any(|cpu| cpu.id == 1
            && matches!(&cpu.owner, Owner::Exclusive { containers, .. }
                if containers.iter().any(|r| r.pod.ends_with("/on-node1")))),
        "CPU 1 of node 1 is on-node1's: {node1:?}"
    );
    let got = podresources(&c.shim.pod_resources(), &["get", "on-node1", NAMESPACE]);
    eprintln!("numa-shim's PodResources Get on-node1: {got}");
    let app = &got["pod_resources"]["containers"][0];
    assert_eq!(cpu_ids(app), [1], "{got}");
    let dynamic = app["dynamic_resources"].to_string();
    assert!(
        dynamic.contains(&claim1) && dynamic.contains(&device1),
        "the kubelet's dynamic resources of on-node1: {got}"
    );
    // The scheduler's allocation is what the driver prepared.
    assert_eq!(
        c.kubectl(&[
            "get",
            "resourceclaim",
            &claim1,
            "-o",
            "jsonpath={.status.allocation.devices.results[0].device}",
        ]),
        device1
    );

    // (2) the other node-1 device while CPU 1 is taken and CPU 0 is free: refused, naming its
    // claim (without the claim it would run on CPU 0).
    c.apply(&[pod_yaml(&image, "node1-taken", "gpu-node1")]);
    let (claim2, device2) = claim_of(&c, &driver, "node1-taken").await;
    assert!(
        ["gpu1", "gpu2"].contains(&device2.as_str()) && device2 != device1,
        "{device2}"
    );
    wait_refused(&c, &driver, "node1-taken", &claim2, 1).await;

    // (3) gpu0 on node 0: the CPU the refused pod did not take, CPU 0. The refused pod goes
    // first: until the kubelet has finished it, its own admission still counts its CPU request
    // ("Node didn't have enough resource: cpu").
    c.kubectl(&["delete", "pod", "node1-taken", "--timeout=60s"]);
    c.apply(&[pod_yaml(&image, "on-node0", "gpu-node0")]);
    let (_, device0) = claim_of(&c, &driver, "on-node0").await;
    assert_eq!(device0, "gpu0", "the scheduler's choice for gpu-node0");
    wait_phase(&c, "on-node0", "Running/true").await;
    c.wait_kernel(&[("on-node1", "app", "1"), ("on-node0", "app", "0")])
        .await;
    c.assert_consistent().await;

    // (4) The fallback: numa-shim's ClusterRole without the DRA rule (as on a cluster whose RBAC
    // was not updated). CPU 0 given back, a pod whose claim got a node-1 device is placed
    // without it (on CPU 0, the only free one) with a log line naming the pod and the 403; no
    // CPU lost or granted twice.
    c.kubectl(&["delete", "pod", "on-node0", "--timeout=60s"]);
    c.wait_kernel(&[("on-node1", "app", "1")]).await;
    let rbac = NoDraRbac::apply(&c);
    c.apply(&[pod_yaml(&image, "unreadable", "gpu-node1")]);
    let (_, device) = claim_of(&c, &driver, "unreadable").await;
    assert!(["gpu1", "gpu2"].contains(&device.as_str()), "{device}");
    wait_phase(&c, "unreadable", "Running/true").await;
    c.wait_kernel(&[("on-node1", "app", "1"), ("unreadable", "app", "0")])
        .await;
    let log = c.shim.log_text();
    let line = log
        .lines()
        .find(|l| {
            l.contains("the pod's DRA claims could not be read")
                && l.contains("unreadable")
                && l.contains("403")
        })
        .unwrap_or_else(|| {
            panic!(
                "no log line for the unreadable claim:\n{}",
                rk::tail(&log, 40)
            )
        });
    eprintln!("numa-shim: {line}");
    c.assert_consistent().await;
    drop(rbac);
    drop(cleanup);
}

/// numa-shim's ClusterRole without its `resource.k8s.io` rule while alive; the packaged one
/// again when dropped.
struct NoDraRbac<'a> {
    c: &'a Cluster,
    saved: Value,
}

impl<'a> NoDraRbac<'a> {
    fn apply(c: &'a Cluster) -> Self {
        let text =
            c.cp.kubectl(&["get", "clusterrole", "numa-shim", "-o", "json"]);
        let saved: Value = serde_json::from_str(&text).unwrap();
        let mut role = saved.clone();
        let rules = role["rules"].as_array_mut().unwrap();
        let before = rules.len();
        rules.retain(|r| !r["apiGroups"].to_string().contains("resource.k8s.io"));
        assert_eq!(rules.len() + 1, before, "{saved}");
        c.cp.kubectl_in(&["replace", "-f", "-"], &role.to_string());
        // The authorizer follows RBAC objects through its informers: wait until it says no.
        let deadline = Instant::now() + Duration::from_secs(30);
        while c
            .cp
            .try_kubectl(
                &[
                    "auth",
                    "can-i",
                    "--as",
                    "system:serviceaccount:kube-system:numa-shim",
                    "get",
                    "resourceclaims.resource.k8s.io",
                    "-n",
                    NAMESPACE,
                ],
                None,
            )
            .is_ok()
        {
            assert!(
                Instant::now() < deadline,
                "RBAC still allows resourceclaims"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Self { c, saved }
    }
}

impl Drop for NoDraRbac<'_> {
    fn drop(&mut self) {
        let mut role = self.saved.clone();
        if let Some(meta) = role["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let _ = self
            .c
            .cp
            .try_kubectl(&["apply", "-f", "-"], Some(&role.to_string()));
    }
}

/// Removes the test's cluster-wide objects (DeviceClass, the driver's slices) whatever happens.
struct Cleanup<'a>(&'a Cluster);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let cp = &self.0.cp;
        let _ = cp.try_kubectl(
            &["delete", "deviceclass", DRIVER, "--ignore-not-found"],
            None,
        );
        let _ = cp.try_kubectl(
            &[
                "delete",
                "resourceslices",
                "--field-selector",
                &format!("spec.driver={DRIVER}"),
                "--ignore-not-found",
            ],
            None,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn dra_claims_allocated_by_the_scheduler_place_and_refuse_pods_by_their_devices_node() {
    let _serial = SERIAL.lock().await;
    // The negative control: NUMA_SHIM_IT_DRA_CLAIMS=false runs the same scenario with numa-shim
    // not reading claims (`--dra-claims false`); it must fail (on-node0 then runs on CPU 1).
    let dra_claims = std::env::var("NUMA_SHIM_IT_DRA_CLAIMS").map_or(true, |v| v != "false");
    scenario(dra_claims).await;
}

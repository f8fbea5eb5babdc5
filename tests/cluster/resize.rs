//! In-place resize with the real kubelet (docs/resize.md): `kubectl patch pod --subresource
//! resize` on a pod numa-shim placed. On this machine (2 CPUs, CPU 0 reserved: the kubelet's
//! allocatable is one CPU) a grow is a shared-pool container becoming exclusive (500m → 1) and
//! back; the refused resize is a container admitted with an exclusive CPU shrinking below it
//! (1 → 500m), which the kubelet allows and numa-shim refuses by the promised-CPUs rule. After
//! each step the kernel's cpusets, numa-shim's `/placement` and `kubectl get pod` agree.

use std::time::{Duration, Instant};

use numa_shim::cpuset::CpuSet;
use numa_shim::inspect::PlacementView;
use serde_json::Value;

use super::rig::*;
use super::rk::{sample, SERIAL};

fn manifest(name: &str, cpu: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {image}\n    \
         imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n    \
         resources:\n      requests: {{cpu: \"{cpu}\", memory: \"128Mi\"}}\n      \
         limits: {{cpu: \"{cpu}\", memory: \"128Mi\"}}\n"
    )
}

fn resize(c: &Cluster, pod: &str, cpu: &str) {
    let patch = format!(
        r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{cpu}","memory":"128Mi"}},"limits":{{"cpu":"{cpu}","memory":"128Mi"}}}}}}]}}}}"#
    );
    c.kubectl(&["patch", "pod", pod, "--subresource", "resize", "-p", &patch]);
}

fn pod_json(c: &Cluster, pod: &str) -> Value {
    serde_json::from_str(&c.kubectl(&["get", "pod", pod, "-o", "json"])).unwrap()
}

/// The pod's resize conditions (`PodResizePending`, `PodResizeInProgress`) as type/reason/message.
fn resize_conditions(pod: &Value) -> Vec<String> {
    pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("PodResize"))
        })
        .map(|c| format!("{}/{}/{}", c["type"], c["reason"], c["message"]))
        .collect()
}

/// Waits until the kubelet reports `cpu` in the container's status resources and no resize is
/// pending or in progress.
async fn wait_actuated(c: &Cluster, pod: &str, cpu: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let p = pod_json(c, pod);
        let status = &p["status"]["containerStatuses"][0]["resources"];
        let got = status["requests"]["cpu"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if got == cpu && resize_conditions(&p).is_empty() {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{pod}: status cpu {got:?} (want {cpu}), conditions {:?}\nkubelet log:\n{}",
            resize_conditions(&p),
            super::rk::tail(&c.kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the kubelet reports `cpu` as the pod's budget in its status resources and no
/// resize is pending or in progress.
async fn wait_budget_actuated(c: &Cluster, pod: &str, cpu: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let p = pod_json(c, pod);
        let status = p["status"]["resources"]["limits"]["cpu"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if status == cpu && resize_conditions(&p).is_empty() {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{pod}: status resources {} (want {cpu}), conditions {:?}\nnuma-shim log:\n{}\nkubelet log:\n{}",
            p["status"]["resources"],
            resize_conditions(&p),
            super::rk::tail(&c.shim.log_text(), 20),
            super::rk::tail(&c.kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn placed(view: &PlacementView, pod: &str) -> (String, bool) {
    let p = view
        .pods
        .iter()
        .find(|p| p.namespace == NAMESPACE && p.name == pod)
        .unwrap_or_else(|| panic!("{pod} not in /placement"));
    let c = &p.containers[0];
    (c.cpus.clone(), c.pool == "exclusive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn kubectl_resize_grows_shrinks_and_shows_a_refusal() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start("cl-resize").await;
    let image = c.env.image.clone();

    // Grow: 500m (node shared pool) → 1 CPU (exclusive), then back.
    c.apply(&[manifest("resizable", "500m", &image)]);
    c.wait_running(&["resizable"]).await;
    c.wait_kernel(&[("resizable", "app", "0-1")]).await;
    c.assert_consistent().await;

    resize(&c, "resizable", "1");
    wait_actuated(&c, "resizable", "1").await;
    let seen = c.wait_kernel(&[("resizable", "app", "1")]).await;
    assert_eq!(
        seen["resizable"]["app"].quota, -1,
        "exclusive: no CFS quota"
    );
    assert_eq!(placed(&c.placement(), "resizable"), ("1".to_string(), true));
    c.assert_consistent().await;

    resize(&c, "resizable", "500m");
    wait_actuated(&c, "resizable", "500m").await;
    c.wait_kernel(&[("resizable", "app", "0-1")]).await;
    assert!(
        !placed(&c.placement(), "resizable").1,
        "back on the shared pool"
    );
    c.assert_consistent().await;
    let metrics = c.shim.metrics_text();
    assert_eq!(
        sample(&metrics, "numa_shim_resizes_total{outcome=\"applied\"}"),
        2.0,
        "{metrics}"
    );
    c.delete(&["resizable"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !c.api_pods().is_empty() {
        assert!(Instant::now() < deadline, "resizable not gone");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Refused: admitted with CPU 1 exclusive, shrinking to 500m would take its promised CPU.
    c.apply(&[manifest("pinned", "1", &image)]);
    c.wait_running(&["pinned"]).await;
    c.wait_kernel(&[("pinned", "app", "1")]).await;
    resize(&c, "pinned", "500m");
    let deadline = Instant::now() + Duration::from_secs(90);
    let conditions = loop {
        let conditions = resize_conditions(&pod_json(&c, "pinned"));
        if conditions.iter().any(|c| c.contains("it keeps the 1 CPUs")) {
            break conditions;
        }
        assert!(
            Instant::now() < deadline,
            "no refusal in the conditions: {conditions:?}\nkubelet log:\n{}",
            super::rk::tail(&c.kubelet.log_text(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("conditions after the refused resize: {conditions:#?}");
    let describe = c.kubectl(&["describe", "pod", "pinned"]);
    eprintln!("kubectl describe pod pinned:\n{describe}");
    // The container runs on as it was: kernel, numa-shim and the kubelet's status.
    c.wait_kernel(&[("pinned", "app", "1")]).await;
    assert_eq!(placed(&c.placement(), "pinned"), ("1".to_string(), true));
    let p = pod_json(&c, "pinned");
    assert_eq!(
        p["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"], "1",
        "the kubelet reports the old resources"
    );
    assert!(
        sample(
            &c.shim.metrics_text(),
            "numa_shim_resizes_total{outcome=\"refused\"}"
        ) >= 1.0
    );
    c.assert_consistent().await;

    // Put back: the condition goes.
    resize(&c, "pinned", "1");
    wait_actuated(&c, "pinned", "1").await;
    c.assert_consistent().await;
}

/// `kubectl patch pod POD --subresource resize` of `spec.resources` to `cpu` (256Mi). Kubelets
/// before v1.36 do not declare the node feature `InPlacePodLevelResourcesVerticalScaling`, and
/// the API server v1.37.2 refuses the patch for a pod bound to such a node: `false` after
/// checking that refusal.
fn patch_budget(c: &Cluster, pod: &str, cpu: &str) -> bool {
    let patch = format!(
        r#"{{"spec":{{"resources":{{"requests":{{"cpu":"{cpu}","memory":"256Mi"}},"limits":{{"cpu":"{cpu}","memory":"256Mi"}}}}}}}}"#
    );
    let args = [
        "-n",
        NAMESPACE,
        "patch",
        "pod",
        pod,
        "--subresource",
        "resize",
        "-p",
        &patch,
    ];
    if c.env.minor() >= 36 {
        c.cp.kubectl(&args);
        return true;
    }
    let err =
        c.cp.try_kubectl(&args, None)
            .expect_err("a pod-level resize on a kubelet before v1.36 is refused");
    eprintln!("kubelet {}: {err}", c.env.version);
    assert!(
        err.contains("pod update requires features InPlacePodLevelResourcesVerticalScaling which are not available on node"),
        "{err}"
    );
    false
}

/// A pod with a pod-level budget (`spec.resources`) and two containers without resources of
/// their own (an app and a restartable-init sidecar), 500m of CPU: numa-shim runs it on the
/// node's shared pool under the budget's quota. `kubectl patch pod --subresource resize` of
/// `spec.resources` to 1 CPU: the kubelet v1.37.2 (gate `InPlacePodLevelResourcesVerticalScaling`,
/// beta, on) sends UpdatePodSandboxResources for the pod cgroup's limit and then its request,
/// then UpdateContainerResources for both containers with the new quota. The whole budget gets a
/// bubble (the one allocatable CPU, 1) as an admission would: both containers move from the
/// node shared pool to that pod pool; back at 500m (a budget admitted fractional may) they
/// return to the node shared pool. The kernel's cpusets and quota, numa-shim's budget and the
/// pod's status resources agree after the grow and after the shrink back. On this machine (one
/// allocatable CPU) the budget cannot hold an exclusive container beside its pool; the
/// multi-NUMA guest does that (integration/numa-vm/resize-guest.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn kubectl_resize_of_a_pod_level_budget() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start("cl-resize-pod").await;
    let image = c.env.image.clone();
    let sleep = "command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]";
    c.apply(&[format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: budget\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  resources:\n    \
         requests: {{cpu: \"500m\", memory: \"256Mi\"}}\n    \
         limits: {{cpu: \"500m\", memory: \"256Mi\"}}\n  initContainers:\n  - name: sidecar\n    \
         image: {image}\n    imagePullPolicy: Never\n    restartPolicy: Always\n    {sleep}\n  \
         containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Never\n    {sleep}\n"
    )]);
    c.wait_running(&["budget"]).await;
    let seen = c
        .wait_kernel(&[("budget", "app", "0-1"), ("budget", "sidecar", "0-1")])
        .await;
    assert_eq!(seen["budget"]["app"].quota, 50_000, "the budget's quota");
    c.assert_consistent().await;

    for (cpu, quota, cpus, bubble) in [
        ("1", 100_000, "1", Some("1")),
        ("500m", 50_000, "0-1", None),
    ] {
        if !patch_budget(&c, "budget", cpu) {
            return;
        }
        let p = wait_budget_actuated(&c, "budget", cpu).await;
        eprintln!(
            "after the resize to {cpu}: status.resources {} containerStatuses {}",
            p["status"]["resources"], p["status"]["containerStatuses"][0]["resources"]
        );
        // The kernel: both containers under the new quota, on the pod pool / node shared pool.
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let seen = c.kernel().await;
            let got: Vec<(String, i64)> = ["app", "sidecar"]
                .iter()
                .map(|n| {
                    let s = &seen["budget"][*n];
                    (s.cpus.clone(), s.quota)
                })
                .collect();
            if got == [(cpus.to_string(), quota), (cpus.to_string(), quota)] {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kernel {got:?}, want cpus {cpus}, quota {quota}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // numa-shim: a bubble for the whole budget, none for the fractional one.
        let view = c.placement();
        let pod = view.pods.iter().find(|p| p.name == "budget").unwrap();
        assert_eq!(pod.cpus.as_deref(), bubble, "the pod's bubble: {pod:?}");
        let list = super::rk::podresources(&c.shim.pod_resources(), &["list"]);
        eprintln!("PodResources List: {list}");
        c.assert_consistent().await;
    }
    let metrics = c.shim.metrics_text();
    assert_eq!(
        sample(&metrics, "numa_shim_resizes_total{outcome=\"applied\"}"),
        2.0,
        "one per resize of the budget\n{metrics}"
    );
    assert_eq!(
        sample(&metrics, "numa_shim_resizes_total{outcome=\"refused\"}"),
        0.0,
        "{metrics}"
    );
}

/// The pod-level grow of a whole-CPU budget on the real kubelet. The kubelet's allocatable must
/// hold the grown budget, so this rig runs without a CPU reservation (numa-shim accepts one with
/// a warning; the kubelet's own CPU Manager is off): two allocatable CPUs. A 1-CPU budget with
/// an app and a restartable-init sidecar, neither with resources of its own: both run on the
/// pod pool (the budget's one CPU). `kubectl patch --subresource resize` of `spec.resources` to
/// 2 CPUs: the pod pool grows to both CPUs, keeping the one it had; back to 1 CPU: the pool is
/// the CPU it was admitted with. The kernel's cpusets and quota, numa-shim's `/placement`, the
/// pod-level `cpu_ids` of PodResources and the pod's status resources agree after each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn kubectl_resize_grows_and_shrinks_a_pod_pool() {
    let _serial = SERIAL.lock().await;
    let settings = super::rk::settings("pod").replace("reservedSystemCPUs: \"0\"\n", "");
    assert!(!settings.contains("reservedSystemCPUs"), "{settings}");
    let c = Cluster::start_with("cl-resize-pool", &settings, &[]).await;
    let image = c.env.image.clone();
    let sleep = "command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]";
    c.apply(&[format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pool\nspec:\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 2\n  resources:\n    \
         requests: {{cpu: \"1\", memory: \"256Mi\"}}\n    \
         limits: {{cpu: \"1\", memory: \"256Mi\"}}\n  initContainers:\n  - name: sidecar\n    \
         image: {image}\n    imagePullPolicy: Never\n    restartPolicy: Always\n    {sleep}\n  \
         containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Never\n    {sleep}\n"
    )]);
    c.wait_running(&["pool"]).await;
    let pod_cpus = |c: &Cluster| {
        c.placement()
            .pods
            .iter()
            .find(|p| p.name == "pool")
            .and_then(|p| p.cpus.clone())
            .unwrap_or_default()
    };
    let admitted = pod_cpus(&c);
    assert_eq!(CpuSet::parse(&admitted).unwrap().len(), 1, "{admitted}");
    c.wait_kernel(&[("pool", "app", &admitted), ("pool", "sidecar", &admitted)])
        .await;
    c.assert_consistent().await;

    for (cpu, quota, n) in [("2", 200_000, 2), ("1", 100_000, 1)] {
        if !patch_budget(&c, "pool", cpu) {
            return;
        }
        let p = wait_budget_actuated(&c, "pool", cpu).await;
        eprintln!(
            "after the resize to {cpu}: status.resources {}",
            p["status"]["resources"]
        );
        let pool = pod_cpus(&c);
        let set = CpuSet::parse(&pool).unwrap();
        assert_eq!(set.len(), n, "pod pool {pool}");
        assert!(
            CpuSet::parse(&admitted).unwrap().is_subset(&set),
            "the admitted CPU {admitted} stays in {pool}"
        );
        let seen = c
            .wait_kernel(&[("pool", "app", &pool), ("pool", "sidecar", &pool)])
            .await;
        assert_eq!(seen["pool"]["app"].quota, quota, "the budget's quota");
        assert_eq!(seen["pool"]["sidecar"].quota, quota);
        let list = super::rk::podresources(&c.shim.pod_resources(), &["list"]);
        let listed = list["pod_resources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "pool")
            .cloned()
            .unwrap_or_else(|| panic!("pool not in PodResources List: {list}"));
        let ids: CpuSet = listed["cpu_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                v.as_str()
                    .and_then(|s| s.parse().ok())
                    .or(v.as_u64().map(|n| n as u32))
                    .unwrap_or(0)
            })
            .collect();
        assert_eq!(ids, set, "PodResources pod-level cpu_ids: {listed}");
        c.assert_consistent().await;
    }
    let metrics = c.shim.metrics_text();
    assert_eq!(
        sample(&metrics, "numa_shim_resizes_total{outcome=\"applied\"}"),
        2.0,
        "{metrics}"
    );
}

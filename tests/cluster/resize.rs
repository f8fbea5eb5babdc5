//! In-place resize with the real kubelet (docs/resize.md): `kubectl patch pod --subresource
//! resize` on a pod numa-shim placed. On this machine (2 CPUs, CPU 0 reserved: the kubelet's
//! allocatable is one CPU) a grow is a shared-pool container becoming exclusive (500m → 1) and
//! back; the refused resize is a container admitted with an exclusive CPU shrinking below it
//! (1 → 500m), which the kubelet allows and numa-shim refuses by the promised-CPUs rule. After
//! each step the kernel's cpusets, numa-shim's `/placement` and `kubectl get pod` agree.

use std::time::{Duration, Instant};

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

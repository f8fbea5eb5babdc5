//! `numa-shim serve` itself with `podKnowledge: apiserver` in front of the private containerd:
//! the pod spec comes from the real API server, the refusal reaches the caller as
//! FAILED_PRECONDITION with the kubelet's reason, and the configuration's default refusal
//! reports write the Event and the Failed status. crictl plays the kubelet's RunPodSandbox.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use numa_shim::testing::process::ShimProcess;

use super::support::*;

/// `numa-shim serve --config config` (which names `socket`), its log at `log`; answering within
/// 90 s.
pub(super) async fn serve(config: &Path, log: &Path, socket: &Path) -> ShimProcess {
    let args = vec![
        "serve".to_string(),
        "--config".to_string(),
        config.display().to_string(),
    ];
    let mut shim = ShimProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_numa-shim")),
        args,
        socket,
        log,
    );
    shim.wait_answering(Duration::from_secs(90)).await;
    shim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane and containerd (integration/apiserver-tests.sh)"]
async fn serve_refuses_a_pod_from_the_api_server_and_reports_it() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let (containerd, crictl, run) = (
        var("NUMA_SHIM_IT_CONTAINERD"),
        var("NUMA_SHIM_IT_CRICTL"),
        PathBuf::from(var("NUMA_SHIM_IT_RUN")),
    );
    let node = TestNode::new(&cp, "serve");
    // The tutorial's empty-shared-pool scaled to two CPUs: exclusive requests take the whole
    // 2-CPU budget while a sidecar needs the pod's shared pool.
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"empty-shared-pool","namespace":"{ns}"}},
          "spec":{{"nodeName":"{node}",
            "resources":{{"requests":{{"cpu":"2","memory":"256Mi"}},"limits":{{"cpu":"2","memory":"256Mi"}}}},
            "initContainers":[
              {{"name":"metrics-sidecar","image":"busybox","restartPolicy":"Always",
                "resources":{{"requests":{{"cpu":"1","memory":"64Mi"}},"limits":{{"cpu":"1","memory":"64Mi"}}}}}},
              {{"name":"logging-sidecar","image":"busybox","restartPolicy":"Always"}}],
            "containers":[{{"name":"main-app","image":"busybox",
                "resources":{{"requests":{{"cpu":"1","memory":"128Mi"}},"limits":{{"cpu":"1","memory":"128Mi"}}}}}}]}}}}"#,
        ns = node.namespace,
        node = node.name
    );
    let uid = cp.create(&pod);

    let dir = run.join("serve-apiserver");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("cri.sock");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: unix://{sock}\nruntime: unix://{containerd}\nstateDir: {state}\n\
             podResourcesSocket: none\npodKnowledge: apiserver\nkubeconfig: {kubeconfig}\n\
             nodeName: {node}\ncpuManagerPolicy: static\nreservedSystemCPUs: \"\"\n\
             topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n\
             memoryManagerPolicy: None\n",
            sock = socket.display(),
            state = dir.join("state").display(),
            kubeconfig = cp.dir.join("numa-shim.kubeconfig").display(),
            node = node.name,
        ),
    )
    .unwrap();
    let _shim = serve(&config, &dir.join("numa-shim.log"), &socket).await;

    // RunPodSandbox as the kubelet sends it for this pod (pod-level limits in the sandbox).
    let sandbox = dir.join("sandbox.json");
    std::fs::write(
        &sandbox,
        format!(
            r#"{{"metadata":{{"name":"empty-shared-pool","namespace":"{ns}","uid":"{uid}","attempt":0}},
              "linux":{{"security_context":{{"namespace_options":{{"network":2}}}},
                "resources":{{"cpu_period":100000,"cpu_quota":200000,"cpu_shares":2048,"memory_limit_in_bytes":268435456}}}}}}"#,
            ns = node.namespace
        ),
    )
    .unwrap();
    let out = Command::new(&crictl)
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", socket.display()))
        .args(["--timeout", "30s", "runp"])
        .arg(&sandbox)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the pod was admitted: {stderr}");
    assert!(
        stderr.contains("FailedPrecondition")
            && stderr.contains(
                "TopologyAffinityError: Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
            ),
        "{stderr}"
    );

    let phase = || {
        cp.kubectl(&[
            "-n",
            &node.namespace,
            "get",
            "pod",
            "empty-shared-pool",
            "-o",
            "jsonpath={.status.phase}/{.status.reason}",
        ])
    };
    eventually("the pod ended Failed", 30, || {
        phase() == "Failed/TopologyAffinityError"
    })
    .await;
    let events = cp.kubectl(&[
        "-n",
        &node.namespace,
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.uid={uid},source=numa-shim"),
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert_eq!(events, "TopologyAffinityError");
}

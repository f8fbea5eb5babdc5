//! The real `numa-shim serve` binary, with placement on (static CPU policy, pod scope) in front of
//! the end-to-end tests' fake runtime (tests/support/e2e/runtime.rs), serves PodResources on
//! `--pod-resources-socket`: a pod placed through the relay (inferred from CRI) shows up with its
//! bubble, leaves after StopPodSandbox, and GetAllocatableResources gives all CPUs minus the
//! reserved one.

use std::path::Path;
use std::time::{Duration, Instant};

use cri::runtime_service_client::RuntimeServiceClient;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::proto::podresources::v1 as pr;
use numa_shim::testing::process::ShimProcess;
use numa_shim::topology::SyntheticSpec;
use numa_shim::transport::unix_channel;
use pr::pod_resources_lister_client::PodResourcesListerClient;

use numa_shim::testing::e2e::runtime;

/// `numa-shim serve` in `dir` in front of the fake runtime at `runtime`, on bare socket paths (no
/// `unix://`), its log `serve.log`; answering.
async fn start_serve(dir: &Path, runtime: &Path) -> ShimProcess {
    let topology = dir.join("topology.json");
    let machine = SyntheticSpec::new(2, 1, 4, 1, 1).build().unwrap();
    std::fs::write(&topology, machine.to_json().unwrap()).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
         topologyManagerPolicy: best-effort\ntopologyManagerScope: pod\n",
    )
    .unwrap();
    let path = |p: &Path| p.display().to_string();
    let args = [
        "serve",
        "--listen",
        &path(&dir.join("cri.sock")),
        "--runtime",
        &path(runtime),
        "--config",
        &path(&config),
        "--topology",
        &path(&topology),
        "--state-dir",
        &path(&dir.join("state")),
        "--pod-knowledge",
        "cri",
        "--pod-resources-socket",
        &path(&dir.join("pod-resources/kubelet.sock")),
        "--kubelet-pod-resources-socket",
        "none",
    ];
    ShimProcess::start(
        Path::new(env!("CARGO_BIN_EXE_numa-shim")),
        args.map(String::from).to_vec(),
        &dir.join("cri.sock"),
        &dir.join("serve.log"),
    )
    .await
}

async fn wait_for(path: &Path) {
    let started = Instant::now();
    while !path.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn resources(milli: i64, mem: i64) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: milli * 100,
        cpu_shares: milli * 1024 / 1000,
        memory_limit_in_bytes: mem,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_pod_resources_for_pods_placed_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let runtime_path = dir.path().join("runtime.sock");
    let _runtime = runtime::Runtime::start(&runtime_path, runtime::Fake::default()).await;
    let serve = start_serve(dir.path(), &runtime_path).await;
    let pr_path = dir.path().join("pod-resources/kubelet.sock");
    wait_for(&pr_path).await;
    let mut podres = PodResourcesListerClient::new(unix_channel(&pr_path));
    let mut relay = RuntimeServiceClient::new(unix_channel(&dir.path().join("cri.sock")));

    let alloc = podres
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        alloc.cpu_ids,
        (1..8).collect::<Vec<i64>>(),
        "all CPUs minus reserved 0"
    );
    assert!(podres
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner()
        .pod_resources
        .is_empty());

    let sandbox_config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "web".into(),
            uid: "uid-web".into(),
            namespace: "shop".into(),
            attempt: 0,
        }),
        linux: Some(cri::LinuxPodSandboxConfig {
            resources: Some(resources(2000, 2 << 30)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sandbox = relay
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    relay
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                linux: Some(cri::LinuxContainerConfig {
                    resources: Some(resources(2000, 2 << 30)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .unwrap();

    let list = podres
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.pod_resources.len(), 1, "{list:?}");
    let pod = &list.pod_resources[0];
    assert_eq!((pod.namespace.as_str(), pod.name.as_str()), ("shop", "web"));
    assert_eq!(pod.cpu_ids.len(), 2, "the pod bubble: {pod:?}");
    assert!(!pod.cpu_ids.contains(&0), "never the reserved CPU");
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app"], "the placeholder is not listed");
    let got = podres
        .get(pr::GetPodResourcesRequest {
            pod_name: "web".into(),
            pod_namespace: "shop".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.as_ref(), Some(pod));

    relay
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: sandbox,
        })
        .await
        .unwrap();
    let list = podres
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(list.pod_resources.is_empty(), "{list:?}");

    // SIGTERM: the socket numa-shim created goes away with it.
    serve.signal("TERM");
    let started = Instant::now();
    while pr_path.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "socket left behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

//! What the CRI bench drivers share (benches/relay_load.rs, benches/relay_memory.rs): a CRI
//! client on a unix socket and the one pod shape they start, a sandbox with one `sleep`
//! container.

use std::path::Path;

use crate::proto::cri::v1 as cri;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

pub type Client = cri::runtime_service_client::RuntimeServiceClient<Channel>;
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A RuntimeService client on the unix socket at `path`.
pub async fn connect(path: &Path) -> Result<Client, Error> {
    let path = path.to_path_buf();
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await?;
    Ok(cri::runtime_service_client::RuntimeServiceClient::new(
        channel,
    ))
}

/// Kubelet-shaped CFS and memory resources: `millis` of CPU (quota over a 100 ms period, shares
/// as the kubelet derives them) and 64 MiB.
pub fn resources(millis: i64) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: millis * 100,
        cpu_shares: millis * 1024 / 1000,
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    }
}

/// The sandbox of pod `name` in `namespace`, its cgroup under `cgroup_parent`, its logs under
/// `log_dir`, with the pod's `resources` when given (what numa-shim infers a pod from).
pub fn sandbox_config(
    name: &str,
    namespace: &str,
    cgroup_parent: &str,
    log_dir: &Path,
    resources: Option<cri::LinuxContainerResources>,
) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("{name}-uid"),
            namespace: namespace.into(),
            attempt: 0,
        }),
        log_directory: log_dir.join(name).display().to_string(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: format!("{cgroup_parent}/pod-{name}"),
            resources,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod's one container, `app`: `sleep 3600` in `image` with `resources`.
pub fn container_config(
    image: &str,
    resources: cri::LinuxContainerResources,
) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        log_path: "app.log".into(),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(resources),
            ..Default::default()
        }),
        ..Default::default()
    }
}

//! numa-shim's own CRI client to the runtime: the calls it makes itself (cpuset updates, start-up
//! reconciliation), never on behalf of the kubelet. A tonic channel over the runtime's unix socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

use crate::proto::cri::v1 as cri;
use crate::proto::cri::v1::runtime_service_client::RuntimeServiceClient;

/// Largest message numa-shim accepts from the runtime on its own calls.
const MAX_MESSAGE: usize = 16 << 20;

/// A lazily connected channel to a unix-socket gRPC server.
pub fn unix_channel(path: &Path) -> Channel {
    let path: PathBuf = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(2))
        .connect_with_connector_lazy(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
}

/// The runtime client.
#[derive(Debug, Clone)]
pub struct Runtime {
    client: RuntimeServiceClient<Channel>,
}

impl Runtime {
    pub fn new(socket: &Path) -> Self {
        let client = RuntimeServiceClient::new(unix_channel(socket))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Self { client }
    }

    /// Sets a running container's cpuset (only `cpuset_cpus`/`cpuset_mems`, as the kubelet's CPU
    /// manager reconcile does).
    pub async fn update_cpuset(
        &self,
        container_id: &str,
        cpus: &str,
        mems: Option<&str>,
    ) -> Result<(), tonic::Status> {
        let linux = cri::LinuxContainerResources {
            cpuset_cpus: cpus.to_string(),
            cpuset_mems: mems.unwrap_or_default().to_string(),
            ..Default::default()
        };
        let request = cri::UpdateContainerResourcesRequest {
            container_id: container_id.to_string(),
            linux: Some(linux),
            ..Default::default()
        };
        self.client
            .clone()
            .update_container_resources(request)
            .await
            .map(|_| ())
    }

    /// Every sandbox the runtime has.
    pub async fn sandboxes(&self) -> Result<Vec<cri::PodSandbox>, tonic::Status> {
        let request = cri::ListPodSandboxRequest::default();
        Ok(self
            .client
            .clone()
            .list_pod_sandbox(request)
            .await?
            .into_inner()
            .items)
    }

    /// Every container the runtime has.
    pub async fn containers(&self) -> Result<Vec<cri::Container>, tonic::Status> {
        let request = cri::ListContainersRequest::default();
        Ok(self
            .client
            .clone()
            .list_containers(request)
            .await?
            .into_inner()
            .containers)
    }

    /// The container's status with the runtime's verbose info (pid for cgroup reads).
    pub async fn container_status(
        &self,
        id: &str,
    ) -> Result<cri::ContainerStatusResponse, tonic::Status> {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        };
        Ok(self
            .client
            .clone()
            .container_status(request)
            .await?
            .into_inner())
    }
}

/// The process id in a verbose ContainerStatus `info` (containerd: `info` JSON with `pid`).
pub fn pid_of(status: &cri::ContainerStatusResponse) -> Option<u32> {
    let info = status.info.get("info")?;
    let value: serde_json::Value = serde_json::from_str(info).ok()?;
    value
        .get("pid")?
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 0)
}
